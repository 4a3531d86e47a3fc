//! `tuic-hub`: a node that also federates other nodes.
//!
//! Today the hub runs everything a node runs for its own machine; the federation commands
//! (`connect`, `disconnect`) and peer links arrive with the federation work and plug into
//! the same [`tuic_node::cli`] entry point.

fn main() -> std::process::ExitCode {
    tuic_node::cli::main_with_name("tuic-hub")
}
