//! Session streams on their own QUIC streams of a peer link, so a session flooding output
//! never delays the link's mail frames or another session's keystrokes.
//!
//! When the hub's link to a node is QUIC, each `/sessions/{address}/stream` it relays opens a
//! new bidirectional stream on that connection instead of a WebSocket of its own. The
//! connection is already authenticated (its first stream carried the node token), so a
//! stream on it needs no credential of its own. On the stream, length-delimited frames
//! ([`super::quic::codec`]):
//!
//! - hub → node, first: `{"session_stream": {"session": "<id>", "query": "format=text"}}`;
//! - node → hub, the answer: `{"ok": true}`, or `{"ok": false, "status": 404, "code": …,
//!   "error": …}` (the HTTP route's own error) and the stream ends;
//! - then both ways, WebSocket messages as frames tagged by their first byte: `T` text, `B`
//!   binary, `C` close; anything else is ignored. Finishing the stream ends the session stream.
//!
//! The node serves it through a [`StreamHook`] its composition root supplies (the routes'
//! stream service, the same one the WebSocket route runs); this module is only the carrier's
//! adapter and knows no HTTP framework: its messages are [`Frame`]s. It does
//! not limit how many streams run: QUIC's stream credit does
//! ([`super::quic::MAX_BIDI_STREAMS`]). A stream whose first frame is not a request is refused
//! with [`super::quic::STOP_BAD_STREAM`] by the caller.

use std::io;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::{Sink, SinkExt, Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::codec::{FramedRead, FramedWrite};

use super::quic::codec;

/// One WebSocket-shaped message of a session stream, as the stream carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A text message.
    Text(String),
    /// A binary message.
    Binary(Bytes),
    /// The end of the session stream.
    Close,
    /// A keep-alive or an unknown tag: ignored by both ends.
    Other,
}

/// A session stream's refusal, as the HTTP route would answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// HTTP status.
    pub status: u16,
    /// Stable code.
    pub code: String,
    /// Detail.
    pub message: String,
}

/// Serves an accepted session stream over its carrier until either side ends.
pub type Serve = Box<dyn FnOnce(Carrier) -> BoxFuture<'static, ()> + Send>;

/// The session-stream service behind the node's QUIC streams, supplied by the composition
/// root (the routes' stream service): opens the stream a [`Request`] names, or refuses it.
pub trait StreamHook: Send + Sync + 'static {
    /// Opens `request`'s session stream; `Err` is the answer the hub relays.
    fn open(&self, request: &Request) -> Result<Serve, Refused>;
}

/// Longest wait for a stream's request (node) or its answer (hub).
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

const TEXT: u8 = b'T';
const BINARY: u8 = b'B';
const CLOSE: u8 = b'C';

/// The first frame of a session stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The session: any of its addresses on the node.
    pub session: String,
    /// The stream's query string (`format=text`, `mode=screen`, ...), as the route takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// The hub's user this stream is opened for (the node's audit records the attach as
    /// `via: hub`, `who: hub:<user>`); the link itself is the hub's node token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded_user: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    session_stream: Request,
}

/// The node's answer to a [`Request`]: `{"ok": true}`, or the HTTP route's refusal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Answer {
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl Answer {
    fn to_bytes(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("an answer serializes"))
    }
}

fn encode(m: Frame) -> Bytes {
    let (tag, body): (u8, &[u8]) = match &m {
        Frame::Text(t) => (TEXT, t.as_bytes()),
        Frame::Binary(b) => (BINARY, b),
        Frame::Close => (CLOSE, &[]),
        // Keep-alive is QUIC's business; a ping travels as an ignored frame.
        Frame::Other => (b'P', &[]),
    };
    let mut out = BytesMut::with_capacity(1 + body.len());
    out.extend_from_slice(&[tag]);
    out.extend_from_slice(body);
    out.freeze()
}

fn decode(mut b: BytesMut) -> io::Result<Frame> {
    if b.is_empty() {
        return Ok(Frame::Other);
    }
    let body = b.split_off(1).freeze();
    match b[0] {
        TEXT => String::from_utf8(body.to_vec())
            .map(Frame::Text)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a text frame is not UTF-8")),
        BINARY => Ok(Frame::Binary(body)),
        CLOSE => Ok(Frame::Close),
        _ => Ok(Frame::Other),
    }
}

/// The message sink and stream over one QUIC stream (after its request and answer).
pub type Carrier = (
    std::pin::Pin<Box<dyn Sink<Frame, Error = io::Error> + Send>>,
    std::pin::Pin<Box<dyn Stream<Item = io::Result<Frame>> + Send>>,
);

fn carrier(
    send: FramedWrite<quinn::SendStream, tokio_util::codec::LengthDelimitedCodec>,
    recv: FramedRead<quinn::RecvStream, tokio_util::codec::LengthDelimitedCodec>,
) -> Carrier {
    let tx = send.with(|m: Frame| futures::future::ready(Ok::<_, io::Error>(encode(m))));
    let rx = recv.map(|r| r.and_then(decode));
    (Box::pin(tx), Box::pin(rx))
}

/// Why the hub could not open a session stream on the link.
#[derive(Debug)]
pub enum OpenError {
    /// The node answered with the route's error: its status and JSON body.
    Refused {
        /// HTTP status.
        status: u16,
        /// `{"error": …, "code": …}`.
        body: Value,
    },
    /// The connection or stream failed, or no answer came in [`OPEN_TIMEOUT`]; the WebSocket
    /// may be tried instead.
    Unavailable(String),
}

