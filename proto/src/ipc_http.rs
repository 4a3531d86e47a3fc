//! The IPC client's HTTP/1.1 framing: a request encoder and a sans-IO response parser.
//!
//! Shared by the sync CLI adapter and the async bridge adapter, which own the socket, the
//! timeouts and the retry policy; this module only turns bytes into events. It never reads a
//! clock or touches a socket, and every input it accepts is bounded, so a hostile peer gets a
//! clean [`HttpError`] instead of a hang, a panic or unbounded memory:
//!
//! - interim `1xx` responses (except `101`) are skipped, at most [`MAX_INTERIM_RESPONSES`]
//!   per response;
//! - a status line plus headers may take at most [`MAX_HEAD_BYTES`] including the blank-line
//!   terminator; the count persists across `feed` calls, so a peer dribbling bytes one at a
//!   time meets the same limit;
//! - `101`, `204` and `304` end at the header terminator whatever `Content-Length` or
//!   `Transfer-Encoding` say (RFC 9112 §6.3);
//! - `Content-Length` bodies end after exactly that many bytes, without waiting for EOF;
//! - chunked bodies are decoded to bytes (UTF-8 conversion, if any, is the caller's, after
//!   decoding, so a character split across chunks is never mangled);
//! - otherwise the body runs to EOF (close-delimited).
//!
//! The clients never send `HEAD`, so a response to one is not modelled.

use std::collections::VecDeque;

/// Most interim (`1xx`, not `101`) responses accepted before the final one.
pub const MAX_INTERIM_RESPONSES: u32 = 32;
/// Largest status line + header section, terminator included, per response head.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest chunk-size line (size, extensions and CRLF). Real servers send a few bytes.
pub const MAX_CHUNK_LINE_BYTES: usize = 1024;
/// Largest trailer section after the last chunk, terminator included.
pub const MAX_TRAILER_BYTES: usize = 64 * 1024;

/// Why a response could not be parsed. Everything but the two EOF variants is invalid data
/// from the peer; see [`HttpError::is_invalid_data`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The peer sent more than [`MAX_INTERIM_RESPONSES`] interim responses.
    #[error("more than {MAX_INTERIM_RESPONSES} interim (1xx) responses")]
    TooManyInterimResponses,
    /// A status line plus headers exceeded [`MAX_HEAD_BYTES`].
    #[error("response head larger than {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
    /// The status line is not `HTTP/1.x NNN reason`.
    #[error("malformed status line: {0}")]
    BadStatusLine(String),
    /// A header line has no colon, an invalid name, or a byte that is not allowed.
    #[error("malformed header line")]
    BadHeader,
    /// `Content-Length` is not a decimal number, or two of them disagree.
    #[error("invalid Content-Length")]
    BadContentLength,
    /// A `Transfer-Encoding` other than a final `chunked` (the clients ask for none).
    #[error("unsupported Transfer-Encoding: {0}")]
    UnsupportedTransferEncoding(String),
    /// A chunk-size line is not hexadecimal, overflows, or is too long.
    #[error("invalid chunk size line")]
    BadChunkSize,
    /// Chunk data was not followed by CRLF.
    #[error("chunk data not terminated by CRLF")]
    BadChunkTerminator,
    /// The trailer section after the last chunk exceeded [`MAX_TRAILER_BYTES`].
    #[error("trailer section larger than {MAX_TRAILER_BYTES} bytes")]
    TrailersTooLarge,
    /// The body exceeded the limit the caller configured.
    #[error("response body larger than {0} bytes")]
    BodyTooLarge(u64),
    /// Bytes arrived after the response was complete (the client sends one request per
    /// connection, so there is nothing they could belong to).
    #[error("unexpected bytes after the response")]
    TrailingBytes,
    /// The connection closed before any response byte.
    #[error("connection closed before a response")]
    ClosedBeforeResponse,
    /// The connection closed in the middle of a response.
    #[error("connection closed mid-response ({0})")]
    Truncated(&'static str),
}

impl HttpError {
    /// True for malformed or over-limit input (an adapter maps it to `InvalidData`); false for
    /// the peer closing early, which is an unexpected EOF.
    pub fn is_invalid_data(&self) -> bool {
        !matches!(self, Self::ClosedBeforeResponse | Self::Truncated(_))
    }
}

/// One request the client sends. The encoder adds `Host`, `Content-Length` and the headers
/// given; it refuses CR, LF and NUL anywhere in method, target or headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, `PUT` or `DELETE` (never `HEAD`).
    pub method: String,
    /// Origin-form target, `/path?query`.
    pub target: String,
    /// Extra headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body; empty means none (no `Content-Length` for `GET`/`DELETE`).
    pub body: Vec<u8>,
}

