//! A real local HTTP receiver standing in for a Web Push service, an ntfy server and a webhook
//! endpoint: it records every request and answers what its script says (then 201).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use tokio::sync::mpsc;

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Hit {
    /// The method.
    pub method: String,
    /// The path.
    pub path: String,
    /// The headers.
    pub headers: hyper::HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl Hit {
    /// A header as text (empty when absent).
    pub fn header(&self, k: &str) -> String {
        self.headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    }
}

/// What the receiver answers next (then 201 once the script runs out).
#[derive(Debug, Clone, Copy)]
pub enum Reply {
    /// Answer with this status.
    Status(u16),
    /// Never answer.
    Hang,
}

/// A real local HTTP receiver standing in for a push service, an ntfy server and a webhook.
pub struct Receiver {
    /// Where it listens.
    pub addr: SocketAddr,
    hits: mpsc::UnboundedReceiver<Hit>,
    /// What it answers next.
    pub script: Arc<Mutex<VecDeque<Reply>>>,
}

impl Receiver {
    /// A receiver on the test's loopback.
    pub async fn start() -> Self {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::on(l)
    }

    /// A receiver on a listener made elsewhere (inside a namespace: [`crate::netns::listen_in`]).
    pub fn start_on(l: std::net::TcpListener) -> Self {
        l.set_nonblocking(true).unwrap();
        Self::on(tokio::net::TcpListener::from_std(l).unwrap())
    }

    fn on(l: tokio::net::TcpListener) -> Self {
        let addr = l.local_addr().unwrap();
        let (tx, hits) = mpsc::unbounded_channel();
        let script: Arc<Mutex<VecDeque<Reply>>> = Arc::default();
        let s2 = script.clone();
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = l.accept().await else {
                    break;
                };
                let tx = tx.clone();
                let script = s2.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let tx = tx.clone();
                        let script = script.clone();
                        async move {
                            let method = req.method().to_string();
                            let path = req.uri().path().to_owned();
                            let headers = req.headers().clone();
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let next = script.lock().unwrap().pop_front();
                            let _ = tx.send(Hit {
                                method,
                                path,
                                headers,
                                body,
                            });
                            let status = match next {
                                Some(Reply::Hang) => {
                                    tokio::time::sleep(Duration::from_secs(3600)).await;
                                    200
                                }
                                Some(Reply::Status(s)) => s,
                                None => 201,
                            };
                            Ok::<_, std::convert::Infallible>(
                                hyper::Response::builder()
                                    .status(status)
                                    .body(Full::new(Bytes::new()))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                        .await;
                });
            }
        });
        Self { addr, hits, script }
    }

    /// `http://addr{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The next request whose path starts with `prefix` (others are kept for later).
    pub async fn next(&mut self, prefix: &str, within: Duration) -> Hit {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.hits.recv()).await {
                Ok(Some(h)) if h.path.starts_with(prefix) => return h,
                Ok(Some(_)) => continue,
                _ => panic!("no request to {prefix} within {within:?}"),
            }
        }
    }

    /// Every request that arrives within `d`.
    pub async fn drain(&mut self, d: Duration) -> Vec<Hit> {
        let deadline = Instant::now() + d;
        let mut out = Vec::new();
        while let Ok(Some(h)) = tokio::time::timeout(
            deadline.saturating_duration_since(Instant::now()),
            self.hits.recv(),
        )
        .await
        {
            out.push(h);
        }
        out
    }
}