/// The hub's side: opens a stream for `request` on the link's connection and waits for the
/// node's answer.
pub async fn open(conn: &quinn::Connection, request: Request) -> Result<Carrier, OpenError> {
    let attempt = async {
        let (send, recv) = conn
            .open_bi()
            .await
            .map_err(|e| OpenError::Unavailable(super::quic::describe_close(&e)))?;
        let mut send = FramedWrite::new(send, codec());
        let mut recv = FramedRead::new(recv, codec());
        let hello = serde_json::to_vec(&Hello {
            session_stream: request,
        })
        .expect("a request serializes");
        send.send(Bytes::from(hello))
            .await
            .map_err(|e| OpenError::Unavailable(format!("writing the stream request: {e}")))?;
        let answer = match recv.next().await {
            Some(Ok(b)) => b,
            Some(Err(e)) => return Err(OpenError::Unavailable(format!("reading the answer: {e}"))),
            None => return Err(OpenError::Unavailable("the stream ended unanswered".into())),
        };
        let a: Answer = serde_json::from_slice(&answer)
            .map_err(|_| OpenError::Unavailable("the answer is not a stream answer".into()))?;
        match a {
            Answer { ok: true, .. } => Ok(carrier(send, recv)),
            Answer {
                status: Some(status),
                code,
                error,
                ..
            } => Err(OpenError::Refused {
                status,
                body: json!({"error": error, "code": code}),
            }),
            other => Err(OpenError::Unavailable(format!(
                "unexpected answer {other:?}"
            ))),
        }
    };
    match tokio::time::timeout(OPEN_TIMEOUT, attempt).await {
        Ok(r) => r,
        Err(_) => Err(OpenError::Unavailable(
            "no answer to the stream request in time".into(),
        )),
    }
}

/// A stream whose first frame was not a session-stream request, handed back to be refused.
pub(super) struct NotARequest {
    /// What was wrong, for the log.
    pub(super) why: String,
    pub(super) send: quinn::SendStream,
    pub(super) recv: quinn::RecvStream,
}

/// The node's side of one stream on an authenticated link: reads the request, answers, and
/// serves the session stream until it ends. `Err` when the first frame is not a request (the
/// caller refuses the stream).
pub(super) async fn serve(
    hook: &dyn StreamHook,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
) -> Result<(), NotARequest> {
    let mut send = FramedWrite::new(send, codec());
    let mut recv = FramedRead::new(recv, codec());
    let refuse = |why: String, send: FramedWrite<_, _>, recv: FramedRead<_, _>| NotARequest {
        why,
        send: send.into_inner(),
        recv: recv.into_inner(),
    };
    let first = match tokio::time::timeout(OPEN_TIMEOUT, recv.next()).await {
        Err(_) => return Err(refuse("no request frame in time".into(), send, recv)),
        Ok(None) => {
            return Err(refuse(
                "the stream ended before its request".into(),
                send,
                recv,
            ));
        }
        Ok(Some(Err(e))) => {
            return Err(refuse(format!("reading the request: {e}"), send, recv));
        }
        Ok(Some(Ok(b))) => b,
    };
    let Ok(Hello {
        session_stream: req,
    }) = serde_json::from_slice::<Hello>(&first)
    else {
        return Err(refuse(
            "the first frame is not a session-stream request".into(),
            send,
            recv,
        ));
    };
    let opened = match hook.open(&req) {
        Ok(o) => o,
        Err(e) => {
            tracing::debug!(session = %req.session, error = %e.message, "session stream over QUIC refused");
            let answer = Answer {
                ok: false,
                status: Some(e.status),
                code: Some(e.code),
                error: Some(e.message),
            };
            let _ = send.send(answer.to_bytes()).await;
            let _ = SinkExt::<Bytes>::close(&mut send).await;
            return Ok(());
        }
    };
    let ok = Answer {
        ok: true,
        status: None,
        code: None,
        error: None,
    };
    if send.send(ok.to_bytes()).await.is_err() {
        return Ok(());
    }
    opened(carrier(send, recv)).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_their_tags() {
        for m in [
            Frame::Text("héllo".into()),
            Frame::Binary(Bytes::from_static(b"\x00\xff")),
            Frame::Close,
        ] {
            assert_eq!(decode(BytesMut::from(&encode(m.clone())[..])).unwrap(), m);
        }
        assert!(decode(BytesMut::from(&b"T\xff"[..])).is_err());
        assert!(matches!(
            decode(BytesMut::from(&b"?x"[..])).unwrap(),
            Frame::Other
        ));
    }

    #[test]
    fn the_request_frame_is_stable() {
        let h = Hello {
            session_stream: Request {
                session: "12".into(),
                query: Some("mode=screen".into()),
                forwarded_user: None,
            },
        };
        assert_eq!(
            serde_json::to_string(&h).unwrap(),
            r#"{"session_stream":{"session":"12","query":"mode=screen"}}"#
        );
        assert!(serde_json::from_str::<Hello>("{}").is_err());
    }

    #[test]
    fn the_answer_frames_are_stable() {
        let ok = Answer {
            ok: true,
            status: None,
            code: None,
            error: None,
        };
        assert_eq!(&ok.to_bytes()[..], br#"{"ok":true}"#);
        let refused: Answer = serde_json::from_str(
            r#"{"ok":false,"status":404,"code":"unknown_session","error":"no such session"}"#,
        )
        .unwrap();
        assert_eq!(refused.status, Some(404));
        assert_eq!(
            serde_json::to_value(&refused).unwrap()["code"],
            "unknown_session"
        );
    }
}
