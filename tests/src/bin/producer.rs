//! Test helper: writes a deterministic stream to stdout (normally a PTY).
//!
//! `producer records N SEED` writes `records::record_fragments` with a flush per fragment and
//! an occasional yield, so the node sees irregular reads.

use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("");
    let out = std::io::stdout();
    let mut out = out.lock();
    match mode {
        "records" => {
            let n = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
            let seed = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(7);
            for (k, frag) in tuic_tests::records::record_fragments(n, seed)
                .iter()
                .enumerate()
            {
                out.write_all(frag).expect("write");
                out.flush().expect("flush");
                if k % 50 == 0 {
                    // Give the reader a chance to see a partial frame.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
        _ => {
            eprintln!("usage: producer records N SEED");
            std::process::exit(2);
        }
    }
}
