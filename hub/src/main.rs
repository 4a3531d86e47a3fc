//! `tuic-hub`: a node that also federates other nodes.

fn main() -> std::process::ExitCode {
    tuic_hub::cli::main()
}