/// Why a request could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// HEAD responses have no body framing this parser can know; the clients never send it.
    #[error("HEAD requests are not supported")]
    Head,
    /// A method that is not an HTTP token.
    #[error("invalid method")]
    BadMethod,
    /// A target that is not origin-form or contains a forbidden byte.
    #[error("invalid request target")]
    BadTarget,
    /// A header name that is not a token, or a value with CR, LF or NUL.
    #[error("invalid header {0:?}")]
    BadHeader(String),
}

impl Request {
    /// A request without body or extra headers.
    pub fn new(method: &str, target: &str) -> Self {
        Self {
            method: method.to_owned(),
            target: target.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets a JSON body and its content type.
    pub fn json(mut self, body: &serde_json::Value) -> Self {
        self.body = serde_json::to_vec(body).expect("a Value always serializes");
        self.header("content-type", "application/json")
    }

    /// The request's bytes. `Host: localhost` is added (HTTP/1.1 requires one; the IPC socket
    /// has no other name) unless a `host` header is given.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        if self.method.eq_ignore_ascii_case("HEAD") {
            return Err(EncodeError::Head);
        }
        if self.method.is_empty() || !self.method.bytes().all(is_tchar) {
            return Err(EncodeError::BadMethod);
        }
        if !self.target.starts_with('/') || self.target.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(EncodeError::BadTarget);
        }
        let mut out = Vec::with_capacity(128 + self.body.len());
        out.extend_from_slice(self.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        let mut has_host = false;
        for (name, value) in &self.headers {
            if name.is_empty() || !name.bytes().all(is_tchar) {
                return Err(EncodeError::BadHeader(name.clone()));
            }
            if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(EncodeError::BadHeader(name.clone()));
            }
            if name.eq_ignore_ascii_case("content-length")
                || name.eq_ignore_ascii_case("transfer-encoding")
            {
                // The encoder owns body framing; a second length would smuggle requests.
                return Err(EncodeError::BadHeader(name.clone()));
            }
            has_host |= name.eq_ignore_ascii_case("host");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if !has_host {
            out.extend_from_slice(b"host: localhost\r\n");
        }
        let bodyless = matches!(self.method.as_str(), "GET" | "DELETE");
        if !self.body.is_empty() || !bodyless {
            out.extend_from_slice(format!("content-length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        Ok(out)
    }
}

/// The status line and headers of the final response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// The status code, 100..=999.
    pub status: u16,
    /// The reason phrase (may be empty).
    pub reason: String,
    /// Headers in order; names as sent. Values are latin-1 decoded, so never invalid.
    pub headers: Vec<(String, String)>,
}

impl ResponseHead {
    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the parser produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseEvent {
    /// The final response's head (interim responses are never reported).
    Head(ResponseHead),
    /// Decoded body bytes, in order.
    Data(Vec<u8>),
    /// The response is complete.
    End,
}

/// How the body of the current response is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkCrlf,
    Trailers,
    ToEof,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Body(Body),
    Done,
    Failed,
}

/// Sans-IO parser of one HTTP/1.1 response.
///
/// Feed it bytes as they arrive with [`feed`](Self::feed), tell it about EOF with
/// [`feed_eof`](Self::feed_eof), and drain [`poll_event`](Self::poll_event). Every call does
/// work proportional to its input; nothing waits.
#[derive(Debug)]
pub struct ResponseParser {
    state: State,
    /// Unparsed bytes of a head, a chunk-size line or the trailers.
    buf: Vec<u8>,
    /// Where the terminator search resumes in `buf`, so dribbled input stays linear.
    scan_from: usize,
    interim: u32,
    body_seen: u64,
    max_body: Option<u64>,
    events: VecDeque<ResponseEvent>,
}

impl Default for ResponseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl ResponseParser {
    /// A parser with no body limit (bodies stream out as [`ResponseEvent::Data`]).
    pub fn new() -> Self {
        Self {
            state: State::Head,
            buf: Vec::new(),
            scan_from: 0,
            interim: 0,
            body_seen: 0,
            max_body: None,
            events: VecDeque::new(),
        }
    }

    /// A parser that fails with [`HttpError::BodyTooLarge`] once the decoded body passes
    /// `max` bytes.
    pub fn with_max_body(max: u64) -> Self {
        Self {
            max_body: Some(max),
            ..Self::new()
        }
    }

    /// True once [`ResponseEvent::End`] has been queued.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes bytes from the peer. After an error the parser stays failed.
    pub fn feed(&mut self, mut input: &[u8]) -> Result<(), HttpError> {
        match self.state {
            State::Failed => return Err(HttpError::TrailingBytes),
            State::Done if !input.is_empty() => return self.fail(HttpError::TrailingBytes),
            _ => {}
        }
        while !input.is_empty() {
            let used = match self.step(input) {
                Ok(n) => n,
                Err(e) => return self.fail(e),
            };
            input = &input[used..];
            if self.state == State::Done && !input.is_empty() {
                return self.fail(HttpError::TrailingBytes);
            }
        }
        Ok(())
    }

    /// The peer closed its side. Completes a close-delimited body; anything else unfinished
    /// is an error.
    pub fn feed_eof(&mut self) -> Result<(), HttpError> {
        let err = match self.state {
            State::Done => return Ok(()),
            State::Failed => return Err(HttpError::Truncated("after an error")),
            State::Body(Body::ToEof) => {
                self.finish();
                return Ok(());
            }
            State::Head if self.buf.is_empty() && self.interim == 0 => {
                HttpError::ClosedBeforeResponse
            }
            State::Head => HttpError::Truncated("in the response head"),
            State::Body(Body::Length(_)) => HttpError::Truncated("Content-Length body"),
            State::Body(_) => HttpError::Truncated("chunked body"),
        };
        self.fail(err)
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<ResponseEvent> {
        self.events.pop_front()
    }

    fn fail(&mut self, e: HttpError) -> Result<(), HttpError> {
        self.state = State::Failed;
        self.buf = Vec::new();
        Err(e)
    }

    fn finish(&mut self) {
        self.state = State::Done;
        self.buf = Vec::new();
        self.events.push_back(ResponseEvent::End);
    }

    /// Processes a prefix of `input`; returns how many bytes were used (at least one).
    fn step(&mut self, input: &[u8]) -> Result<usize, HttpError> {
        match self.state {
            State::Head => self.step_head(input),
            State::Body(body) => self.step_body(body, input),
            State::Done | State::Failed => unreachable!("feed checks the state"),
        }
    }

    /// Appends bytes to `buf` up to and including a blank line (CRLF CRLF, or bare LF LF
    /// from a lenient peer). Returns (bytes used, whether the section is complete).
    fn take_section(&mut self, input: &[u8], limit: usize) -> (usize, bool) {
        let room = limit.saturating_sub(self.buf.len());
        // One byte past the limit is enough to know the limit is broken.
        let window = &input[..input.len().min(room + 1)];
        let start_len = self.buf.len();
        self.buf.extend_from_slice(window);
        let mut i = self.scan_from;
        while i < self.buf.len() {
            if self.buf[i] == b'\n' {
                let blank = (i >= 1 && self.buf[i - 1] == b'\n')
                    || (i >= 2 && self.buf[i - 1] == b'\r' && self.buf[i - 2] == b'\n');
                // A section that is only a blank line (empty trailers) also ends here.
                let lone = i == 0 || (i == 1 && self.buf[0] == b'\r');
                if blank || lone {
                    let end = i + 1;
                    self.buf.truncate(end);
                    self.scan_from = 0;
                    return (end - start_len, true);
                }
            }
            i += 1;
        }
        self.scan_from = self.buf.len();
        (window.len(), false)
    }

    fn step_head(&mut self, input: &[u8]) -> Result<usize, HttpError> {
        let (used, complete) = self.take_section(input, MAX_HEAD_BYTES);
        if !complete {
            if self.buf.len() > MAX_HEAD_BYTES {
                return Err(HttpError::HeadTooLarge);
            }
            return Ok(used);
        }
        if self.buf.len() > MAX_HEAD_BYTES {
            return Err(HttpError::HeadTooLarge);
        }
        let section = std::mem::take(&mut self.buf);
        let head = parse_head(&section)?;
        if (100..200).contains(&head.status) && head.status != 101 {
            self.interim += 1;
            if self.interim > MAX_INTERIM_RESPONSES {
                return Err(HttpError::TooManyInterimResponses);
            }
            return Ok(used);
        }
        let framing = body_framing(&head)?;
        self.events.push_back(ResponseEvent::Head(head));
        match framing {
            None | Some(Body::Length(0)) => self.finish(),
            Some(b) => self.state = State::Body(b),
        }
        Ok(used)
    }

    fn emit_data(&mut self, data: &[u8]) -> Result<(), HttpError> {
        self.body_seen += data.len() as u64;
        if let Some(max) = self.max_body
            && self.body_seen > max
        {
            return Err(HttpError::BodyTooLarge(max));
        }
        if !data.is_empty() {
            self.events.push_back(ResponseEvent::Data(data.to_vec()));
        }
        Ok(())
    }

    fn step_body(&mut self, body: Body, input: &[u8]) -> Result<usize, HttpError> {
        match body {
            Body::Length(left) | Body::ChunkData(left) => {
                let n = input.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                self.emit_data(&input[..n])?;
                let left = left - n as u64;
                self.state = match (body, left) {
                    (Body::Length(_), 0) => {
                        self.finish();
                        State::Done
                    }
                    (Body::Length(_), l) => State::Body(Body::Length(l)),
                    (_, 0) => State::Body(Body::ChunkCrlf),
                    (_, l) => State::Body(Body::ChunkData(l)),
                };
                Ok(n)
            }
            Body::ToEof => {
                self.emit_data(input)?;
                Ok(input.len())
            }
            Body::ChunkCrlf => {
                // Accept CRLF or a bare LF; anything else is a framing error.
                self.buf.push(input[0]);
                match self.buf.as_slice() {
                    b"\r" => {}
                    b"\r\n" | b"\n" => {
                        self.buf.clear();
                        self.state = State::Body(Body::ChunkSize);
                    }
                    _ => return Err(HttpError::BadChunkTerminator),
                }
                Ok(1)
            }
            Body::ChunkSize => {
                let nl = input.iter().position(|&b| b == b'\n');
                let take = nl.map_or(input.len(), |p| p + 1);
                if self.buf.len() + take > MAX_CHUNK_LINE_BYTES {
                    return Err(HttpError::BadChunkSize);
                }
                self.buf.extend_from_slice(&input[..take]);
                if nl.is_some() {
                    let size = parse_chunk_size(&self.buf)?;
                    self.buf.clear();
                    self.state = State::Body(if size == 0 {
                        Body::Trailers
                    } else {
                        Body::ChunkData(size)
                    });
                }
                Ok(take)
            }
            Body::Trailers => {
                let (used, complete) = self.take_section(input, MAX_TRAILER_BYTES);
                if self.buf.len() > MAX_TRAILER_BYTES {
                    return Err(HttpError::TrailersTooLarge);
                }
                if complete {
                    // Trailers are validated for shape and dropped: nothing here uses them.
                    let section = std::mem::take(&mut self.buf);
                    for line in lines(&section) {
                        parse_header_line(line)?;
                    }
                    self.finish();
                }
                Ok(used)
            }
        }
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The non-empty lines of a section, without their line endings.
fn lines(section: &[u8]) -> impl Iterator<Item = &[u8]> {
    section
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.is_empty())
}

fn latin1(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| char::from(b)).collect()
}

fn parse_header_line(line: &[u8]) -> Result<(String, String), HttpError> {
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(HttpError::BadHeader)?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(HttpError::BadHeader);
    }
    if value.iter().any(|&b| b == b'\r' || b == 0) {
        return Err(HttpError::BadHeader);
    }
    Ok((latin1(name), latin1(value.trim_ascii())))
}

fn parse_head(section: &[u8]) -> Result<ResponseHead, HttpError> {
    let mut it = lines(section);
    let status_line = it
        .next()
        .ok_or_else(|| HttpError::BadStatusLine(String::new()))?;
    let bad = || HttpError::BadStatusLine(latin1(&status_line[..status_line.len().min(80)]));
    let rest = status_line.strip_prefix(b"HTTP/1.").ok_or_else(bad)?;
    let (minor, rest) = rest.split_first().ok_or_else(bad)?;
    if !minor.is_ascii_digit() || rest.first() != Some(&b' ') || rest.len() < 4 {
        return Err(bad());
    }
    let code = &rest[1..4];
    if !code.iter().all(u8::is_ascii_digit) || code[0] == b'0' {
        return Err(bad());
    }
    let status = code
        .iter()
        .fold(0u16, |acc, &d| acc * 10 + u16::from(d - b'0'));
    let reason = match &rest[4..] {
        [] => String::new(),
        [b' ', r @ ..] => latin1(r),
        _ => return Err(bad()),
    };
    let headers = it.map(parse_header_line).collect::<Result<Vec<_>, _>>()?;
    Ok(ResponseHead {
        status,
        reason,
        headers,
    })
}

/// How the final response's body is framed; `None` means no body.
fn body_framing(head: &ResponseHead) -> Result<Option<Body>, HttpError> {
    if matches!(head.status, 101 | 204 | 304) {
        return Ok(None);
    }
    let te: Vec<&str> = head
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("transfer-encoding"))
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    if let Some(last) = te.last() {
        // Transfer-Encoding overrides Content-Length (RFC 9112 §6.3). The clients send no
        // TE header, so anything but a lone `chunked` is a peer bug.
        if te.len() == 1 && last.eq_ignore_ascii_case("chunked") {
            return Ok(Some(Body::ChunkSize));
        }
        return Err(HttpError::UnsupportedTransferEncoding(te.join(", ")));
    }
    let mut length: Option<u64> = None;
    for (_, v) in head
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
    {
        for part in v.split(',') {
            let part = part.trim();
            if part.is_empty() || part.len() > 19 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(HttpError::BadContentLength);
            }
            let n: u64 = part.parse().map_err(|_| HttpError::BadContentLength)?;
            if length.is_some_and(|l| l != n) {
                return Err(HttpError::BadContentLength);
            }
            length = Some(n);
        }
    }
    Ok(Some(match length {
        Some(n) => Body::Length(n),
        None => Body::ToEof,
    }))
}

