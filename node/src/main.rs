//! `tuic-node`: run the node, set its password, or print its connection token.

use std::os::unix::process::CommandExt;

/// glibc's malloc keeps freed row-sized blocks inside its heaps, so an ended 1,000 × 1,000
/// session left ~50 MB resident for the life of the process. With a fixed mmap threshold of
/// 16 KiB every block that large (a row of a wide grid, its scrollback) is its own mapping and
/// goes back to the OS when freed; ordinary sessions' rows stay below it. A fixed threshold
/// also stops glibc raising it after each free. glibc reads tunables from the environment
/// before `main`, and setting them from code would take `unsafe` FFI, so the node
/// re-executes itself once with the variable set.
const PURGE_ENV: &str = tuic_node::ALLOCATOR_ENV;
const TUNABLES: &str = "glibc.malloc.mmap_threshold=16384:glibc.malloc.trim_threshold=131072";

fn main() -> std::process::ExitCode {
    if std::env::var_os(PURGE_ENV).is_none()
        && let Ok(exe) = std::env::current_exe()
    {
        // Only returns on failure (the binary was replaced, say): then run as we are.
        let e = std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .env(PURGE_ENV, TUNABLES)
            .exec();
        eprintln!("tuic-node: running without {PURGE_ENV} ({e})");
    }
    tuic_node::cli::main_with_name("tuic-node")
}
