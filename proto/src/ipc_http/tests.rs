//! Unit, golden and fuzz-style tests of the IPC response parser.

use super::*;

const MAX_BODY: u64 = 1 << 20;

/// Feeds `input` in pieces of `step` bytes, then EOF; returns the response or the error.
fn parse_split(input: &[u8], step: usize) -> Result<Response, HttpError> {
    let mut c = ResponseCollector::new(MAX_BODY);
    let mut done = None;
    for piece in input.chunks(step.max(1)) {
        // Keep feeding after completion: bytes past the response must fail the same way
        // whatever the split.
        if let Some(r) = c.feed(piece)? {
            done = Some(r);
        }
    }
    match done {
        Some(r) => Ok(r),
        None => c.feed_eof(),
    }
}

fn render(r: &Result<Response, HttpError>) -> String {
    match r {
        Ok(r) => {
            let mut s = format!("status {} {}\n", r.head.status, r.head.reason);
            for (n, v) in &r.head.headers {
                s.push_str(&format!("{n}: {v}\n"));
            }
            s.push('\n');
            s.push_str(&r.text());
            s.push('\n');
            s
        }
        Err(e) => format!("error {e}\n"),
    }
}

macro_rules! golden {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let input = include_bytes!(concat!(
                "../../tests/data/ipc_http/", stringify!($name), ".http"
            ));
            let expected = include_str!(concat!(
                "../../tests/data/ipc_http/", stringify!($name), ".expected"
            ));
            // The same result whether the bytes arrive at once or one at a time.
            for step in [input.len(), 1, 2, 3, 7] {
                assert_eq!(render(&parse_split(input, step)), expected, "step {step}");
            }
        }
    )*};
}

mod golden {
    use super::*;
    golden!(
        interim_then_json,
        chunked_split_utf8,
        no_content_ignores_framing,
        close_delimited_404,
        conflicting_lengths,
        truncated_chunk,
        bad_chunk_size,
        switching_protocols,
    );
}

#[test]
fn content_length_body_completes_without_eof() {
    let mut c = ResponseCollector::new(MAX_BODY);
    let r = c
        .feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi")
        .unwrap()
        .expect("complete before EOF");
    assert_eq!(r.body, b"hi");
    assert_eq!(r.head.header("content-length"), Some("2"));
}

#[test]
fn chunked_body_completes_without_eof() {
    let mut c = ResponseCollector::new(MAX_BODY);
    let r = c
        .feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
        .unwrap()
        .expect("complete before EOF");
    assert_eq!(r.body, b"hi");
}

