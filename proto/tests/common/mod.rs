//! Helpers shared by the integration tests: a tiny seeded PRNG (SplitMix64), so every random
//! interleaving is reproducible from its seed without a dependency; a directory entry; the
//! golden-sample files under `tests/data/<dir>/`; and the simulators' harness ([`sim`]).

#![allow(dead_code, unreachable_pub)]

pub mod sim;

use tuic_proto::peer::PeerEntry;

/// A directory entry that names only the peer.
pub fn peer_entry(tuic_session: impl Into<String>) -> PeerEntry {
    PeerEntry {
        tuic_session: tuic_session.into(),
        name: None,
        orchestrator: false,
        address: None,
        alias: None,
        session_id: None,
        path: None,
    }
}

/// SplitMix64: small, fast, good enough for test schedules.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `p` percent.
    pub fn chance(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}

/// The golden sample `tests/data/{dir}/{name}.json`.
pub fn sample(dir: &str, name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(dir)
        .join(format!("{name}.json"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The sample names (file stems) in `tests/data/{dir}/` and the names a test expects, each
/// sorted, for an equality check that every file is covered and every name has a file.
pub fn sample_names<'a>(
    dir: &str,
    expected: impl IntoIterator<Item = &'a str>,
) -> (Vec<String>, Vec<String>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(dir);
    let mut files: Vec<String> = std::fs::read_dir(path)
        .expect("data dir")
        .map(|e| {
            e.expect("entry")
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".json")
                .to_owned()
        })
        .collect();
    files.sort();
    let mut names: Vec<String> = expected.into_iter().map(str::to_owned).collect();
    names.sort();
    (files, names)
}
