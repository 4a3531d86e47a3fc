//! A sans-IO decoder for `text/event-stream` bodies (the `GET /mcp` and `GET /events`
//! streams), as the bridge and tests read them.
//!
//! Bytes in, [`SseEvent`]s out. Lines are split on bytes and converted to text only when
//! whole, so a UTF-8 character split between two reads is never mangled. One event may hold
//! at most the configured number of bytes; a peer that never ends a line or an event gets
//! [`SseError::EventTooLarge`] instead of unbounded memory.

use std::collections::VecDeque;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field; empty means the default `message`.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The `id:` field, if this event carried one.
    pub id: Option<String>,
}

/// Why a stream could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// One line or event passed the configured limit.
    #[error("server-sent event larger than {0} bytes")]
    EventTooLarge(usize),
}

/// Incremental SSE decoder.
#[derive(Debug)]
pub struct SseDecoder {
    line: Vec<u8>,
    /// The last byte seen was CR, so a following LF belongs to the same line break.
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
    id: Option<String>,
    /// Bytes held for the current event, lines included.
    held: usize,
    max_event: usize,
    out: VecDeque<SseEvent>,
    first: bool,
}

impl SseDecoder {
    /// A decoder that refuses any event above `max_event` bytes.
    pub fn new(max_event: usize) -> Self {
        Self {
            line: Vec::new(),
            after_cr: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
            id: None,
            held: 0,
            max_event,
            out: VecDeque::new(),
            first: true,
        }
    }

    /// Consumes body bytes.
    pub fn feed(&mut self, input: &[u8]) -> Result<(), SseError> {
        for &b in input {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\r' => {
                    self.after_cr = true;
                    self.end_line();
                }
                b'\n' => self.end_line(),
                _ => {
                    self.held += 1;
                    if self.held > self.max_event {
                        return Err(SseError::EventTooLarge(self.max_event));
                    }
                    self.line.push(b);
                }
            }
        }
        Ok(())
    }

    /// The next complete event.
    pub fn poll_event(&mut self) -> Option<SseEvent> {
        self.out.pop_front()
    }

    fn end_line(&mut self) {
        let raw = std::mem::take(&mut self.line);
        let mut line: &[u8] = &raw;
        if self.first {
            self.first = false;
            line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
        }
        if line.is_empty() {
            if self.has_data {
                self.out.push_back(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data: std::mem::take(&mut self.data),
                    id: self.id.clone(),
                });
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            self.held = 0;
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(p) => {
                let v = &line[p + 1..];
                (&line[..p], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"event" => self.event = value.into_owned(),
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&value);
                self.has_data = true;
            }
            b"id" if !value.contains('\0') => self.id = Some(value.into_owned()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_split(input: &[u8], step: usize) -> Vec<SseEvent> {
        let mut d = SseDecoder::new(1 << 20);
        let mut out = Vec::new();
        for c in input.chunks(step) {
            d.feed(c).unwrap();
            while let Some(e) = d.poll_event() {
                out.push(e);
            }
        }
        out
    }

    #[test]
    fn events_survive_any_split() {
        let input = "id: 1\r\nevent: message\r\ndata: {\"a\":\"é\"}\r\n\r\n: keep-alive\n\ndata: x\ndata: y\n\n"
            .as_bytes();
        let whole = decode_split(input, input.len());
        assert_eq!(
            whole,
            vec![
                SseEvent {
                    event: "message".into(),
                    data: "{\"a\":\"é\"}".into(),
                    id: Some("1".into())
                },
                SseEvent {
                    event: String::new(),
                    data: "x\ny".into(),
                    id: Some("1".into())
                },
            ]
        );
        for step in 1..input.len() {
            assert_eq!(decode_split(input, step), whole, "step {step}");
        }
    }

    #[test]
    fn endless_line_is_refused() {
        let mut d = SseDecoder::new(1024);
        let err = (0..100).find_map(|_| d.feed(&[b'a'; 64]).err());
        assert_eq!(err, Some(SseError::EventTooLarge(1024)));
    }
}