fn parse_chunk_size(line: &[u8]) -> Result<u64, HttpError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let digits_end = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    let (digits, rest) = line.split_at(digits_end);
    if digits.is_empty() || digits.len() > 15 {
        // 15 hex digits is 2^60: far past any body this client accepts, and no overflow.
        return Err(HttpError::BadChunkSize);
    }
    let rest = rest.trim_ascii_start();
    if !(rest.is_empty() || rest[0] == b';') || rest.iter().any(|&b| b == b'\r' || b == 0) {
        return Err(HttpError::BadChunkSize);
    }
    let s = std::str::from_utf8(digits).map_err(|_| HttpError::BadChunkSize)?;
    u64::from_str_radix(s, 16).map_err(|_| HttpError::BadChunkSize)
}

/// A complete response, collected by [`ResponseCollector`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status line and headers.
    pub head: ResponseHead,
    /// The decoded body bytes.
    pub body: Vec<u8>,
}

impl Response {
    /// The status code.
    pub fn status(&self) -> u16 {
        self.head.status
    }

    /// The body as text; invalid UTF-8 becomes U+FFFD. Called after chunk decoding, so a
    /// character split between chunks is intact.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    pub fn json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// Feeds a [`ResponseParser`] and gathers one whole response.
#[derive(Debug)]
pub struct ResponseCollector {
    parser: ResponseParser,
    head: Option<ResponseHead>,
    body: Vec<u8>,
}

impl ResponseCollector {
    /// A collector whose body may not pass `max_body` bytes.
    pub fn new(max_body: u64) -> Self {
        Self {
            parser: ResponseParser::with_max_body(max_body),
            head: None,
            body: Vec::new(),
        }
    }

