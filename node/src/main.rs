//! `tuic-node`: run the node, set its password, or print its connection token.

fn main() -> std::process::ExitCode {
    tuic_node::cli::main_with_name("tuic-node")
}
