//! IO adapters over the IPC socket around the sans-IO parser of [`tuic_proto::ipc_http`]:
//! a blocking one for the CLI and a tokio one for the bridge, each with its own deadlines.
//!
//! One request per connection: a node restart can then never leave a client holding a
//! half-dead pooled connection, and the response ends at its framing (Content-Length or the
//! last chunk), never at EOF, unless the server chose a close-delimited body.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tuic_proto::ipc_http::{
    HttpError, Request, Response, ResponseCollector, ResponseEvent, ResponseHead, ResponseParser,
};

/// Largest response body a client accepts (the node's own request limit is 2 MiB; tool
/// results such as terminal output pages stay well below this).
pub const MAX_RESPONSE_BODY: u64 = 64 * 1024 * 1024;

/// Why a request over the IPC socket failed.
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    /// No node listens: the socket file is missing or the connection was refused.
    #[error("tuic node not running (no listener at {socket}: {source})")]
    NotRunning {
        /// The socket dialled.
        socket: PathBuf,
        /// The connect error.
        source: io::Error,
    },
    /// The node did not answer within the deadline.
    #[error("no answer from {socket} within {after:?}")]
    Timeout {
        /// The socket dialled.
        socket: PathBuf,
        /// The deadline that passed.
        after: Duration,
    },
    /// Reading or writing the connection failed (reset, broken pipe, permission).
    #[error("IPC error on {socket}: {source}")]
    Io {
        /// The socket dialled.
        socket: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The peer's bytes are not a valid response, or it closed mid-response.
    #[error("invalid response from {socket}: {source}")]
    Protocol {
        /// The socket dialled.
        socket: PathBuf,
        /// What was wrong.
        source: HttpError,
    },
    /// The request itself could not be encoded (a bug in the caller).
    #[error("cannot encode the request: {0}")]
    Encode(#[from] tuic_proto::ipc_http::EncodeError),
}

impl IpcError {
    /// The `io::ErrorKind` this error amounts to: `InvalidData` for a malformed or
    /// over-limit response, `UnexpectedEof` for a truncated one.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            Self::NotRunning { source, .. } | Self::Io { source, .. } => source.kind(),
            Self::Timeout { .. } => io::ErrorKind::TimedOut,
            Self::Protocol { source, .. } if source.is_invalid_data() => io::ErrorKind::InvalidData,
            Self::Protocol { .. } => io::ErrorKind::UnexpectedEof,
            Self::Encode(_) => io::ErrorKind::InvalidInput,
        }
    }

    /// True when nothing is listening (as opposed to a node that answered badly).
    pub fn is_not_running(&self) -> bool {
        matches!(self, Self::NotRunning { .. })
    }
}

fn connect_error(socket: &Path, e: io::Error) -> IpcError {
    let socket = socket.to_path_buf();
    match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
            IpcError::NotRunning { socket, source: e }
        }
        _ => IpcError::Io { socket, source: e },
    }
}

/// Blocking request with one overall deadline covering connect, write and the response.
pub fn request_sync(socket: &Path, req: &Request, timeout: Duration) -> Result<Response, IpcError> {
    let bytes = req.encode()?;
    let deadline = Instant::now() + timeout;
    let mut stream =
        std::os::unix::net::UnixStream::connect(socket).map_err(|e| connect_error(socket, e))?;
    let io_err = |source: io::Error| {
        if matches!(
            source.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            IpcError::Timeout {
                socket: socket.to_path_buf(),
                after: timeout,
            }
        } else {
            IpcError::Io {
                socket: socket.to_path_buf(),
                source,
            }
        }
    };
    let remaining = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    };
    stream.set_write_timeout(Some(timeout)).map_err(io_err)?;
    stream.write_all(&bytes).map_err(io_err)?;
    let mut collector = ResponseCollector::new(MAX_RESPONSE_BODY);
    let protocol = |source: HttpError| IpcError::Protocol {
        socket: socket.to_path_buf(),
        source,
    };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let Some(left) = remaining() else {
            return Err(io_err(io::ErrorKind::TimedOut.into()));
        };
        stream.set_read_timeout(Some(left)).map_err(io_err)?;
        let n = match stream.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err(e)),
        };
        if n == 0 {
            return collector.feed_eof().map_err(protocol);
        }
        if let Some(r) = collector.feed(&buf[..n]).map_err(protocol)? {
            return Ok(r);
        }
    }
}

/// Async request (tokio) with one overall deadline.
pub async fn request(
    socket: &Path,
    req: &Request,
    timeout: Duration,
) -> Result<Response, IpcError> {
    let fut = async {
        let mut s = AsyncResponse::send(socket, req).await?;
        let mut collector_body = Vec::new();
        let head = s.head().await?;
        while let Some(chunk) = s.next_data().await? {
            if collector_body.len() as u64 + chunk.len() as u64 > MAX_RESPONSE_BODY {
                return Err(IpcError::Protocol {
                    socket: socket.to_path_buf(),
                    source: HttpError::BodyTooLarge(MAX_RESPONSE_BODY),
                });
            }
            collector_body.extend_from_slice(&chunk);
        }
        Ok(Response {
            head,
            body: collector_body,
        })
    };
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or_else(|_| {
            Err(IpcError::Timeout {
                socket: socket.to_path_buf(),
                after: timeout,
            })
        })
}

/// A response being read from a tokio `UnixStream`: the head first, then body data as it
/// arrives (an SSE stream is read this way). Dropping it closes the connection.
#[derive(Debug)]
pub struct AsyncResponse {
    socket: PathBuf,
    stream: tokio::net::UnixStream,
    parser: ResponseParser,
}

impl AsyncResponse {
    /// Connects and writes the request.
    pub async fn send(socket: &Path, req: &Request) -> Result<Self, IpcError> {
        use tokio::io::AsyncWriteExt;
        let bytes = req.encode()?;
        let mut stream = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| connect_error(socket, e))?;
        stream
            .write_all(&bytes)
            .await
            .map_err(|source| IpcError::Io {
                socket: socket.to_path_buf(),
                source,
            })?;
        Ok(Self {
            socket: socket.to_path_buf(),
            stream,
            parser: ResponseParser::new(),
        })
    }

    async fn fill(&mut self) -> Result<(), IpcError> {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 16 * 1024];
        let n = self
            .stream
            .read(&mut buf)
            .await
            .map_err(|source| IpcError::Io {
                socket: self.socket.clone(),
                source,
            })?;
        let r = if n == 0 {
            self.parser.feed_eof()
        } else {
            self.parser.feed(&buf[..n])
        };
        r.map_err(|source| IpcError::Protocol {
            socket: self.socket.clone(),
            source,
        })
    }

    /// Waits for the final response head (interim responses are skipped by the parser).
    pub async fn head(&mut self) -> Result<ResponseHead, IpcError> {
        loop {
            match self.parser.poll_event() {
                Some(ResponseEvent::Head(h)) => return Ok(h),
                Some(other) => unreachable!("head comes first, got {other:?}"),
                None => self.fill().await?,
            }
        }
    }

    /// The next piece of decoded body, or `None` at the end of the response.
    pub async fn next_data(&mut self) -> Result<Option<Vec<u8>>, IpcError> {
        loop {
            match self.parser.poll_event() {
                Some(ResponseEvent::Data(d)) => return Ok(Some(d)),
                Some(ResponseEvent::End) => return Ok(None),
                Some(ResponseEvent::Head(_)) => unreachable!("one head per response"),
                None if self.parser.is_done() => return Ok(None),
                None => self.fill().await?,
            }
        }
    }
}
