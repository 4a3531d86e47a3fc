//! Workload (a): a client streams a remote session through the hub
//! (`WS /sessions/<conn>%2F<id>/stream?binary=1`) and checks every byte.
//!
//! The producer is a shell in a session on a node that prints a counted sequence: line `k` is
//! `k` as 15 zero-padded digits and `\n` (output post-processing off, so 16 bytes a line),
//! paced in batches so that output keeps flowing while faults happen. Byte `o` of the stream is
//! therefore known in advance, and the client compares each byte it receives with it. When the
//! stream breaks (hub killed, connection reset, a stall), the client reconnects with
//! `from_byte=<bytes verified>`, so the node replays from its retained output and no byte is
//! skipped or counted twice. The pace keeps a gap of a minute within the node's 2 MiB ring.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio_tungstenite::tungstenite::Message;

/// Bytes per produced line.
pub const LINE: u64 = 16;

/// The producer's shell script: `lines` lines in batches of `batch`, one batch per 100 ms,
/// then it stays alive (an exited session would end the stream early).
pub fn producer_script(lines: u64, batch: u64) -> String {
    format!(
        "stty -opost -echo 2>/dev/null; i=0; while [ $i -lt {lines} ]; do \
         seq -f %015.0f $i $((i+{b}-1)); i=$((i+{b})); sleep 0.1; done; exec sleep 100000",
        b = batch
    )
}

/// Byte `offset` of the produced sequence.
fn expected_byte(offset: u64) -> u8 {
    let (line, pos) = (offset / LINE, offset % LINE);
    if pos == LINE - 1 {
        return b'\n';
    }
    // Digit `pos` of a 15-digit zero-padded number.
    let div = 10u64.pow((LINE - 2 - pos) as u32);
    b'0' + ((line / div) % 10) as u8
}

/// What the stream client saw.
#[derive(Debug, Default)]
pub struct StreamReport {
    /// Bytes received in order and equal to the expected sequence.
    pub ok_bytes: u64,
    /// Bytes expected in total.
    pub expected: u64,
    /// Streams opened after the first.
    pub reconnects: u64,
    /// The first violation (wrong byte, lag past the ring, early exit), if any.
    pub error: Option<String>,
}

/// Live progress, readable while the client runs.
#[derive(Debug, Default)]
pub struct Progress {
    /// Bytes verified so far.
    pub ok_bytes: AtomicU64,
}

/// Streams `address` (`<conn>/<session_id>`) through the hub at `hub_socket` until `lines`
/// lines have been verified or `deadline` passes. `socket` is read again at every reconnect
/// (the hub's socket path is stable across restarts).
pub async fn run(
    hub_socket: PathBuf,
    address: String,
    lines: u64,
    deadline: Instant,
    progress: Arc<Progress>,
) -> StreamReport {
    let mut rep = StreamReport {
        expected: lines * LINE,
        ..StreamReport::default()
    };
    let enc = address.replace('/', "%2F");
    let mut first = true;
    while rep.ok_bytes < rep.expected && Instant::now() < deadline {
        if !first {
            rep.reconnects += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        first = false;
        let url = format!(
            "ws://localhost/sessions/{enc}/stream?binary=1&from_byte={}",
            rep.ok_bytes
        );
        let Ok(Ok(sock)) = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::UnixStream::connect(&hub_socket),
        )
        .await
        else {
            continue;
        };
        let Ok(Ok((mut ws, _))) = tokio::time::timeout(
            Duration::from_secs(5),
            tokio_tungstenite::client_async(url, sock),
        )
        .await
        else {
            continue;
        };
        loop {
            // A stall (no frame for 10 s while bytes are due) reconnects: the resume offset
            // makes that harmless.
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = match tokio::time::timeout(left.min(Duration::from_secs(10)), ws.next()).await
            {
                Ok(Some(Ok(m))) => m,
                _ => break,
            };
            match msg {
                Message::Binary(b) => {
                    for &byte in b.iter() {
                        if rep.ok_bytes >= rep.expected {
                            rep.error = Some(format!(
                                "byte past the end of the sequence at offset {}",
                                rep.ok_bytes
                            ));
                            return rep;
                        }
                        let want = expected_byte(rep.ok_bytes);
                        if byte != want {
                            rep.error = Some(format!(
                                "byte {} is {byte:#04x}, expected {want:#04x}",
                                rep.ok_bytes
                            ));
                            return rep;
                        }
                        rep.ok_bytes += 1;
                    }
                    progress.ok_bytes.store(rep.ok_bytes, Ordering::Relaxed);
                    if rep.ok_bytes == rep.expected {
                        return rep;
                    }
                }
                Message::Text(t) => {
                    let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap_or_default();
                    match v["type"].as_str() {
                        Some("lagged") => {
                            rep.error = Some(format!(
                                "stream lagged at byte {} (missed {}): the gap outgrew the ring",
                                rep.ok_bytes, v["missed"]
                            ));
                            return rep;
                        }
                        Some("exit") => {
                            rep.error = Some(format!("producer exited at byte {}", rep.ok_bytes));
                            return rep;
                        }
                        // `parsed` events carry no output bytes.
                        _ => {}
                    }
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
    }
    if rep.ok_bytes < rep.expected && rep.error.is_none() {
        rep.error = Some(format!(
            "only {} of {} bytes arrived before the deadline",
            rep.ok_bytes, rep.expected
        ));
    }
    rep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_bytes_spell_the_counted_lines() {
        let text: Vec<u8> = (0..3 * LINE).map(expected_byte).collect();
        assert_eq!(text, b"000000000000000\n000000000000001\n000000000000002\n");
        let line = 123_456_789_012_345u64;
        let got: Vec<u8> = (0..LINE).map(|p| expected_byte(line * LINE + p)).collect();
        assert_eq!(got, b"123456789012345\n");
    }
}
