//! A local HTTP server that replays recorded GitHub REST API answers (`tests/data/github/`)
//! to a node pointed at it through `github.api_base`, and records every request it was sent
//! (method, path and query, `Authorization`, body) for the test to assert on. This machine
//! cannot reach GitHub: these replays are the only GitHub the tests see.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use serde::Deserialize;
use serde_json::{Map, Value};

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `GET`, `PATCH`…
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// The `Authorization` header, when sent.
    pub auth: Option<String>,
    /// The body, when JSON.
    pub body: Value,
}

#[derive(Debug, Clone, Deserialize)]
struct Entry {
    method: String,
    path: String,
    #[serde(default)]
    query: Map<String, Value>,
    auth: Option<String>,
    status: u16,
    #[serde(default)]
    headers: Map<String, Value>,
    body: Option<Value>,
    body_file: Option<String>,
}

/// The replay server; stops when dropped.
#[derive(Debug)]
pub struct Replay {
    /// `http://127.0.0.1:PORT`: the `github.api_base` to configure.
    pub base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    vars: Arc<Mutex<HashMap<String, String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Replay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The fixtures' folder.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/github")
}

impl Replay {
    /// Starts serving `replay.json` on an ephemeral loopback port.
    pub async fn start() -> Self {
        let entries: Vec<Entry> = serde_json::from_slice(
            &std::fs::read(fixtures().join("replay.json")).expect("replay.json"),
        )
        .expect("replay.json parses");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let base = format!("http://{addr}");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let vars = Arc::new(Mutex::new(HashMap::from([(
            "BASE".to_owned(),
            base.clone(),
        )])));
        let entries = Arc::new(entries);
        let (s, v) = (seen.clone(), vars.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (entries, s, v) = (entries.clone(), s.clone(), v.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let (entries, s, v) = (entries.clone(), s.clone(), v.clone());
                        async move { Ok::<_, Infallible>(answer(&entries, &s, &v, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self {
            base,
            seen,
            vars,
            task,
        }
    }

    /// Sets a `@@NAME@@` value the fixtures refer to.
    pub fn set(&self, name: &str, value: &str) {
        self.vars
            .lock()
            .unwrap()
            .insert(name.to_owned(), value.to_owned());
    }

    /// Every request received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Forgets the requests received so far.
    pub fn clear(&self) {
        self.seen.lock().unwrap().clear();
    }
}

fn fill(text: &str, vars: &HashMap<String, String>) -> String {
    let mut out = text.to_owned();
    for (k, v) in vars {
        out = out.replace(&format!("@@{k}@@"), v);
    }
    out
}

/// `@@NOISE n@@` → n bytes of timestamped test-output lines.
fn expand_noise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        if let Some(n) = line
            .trim()
            .strip_prefix("@@NOISE ")
            .and_then(|r| r.strip_suffix("@@"))
            .and_then(|n| n.parse::<usize>().ok())
        {
            let mut i = 0usize;
            let start = out.len();
            while out.len() - start < n {
                out.push_str(&format!(
                    "2026-12-07T11:{:02}:{:02}.0000000Z test noise::case_{i} ... ok\n",
                    (i / 60) % 60,
                    i % 60
                ));
                i += 1;
            }
        } else {
            out.push_str(line);
        }
    }
    out
}

async fn answer(
    entries: &[Entry],
    seen: &Mutex<Vec<Seen>>,
    vars: &Mutex<HashMap<String, String>>,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let method = req.method().to_string();
    let path = req.uri().path().to_owned();
    let uri = req.uri().to_string();
    let query: HashMap<String, String> = req
        .uri()
        .query()
        .map(|q| {
            url_pairs(q)
                .into_iter()
                .collect::<HashMap<String, String>>()
        })
        .unwrap_or_default();
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    seen.lock().unwrap().push(Seen {
        method: method.clone(),
        uri,
        auth: auth.clone(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let vars = vars.lock().unwrap().clone();
    let hit = entries.iter().find(|e| {
        (e.method == "*" || e.method == method)
            && (e.path == "*" || e.path == path)
            && e.auth.as_ref().is_none_or(|a| Some(a) == auth.as_ref())
            && e.query
                .iter()
                .all(|(k, v)| query.get(k).map(String::as_str) == v.as_str())
    });
    let Some(e) = hit else {
        return Response::builder()
            .status(599)
            .body(Full::new(Bytes::from(format!(
                "no replay for {method} {path}"
            ))))
            .unwrap();
    };
    let mut text = match (&e.body, &e.body_file) {
        (Some(v), _) => v.to_string(),
        (None, Some(f)) => std::fs::read_to_string(fixtures().join(f)).expect("body file"),
        (None, None) => String::new(),
    };
    text = expand_noise(&fill(&text, &vars));
    let mut b = Response::builder().status(e.status);
    if !e.headers.contains_key("content-type") {
        b = b.header("content-type", "application/json; charset=utf-8");
    }
    for (k, v) in &e.headers {
        b = b.header(k.as_str(), fill(v.as_str().unwrap_or_default(), &vars));
    }
    b.body(Full::new(Bytes::from(text))).unwrap()
}

fn url_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let h = u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap_or(b'?');
                out.push(h);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