#[test]
fn not_modified_ends_at_head_even_with_length() {
    let mut c = ResponseCollector::new(MAX_BODY);
    let r = c
        .feed(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n")
        .unwrap()
        .expect("complete at head");
    assert!(r.body.is_empty());
}

#[test]
fn thirty_two_interim_responses_pass_thirty_three_fail() {
    let interim = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(32);
    let mut ok = interim.clone();
    ok.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
    assert_eq!(parse_split(&ok, ok.len()).unwrap().status(), 200);
    let mut bad = b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n".repeat(33);
    bad.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
    for step in [bad.len(), 1, 5] {
        assert_eq!(
            parse_split(&bad, step),
            Err(HttpError::TooManyInterimResponses)
        );
    }
}

#[test]
fn endless_interim_responses_fail_after_the_limit() {
    let mut p = ResponseParser::new();
    let one = b"HTTP/1.1 100 Continue\r\n\r\n";
    let mut fed = 0;
    let err = loop {
        fed += 1;
        assert!(fed <= 40, "parser kept accepting interim responses");
        if let Err(e) = p.feed(one) {
            break e;
        }
    };
    assert_eq!(err, HttpError::TooManyInterimResponses);
    assert!(err.is_invalid_data());
    assert_eq!(fed, 33);
}

#[test]
fn head_limit_is_inclusive_of_terminator_and_persists_across_reads() {
    let prefix = b"HTTP/1.1 200 OK\r\nx: ".to_vec();
    let suffix = b"\r\ncontent-length: 0\r\n\r\n";
    let fill = MAX_HEAD_BYTES - prefix.len() - suffix.len();
    let mut exact = prefix.clone();
    exact.extend(std::iter::repeat_n(b'a', fill));
    exact.extend_from_slice(suffix);
    assert_eq!(exact.len(), MAX_HEAD_BYTES);
    for step in [exact.len(), 1, 1000] {
        assert_eq!(parse_split(&exact, step).unwrap().status(), 200);
    }
    let mut over = prefix;
    over.extend(std::iter::repeat_n(b'a', fill + 1));
    over.extend_from_slice(suffix);
    for step in [over.len(), 1, 1000] {
        assert_eq!(parse_split(&over, step), Err(HttpError::HeadTooLarge));
    }
}

#[test]
fn huge_headers_fail_early_without_buffering_everything() {
    let mut p = ResponseParser::new();
    p.feed(b"HTTP/1.1 200 OK\r\n").unwrap();
    let line =
        b"x-filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    let mut fed = 0usize;
    let err = loop {
        fed += line.len();
        assert!(fed < 2 * MAX_HEAD_BYTES, "no error after {fed} bytes");
        if let Err(e) = p.feed(line) {
            break e;
        }
    };
    assert_eq!(err, HttpError::HeadTooLarge);
    assert!(p.buf.capacity() <= 2 * MAX_HEAD_BYTES + 4096);
}

#[test]
fn body_is_not_subject_to_the_head_limit() {
    let body = vec![b'z'; 3 * MAX_HEAD_BYTES];
    let mut resp =
        format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
    resp.extend_from_slice(&body);
    assert_eq!(parse_split(&resp, 4096).unwrap().body, body);
}

#[test]
fn body_limit_is_enforced() {
    let mut c = ResponseCollector::new(4);
    assert_eq!(
        c.feed(b"HTTP/1.1 200 OK\r\n\r\nhello"),
        Err(HttpError::BodyTooLarge(4))
    );
}

#[test]
fn eof_cases() {
    assert_eq!(parse_split(b"", 1), Err(HttpError::ClosedBeforeResponse));
    assert!(matches!(
        parse_split(b"HTTP/1.1 200 OK\r\ncontent-le", 1),
        Err(HttpError::Truncated(_))
    ));
    assert!(matches!(
        parse_split(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nab", 1),
        Err(HttpError::Truncated(_))
    ));
    assert!(!HttpError::Truncated("x").is_invalid_data());
}

#[test]
fn malformed_inputs_are_invalid_data() {
    let cases: &[&[u8]] = &[
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"HTTP/1.1 099 Low\r\n\r\n",
        b"HTTP/2 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbad name: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabXY",
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nab",
    ];
    for case in cases {
        for step in [case.len(), 1] {
            let r = parse_split(case, step);
            assert!(
                matches!(&r, Err(e) if e.is_invalid_data()),
                "{:?} step {step}: {r:?}",
                String::from_utf8_lossy(case)
            );
        }
    }
}

#[test]
fn endless_chunk_size_line_is_refused() {
    let mut p = ResponseParser::new();
    p.feed(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        .unwrap();
    let err = (0..200).find_map(|_| p.feed(b"0000000000").err());
    assert_eq!(err, Some(HttpError::BadChunkSize));
}

#[test]
fn endless_trailers_are_refused() {
    let mut p = ResponseParser::new();
    p.feed(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n")
        .unwrap();
    let err = (0..10_000).find_map(|_| p.feed(b"x-t: 1234567890\r\n").err());
    assert_eq!(err, Some(HttpError::TrailersTooLarge));
}

#[test]
fn encoder_frames_and_refuses_injection() {
    let req = Request::new("POST", "/mcp")
        .header("mcp-session-id", "abc")
        .json(&serde_json::json!({"a": 1}));
    let bytes = req.encode().unwrap();
    assert_eq!(
        String::from_utf8(bytes).unwrap(),
        "POST /mcp HTTP/1.1\r\nmcp-session-id: abc\r\ncontent-type: application/json\r\n\
         host: localhost\r\ncontent-length: 7\r\n\r\n{\"a\":1}"
    );
    assert_eq!(
        Request::new("GET", "/health").encode().unwrap(),
        b"GET /health HTTP/1.1\r\nhost: localhost\r\n\r\n"
    );
    assert_eq!(Request::new("HEAD", "/").encode(), Err(EncodeError::Head));
    assert_eq!(
        Request::new("GET", "/a b").encode(),
        Err(EncodeError::BadTarget)
    );
    assert!(
        Request::new("GET", "/")
            .header("x", "a\r\nevil: 1")
            .encode()
            .is_err()
    );
    assert!(
        Request::new("GET", "/")
            .header("content-length", "3")
            .encode()
            .is_err()
    );
}

/// A small deterministic generator, so failures reproduce from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn samples() -> Vec<Vec<u8>> {
    [
        &include_bytes!("../../tests/data/ipc_http/interim_then_json.http")[..],
        include_bytes!("../../tests/data/ipc_http/chunked_split_utf8.http"),
        include_bytes!("../../tests/data/ipc_http/close_delimited_404.http"),
        include_bytes!("../../tests/data/ipc_http/no_content_ignores_framing.http"),
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n",
    ]
    .iter()
    .map(|s| s.to_vec())
    .collect()
}

/// Mutates valid responses (flip, insert, delete, duplicate, truncate) and feeds them in
/// random splits: the parser must return, never panic, and agree with itself across splits.
#[test]
fn fuzz_mutated_responses_never_panic_and_split_invariant() {
    let samples = samples();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let specials: &[&[u8]] = &[
        b"\r\n",
        b"\n",
        b":",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"ffffffffffffffff",
        b"0\r\n\r\n",
        b"transfer-encoding: chunked\r\n",
        b"content-length: 3\r\n",
        b"\xff\xfe",
    ];
    for _ in 0..3000 {
        let mut input = samples[rng.below(samples.len())].clone();
        for _ in 0..=rng.below(4) {
            let at = rng.below(input.len() + 1);
            match rng.below(5) {
                0 if at < input.len() => input[at] = rng.next() as u8,
                1 => {
                    let s = specials[rng.below(specials.len())];
                    input.splice(at..at, s.iter().copied());
                }
                2 if at < input.len() => {
                    input.remove(at);
                }
                3 => input.truncate(at),
                _ => {
                    let end = (at + rng.below(64)).min(input.len());
                    let dup = input[at..end].to_vec();
                    input.splice(at..at, dup);
                }
            }
        }
        let whole = parse_split(&input, input.len());
        let step = 1 + rng.below(9);
        let split = parse_split(&input, step);
        assert_eq!(
            render(&whole),
            render(&split),
            "input {:?} step {step}",
            String::from_utf8_lossy(&input)
        );
    }
}

/// Random garbage of random size: always a clean result.
#[test]
fn fuzz_random_bytes() {
    let mut rng = Rng(42);
    for _ in 0..2000 {
        let len = rng.below(512);
        let mut input: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if rng.below(2) == 0 {
            let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
            head.append(&mut input);
            input = head;
        }
        let _ = parse_split(&input, 1 + rng.below(16));
    }
}
