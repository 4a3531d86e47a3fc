//! `tuic-node`: run the node, set its password, or print its connection token.

use std::os::unix::process::CommandExt;

/// mimalloc instead of glibc's malloc: a terminal's grid is thousands of row-sized blocks and
/// glibc keeps freed blocks inside its heaps, so an ended 1,000 × 1,000 session left ~50 MB
/// resident for the life of the process. mimalloc gives freed pages back to the OS
/// (`MADV_DONTNEED`) — at once when its purge delay is 0, see [`PURGE_ENV`].
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc reads its options from the environment once, before `main`, and a purge it
/// delays runs only when the freeing thread's heap is visited again (an idle node never
/// visits it). Delay 0 purges when the memory is freed. Setting an option from code would
/// take `unsafe` FFI, so the node re-executes itself once with the variable set.
const PURGE_ENV: &str = tuic_node::ALLOCATOR_ENV;

fn main() -> std::process::ExitCode {
    if std::env::var_os(PURGE_ENV).is_none()
        && let Ok(exe) = std::env::current_exe()
    {
        // Only returns on failure (the binary was replaced, say): then run as we are.
        let e = std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .env(PURGE_ENV, "0")
            .exec();
        eprintln!("tuic-node: running without {PURGE_ENV}=0 ({e})");
    }
    tuic_node::cli::main_with_name("tuic-node")
}
