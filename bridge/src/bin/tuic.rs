//! `tuic`: the command line client of the local tuic node.

fn main() -> std::process::ExitCode {
    tuic_bridge::cli::main()
}