    /// Feeds bytes; returns the response once complete.
    pub fn feed(&mut self, input: &[u8]) -> Result<Option<Response>, HttpError> {
        self.parser.feed(input)?;
        Ok(self.drain())
    }

    /// The peer closed; returns the response if that completed it.
    pub fn feed_eof(&mut self) -> Result<Response, HttpError> {
        self.parser.feed_eof()?;
        self.drain()
            .ok_or(HttpError::Truncated("no response after EOF"))
    }

    /// The final head, once it has arrived (a streaming caller may look before the body).
    pub fn head(&self) -> Option<&ResponseHead> {
        self.head.as_ref()
    }

    fn drain(&mut self) -> Option<Response> {
        while let Some(ev) = self.parser.poll_event() {
            match ev {
                ResponseEvent::Head(h) => self.head = Some(h),
                ResponseEvent::Data(d) => self.body.extend_from_slice(&d),
                ResponseEvent::End => {
                    return Some(Response {
                        head: self.head.take().expect("End follows Head"),
                        body: std::mem::take(&mut self.body),
                    });
                }
            }
        }
        None
    }
}

/// Parses a whole response held in memory, EOF included (tests and one-shot callers).
pub fn parse_complete(bytes: &[u8], max_body: u64) -> Result<Response, HttpError> {
    let mut c = ResponseCollector::new(max_body);
    if let Some(r) = c.feed(bytes)? {
        return Ok(r);
    }
    c.feed_eof()
}

#[cfg(test)]
mod tests;
