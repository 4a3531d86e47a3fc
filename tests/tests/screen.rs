//! The stream's `hello` frame and screen-sync mode (`WS /sessions/{id}/stream?mode=screen`),
//! through the real `tuic-node` (and `tuic-hub`) binaries, real PTYs, a WebSocket client that
//! applies the frames the way a page does (`tuic_proto::screen::Mirror`).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::UnixStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tuic_proto::screen::{ClientFrame, Hello, Mirror, ServerFrame, Snapshot};
use tuic_tests::bed::screen_lines;
use tuic_tests::term::{Node, Ws, read_until};

const T: Duration = Duration::from_secs(60);

/// The first frame of a stream, which must be `hello`.
async fn hello(ws: &mut Ws) -> Hello {
    let m = tokio::time::timeout(T, ws.next())
        .await
        .expect("hello in time")
        .expect("open")
        .expect("frame");
    let Message::Text(t) = m else {
        panic!("first frame is not text: {m:?}")
    };
    match serde_json::from_str::<ServerFrame>(t.as_str()).expect("typed frame") {
        ServerFrame::Hello(h) => h,
        other => panic!("first frame is not hello: {other:?}"),
    }
}

/// A screen-mode client: applies every frame to a mirror, acks when `ack` is set, and counts
/// what it received.
struct ScreenClient {
    ws: Ws,
    mirror: Mirror,
    ack: bool,
    /// Bytes of every frame received (JSON text).
    bytes: usize,
    /// Screen and diff frames received.
    frames: usize,
    exit: Option<Option<i32>>,
    hello: Hello,
    /// The `parsed` events received, in order.
    parsed: Vec<Value>,
}

async fn ws_at(socket: &Path, id: &str, query: &str) -> anyhow::Result<Ws> {
    let stream = UnixStream::connect(socket).await?;
    let url = format!("ws://localhost/sessions/{id}/stream{query}");
    Ok(tokio_tungstenite::client_async(url, stream).await?.0)
}

impl ScreenClient {
    async fn connect(socket: &Path, id: &str, ack: bool) -> Self {
        let mut ws = ws_at(socket, id, "?mode=screen").await.unwrap();
        let hello = hello(&mut ws).await;
        let bytes = serde_json::to_string(&hello).unwrap().len();
        Self {
            ws,
            mirror: Mirror::default(),
            ack,
            bytes,
            frames: 0,
            exit: None,
            hello,
            parsed: Vec::new(),
        }
    }

    fn screen(&self) -> &Snapshot {
        self.mirror.screen.as_ref().expect("a screen arrived")
    }

    /// Reads one frame (bounded by `deadline`); false once the socket closed.
    async fn step(&mut self, deadline: Instant) -> anyhow::Result<bool> {
        let Some(m) = tokio::time::timeout_at(deadline, self.ws.next())
            .await
            .context("no frame in time")?
        else {
            return Ok(false);
        };
        let t = match m? {
            Message::Text(t) => t,
            Message::Close(_) => return Ok(false),
            Message::Binary(b) => bail!("binary frame in screen mode ({} bytes)", b.len()),
            _ => return Ok(true),
        };
        self.bytes += t.len();
        let f: ServerFrame = serde_json::from_str(t.as_str())?;
        if let ServerFrame::Parsed { event } = &f {
            self.parsed.push(event.clone());
        }
        if let ServerFrame::Exit { exit_code } = f {
            assert!(self.exit.is_none(), "two exit frames");
            self.exit = Some(exit_code);
        }
        if let Some(seq) = self.mirror.apply(&f)? {
            assert!(self.exit.is_none(), "a screen frame after exit");
            self.frames += 1;
            if self.ack {
                let a = serde_json::to_string(&ClientFrame::Ack { seq })?;
                self.ws.send(Message::Text(a.into())).await?;
            }
        }
        Ok(true)
    }

    /// Reads frames until `done` holds for the mirrored screen.
    async fn until(&mut self, what: &str, done: impl Fn(&Snapshot) -> bool) {
        let deadline = Instant::now() + T;
        while !self.mirror.screen.as_ref().is_some_and(&done) {
            match self.step(deadline).await {
                Ok(true) => {}
                Ok(false) => panic!("stream closed waiting for {what}: {:?}", self.mirror),
                Err(e) => panic!("waiting for {what}: {e:#}; screen {:?}", self.mirror.screen),
            }
        }
    }

    /// Reads frames until a `parsed` event satisfying `done` arrives; returns it.
    async fn until_parsed(&mut self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + T;
        loop {
            if let Some(e) = self.parsed.iter().find(|e| done(e)) {
                return e.clone();
            }
            match self.step(deadline).await {
                Ok(true) => {}
                Ok(false) => panic!("stream closed waiting for {what}: {:?}", self.parsed),
                Err(e) => panic!("waiting for {what}: {e:#}; parsed {:?}", self.parsed),
            }
        }
    }

    /// Reads until the socket closes.
    async fn drain(&mut self) {
        let deadline = Instant::now() + T;
        while self.step(deadline).await.unwrap() {}
    }

    async fn send(&mut self, f: &ClientFrame) {
        let t = serde_json::to_string(f).unwrap();
        self.ws.send(Message::Text(t.into())).await.unwrap();
    }
}

/// Waits until the mirror shows exactly the node's screen rows (frames keep coming until the
/// two agree; bounded).
async fn converge(c: &mut ScreenClient, socket: &Path, id: &str) -> Vec<String> {
    let deadline = Instant::now() + T;
    loop {
        let want = screen_lines(socket, id).await;
        if c.mirror
            .screen
            .as_ref()
            .is_some_and(|s| s.text_rows() == want)
        {
            return want;
        }
        assert!(
            c.step(deadline).await.unwrap(),
            "closed before the screens agreed: {want:?} vs {:?}",
            c.mirror.screen.as_ref().map(Snapshot::text_rows)
        );
    }
}

fn sh(rows: u16, cols: u16, script: &str) -> Value {
    json!({"rows": rows, "cols": cols, "shell": "/bin/sh", "args": ["-c", script], "cwd": "/tmp"})
}

#[tokio::test]
async fn every_stream_mode_starts_with_hello_saying_where_it_starts() {
    let node = Node::start(None).await.unwrap();
    let c = node
        .create(sh(
            10,
            40,
            "stty -echo; printf 'PROMPT-READY> '; read a; echo \"got:$a\"; read b",
        ))
        .await
        .unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    // Wait for the prompt through a stream that replays from byte 0.
    let mut all = node.ws(&id, "?from_byte=0").await.unwrap();
    let h0 = hello(&mut all).await;
    assert_eq!(
        (h0.mode.as_str(), h0.offset, h0.oldest_offset),
        ("output", 0, 0)
    );
    read_until(&mut all, b"PROMPT-READY> ", T).await.unwrap();

    // A client connecting "from now", after the prompt was printed: the hello says where its
    // bytes start, and the gap before it can be paged from `output`.
    let mut late = node.ws(&id, "?binary=1").await.unwrap();
    let h = hello(&mut late).await;
    assert_eq!(h.mode, "binary");
    assert!(h.offset >= 14, "{h:?}");
    assert_eq!(h.offset, h.total_written);
    assert_eq!(h.oldest_offset, 0);
    let gap = node
        .ok(
            "GET",
            &format!(
                "/sessions/{id}/output?format=raw&from_byte={}&limit={}",
                h.oldest_offset, h.offset
            ),
            None,
        )
        .await
        .unwrap();
    assert!(
        gap["data"].as_str().unwrap().ends_with("PROMPT-READY> "),
        "{gap}"
    );
    // Its first output bytes are exactly what follows `offset`.
    node.write(&id, "x1\n").await.unwrap();
    let got = read_until(&mut late, b"got:x1", T).await.unwrap();
    assert!(
        got.starts_with(b"got:x1"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );

    // Replaying from a byte: offset is that byte; past the end is clamped to the end.
    let mut mid = node.ws(&id, "?from_byte=7&format=text").await.unwrap();
    let hm = hello(&mut mid).await;
    assert_eq!((hm.mode.as_str(), hm.offset), ("text", 7));
    assert!(hm.total_written > 7);
    let mut future = node.ws(&id, "?from_byte=999999999").await.unwrap();
    let hf = hello(&mut future).await;
    assert_eq!(hf.offset, hf.total_written);
    let mut log = node.ws(&id, "?format=log").await.unwrap();
    assert_eq!(hello(&mut log).await.mode, "log");
    // The screen mode reports where the first screen stands, and an unknown mode is refused.
    let s = ScreenClient::connect(&node.socket, &id, true).await;
    assert_eq!(s.hello.mode, "screen");
    assert_eq!(s.hello.total_written, s.hello.offset);
    assert!(node.ws(&id, "?mode=pixels").await.is_err());
}

/// A program drawing on the alternate screen with cursor motion, erase and attributes; it
/// waits for a line, then leaves the alternate screen.
const DRAW: &str = r#"stty -echo
printf '\033]2;draw-title\007\033[?1049h\033[2J\033[H'
printf '\033[1;1H\033[1;32mTOP-LEFT\033[0m'
printf '\033[5;10H\033[7mmiddle\033[0m'
printf '\033[10;1H-- status --'
printf '\033[3;1Hxxxxxxx\033[3;3H\033[K'
printf '\033[6;1H\346\227\245\346\234\254wide'
printf '\033[8;20HDONE-MARK'
read go
printf '\033[?1049l'
echo "after-alt:$go"
"#;

#[tokio::test]
async fn screen_mode_mirrors_a_cursor_drawing_program_and_takes_input() {
    let node = Node::start(None).await.unwrap();
    let c = node.create(sh(12, 40, DRAW)).await.unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let mut sc = ScreenClient::connect(&node.socket, &id, true).await;
    sc.until("the drawing", |s| {
        s.text_rows().iter().any(|r| r.contains("DONE-MARK"))
    })
    .await;
    let rows = converge(&mut sc, &node.socket, &id).await;
    let s = sc.screen();
    assert_eq!(rows[0], "TOP-LEFT");
    assert_eq!(rows[2], "xx");
    assert_eq!(rows[4], "         middle");
    assert_eq!(rows[5], "日本wide");
    assert_eq!(rows[7], format!("{}DONE-MARK", " ".repeat(19)));
    assert_eq!(rows[9], "-- status --");
    assert!(s.alt_screen);
    assert_eq!(s.title, "draw-title");
    assert_eq!((s.cursor.x, s.cursor.y, s.cursor.visible), (28, 7, true));
    assert_eq!((s.cols, s.rows), (40, 12));
    let top = &s.lines[0][0];
    assert_eq!(top.fg, Some(tuic_proto::screen::Color::Index(2)));
    assert_eq!(top.attrs, tuic_proto::screen::attrs::BOLD);
    assert!(s.lines[5][0].wide);
    // Input through the screen socket reaches the PTY; leaving the alternate screen brings
    // the primary screen back; the last screen comes before `exit`.
    sc.send(&ClientFrame::Input {
        data: "go-on\n".into(),
    })
    .await;
    sc.drain().await;
    assert_eq!(sc.exit, Some(Some(0)));
    let s = sc.screen();
    assert!(!s.alt_screen);
    assert_eq!(s.text_rows(), screen_lines(&node.socket, &id).await);
    assert!(
        s.text_rows()[0].contains("after-alt:go-on"),
        "{:?}",
        s.text_rows()
    );
}

#[tokio::test]
async fn screen_mode_views_history_and_resizes_only_when_asked() {
    let node = Node::start(None).await.unwrap();
    let c = node
        .create(sh(
            5,
            30,
            "stty -echo; i=0; while [ $i -lt 40 ]; do echo row-$i; i=$((i+1)); done; printf END; read x; read y",
        ))
        .await
        .unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let mut sc = ScreenClient::connect(&node.socket, &id, true).await;
    sc.until("END", |s| s.text_rows().iter().any(|r| r == "END"))
        .await;
    assert_eq!(sc.screen().text_rows()[3], "row-39");
    // Ten rows back: the view shows older rows; the grid's own scroll position is untouched.
    sc.send(&ClientFrame::Scroll { offset: 10 }).await;
    sc.until("the history view", |s| s.scroll == 10).await;
    assert_eq!(sc.screen().text_rows()[0], "row-26");
    assert!(!sc.screen().cursor.visible);
    let info = node
        .ok("GET", &format!("/sessions/{id}/terminal/scroll-info"), None)
        .await
        .unwrap();
    assert_eq!(info["display_offset"], 0);
    sc.send(&ClientFrame::Scroll { offset: 0 }).await;
    sc.until("the live view", |s| s.scroll == 0 && s.cursor.visible)
        .await;
    // A viewport report does not resize the PTY (the owner's size stays)...
    sc.send(&ClientFrame::Resize {
        rows: 40,
        cols: 50,
        apply: false,
    })
    .await;
    // ...an applied one does, and the next frame is a whole screen of the new size.
    sc.send(&ClientFrame::Resize {
        rows: 8,
        cols: 33,
        apply: true,
    })
    .await;
    sc.until("the resize", |s| (s.rows, s.cols) == (8, 33))
        .await;
    let info = node
        .ok("GET", &format!("/sessions/{id}/terminal/scroll-info"), None)
        .await
        .unwrap();
    assert_eq!(info["screen_lines"], 8);
    converge(&mut sc, &node.socket, &id).await;
}

#[tokio::test]
async fn a_burst_sends_a_small_fraction_of_the_raw_bytes_and_a_silent_client_no_backlog() {
    let node = Node::start(None).await.unwrap();
    // About 64 MiB of distinct lines, started once both clients are attached.
    let script = "stty -echo; printf READY; read go; \
                  seq -f '%.0f abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz' 1 950000; \
                  printf 'BURST-END'; read done";
    let c = node.create(sh(24, 80, script)).await.unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let mut fast = ScreenClient::connect(&node.socket, &id, true).await;
    fast.until("READY", |s| s.text_rows()[0].contains("READY"))
        .await;
    // A client that never acknowledges: it gets the window, then nothing until the end.
    let mut silent = ScreenClient::connect(&node.socket, &id, false).await;
    let before = fast.bytes;
    let started = std::time::Instant::now();
    node.write(&id, "go\n").await.unwrap();
    fast.until("the end of the burst", |s| {
        s.text_rows().iter().any(|r| r.contains("BURST-END"))
    })
    .await;
    let secs = started.elapsed().as_secs_f64();
    converge(&mut fast, &node.socket, &id).await;
    let raw = node
        .ok(
            "GET",
            &format!("/sessions/{id}/output?format=raw&limit=1"),
            None,
        )
        .await
        .unwrap()["total_written"]
        .as_u64()
        .unwrap();
    let sent = (fast.bytes - before) as u64;
    println!(
        "burst: raw {raw} bytes in {secs:.1} s; screen client {sent} bytes in {} frames ({:.3} %)",
        fast.frames,
        sent as f64 * 100.0 / raw as f64
    );
    assert!(raw > 60 << 20, "{raw}");
    assert!(
        sent * 50 <= raw,
        "screen {sent} bytes vs raw {raw}: over 2 %"
    );
    // The silent client still holds at most the window of frames; ending the session sends
    // it the last screen regardless, equal to the grid's.
    node.write(&id, "x\n").await.unwrap();
    silent.drain().await;
    fast.drain().await;
    let last = screen_lines(&node.socket, &id).await;
    println!(
        "silent client: {} frames, {} bytes",
        silent.frames, silent.bytes
    );
    assert!(
        silent.frames <= 5,
        "a client that never acks got {} frames",
        silent.frames
    );
    assert_eq!(silent.screen().text_rows(), last);
    assert_eq!(fast.screen().text_rows(), last);
}

#[tokio::test]
async fn screen_mode_works_for_a_remote_session_through_the_hub() {
    let pw = "screen pass";
    let (nd, node) =
        tuic_tests::bed::remote_proc_as("tuic-node", json!({"secret_store": "file"}), pw, "0", &[]);
    let hd = tuic_tests::config_dir(json!({}));
    let hdir = hd.path().to_str().unwrap().to_owned();
    let hub = tuic_tests::NodeProc::start("tuic-hub", &["--config-dir", &hdir], &[]).unwrap();
    tuic_tests::bed::connect_hub(hd.path(), nd.path(), &node, "boxs");
    let r = tuic_tests::ipc(&node.socket, "POST", "/sessions", Some(sh(10, 40, DRAW)))
        .await
        .unwrap();
    let sid = r.json()["session_id"].as_str().unwrap().to_owned();
    let enc = format!("boxs%2F{sid}");
    // The hub dials the owner once its connection is up: retry the handshake (bounded).
    let deadline = Instant::now() + T;
    let mut ws = loop {
        match ws_at(&hub.socket, &enc, "?mode=screen").await {
            Ok(ws) => break ws,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "hub never proxied the stream: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let h = hello(&mut ws).await;
    assert_eq!(h.mode, "screen", "the hub passed the query through");
    let mut sc = ScreenClient {
        ws,
        mirror: Mirror::default(),
        ack: true,
        bytes: 0,
        frames: 0,
        exit: None,
        hello: h,
        parsed: Vec::new(),
    };
    sc.until("the drawing", |s| {
        s.text_rows().iter().any(|r| r.contains("DONE-MARK"))
    })
    .await;
    converge(&mut sc, &node.socket, &sid).await;
    assert_eq!(sc.screen().title, "draw-title");
    sc.send(&ClientFrame::Input {
        data: "remote\n".into(),
    })
    .await;
    sc.drain().await;
    assert_eq!(sc.exit, Some(Some(0)));
    assert!(sc.screen().text_rows()[0].contains("after-alt:remote"));
}

#[tokio::test]
async fn screen_mode_stays_bounded_and_exact_under_hostile_output() {
    let node = Node::start(None).await.unwrap();
    // A 1 MB line, 10,000 colour changes (alternating per cell and with no cell between),
    // invalid UTF-8, an OSC 52 clipboard write and a title with markup.
    let script = r#"stty -echo; printf READY; read go
head -c 1000000 /dev/zero | tr '\0' 'A'; printf '\n'
i=0; while [ $i -lt 10000 ]; do printf '\033[3%dm\033[4%dmx\r' $((i%8)) $(((i+3)%8)); i=$((i+1)); done
i=0; while [ $i -lt 2000 ]; do printf '\033[38;2;%d;%d;%dmc' $((i%256)) $((i*7%256)) $((i*13%256)); i=$((i+1)); done
printf '\033[0m\n\377\376\300\200 bad bytes\n'
printf '\033]52;c;aGVsbG8=\007\033]0;<script>alert(1)</script>\007'
printf 'HOSTILE-END'; read done"#;
    let c = node.create(sh(24, 80, script)).await.unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let mut sc = ScreenClient::connect(&node.socket, &id, true).await;
    sc.until("READY", |s| s.text_rows()[0].contains("READY"))
        .await;
    node.write(&id, "go\n").await.unwrap();
    // Every frame stays within what a 24×80 screen can need, however hostile the output.
    let deadline = Instant::now() + T;
    let mut largest = 0;
    while !sc
        .mirror
        .screen
        .as_ref()
        .is_some_and(|s| s.text_rows().iter().any(|r| r.contains("HOSTILE-END")))
    {
        let before = sc.bytes;
        assert!(sc.step(deadline).await.unwrap(), "closed early");
        largest = largest.max(sc.bytes - before);
    }
    println!(
        "hostile output: largest frame {largest} bytes, {} frames",
        sc.frames
    );
    assert!(largest < 24 * 80 * 64, "a frame of {largest} bytes");
    converge(&mut sc, &node.socket, &id).await;
    let s = sc.screen();
    assert_eq!(s.title, "<script>alert(1)</script>");
    assert!(
        s.text_rows()
            .iter()
            .any(|r| r.contains("\u{FFFD}") && r.contains("bad bytes")),
        "{:?}",
        s.text_rows()
    );
    // The per-cell colours arrived as runs: one row has 80 distinct true-colour runs.
    assert!(s.lines.iter().any(|r| r.len() >= 80), "{:?}", s.lines);
    node.write(&id, "x\n").await.unwrap();
    sc.drain().await;
    assert_eq!(sc.exit, Some(Some(0)));
}

#[tokio::test]
async fn a_synchronized_update_that_never_ends_shows_after_its_deadline() {
    let node = Node::start(None).await.unwrap();
    // Begin a DEC 2026 frame, draw into it and stall without ending it.
    let c = node
        .create(sh(
            6,
            30,
            "stty -echo; printf 'before\\n\\033[?2026h\\033[2J\\033[HSYNC-FRAME'; read x",
        ))
        .await
        .unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let mut sc = ScreenClient::connect(&node.socket, &id, true).await;
    let t0 = std::time::Instant::now();
    sc.until("the stalled frame", |s| s.text_rows()[0] == "SYNC-FRAME")
        .await;
    // The emulator's bound is 150 ms; allow for a loaded machine, not for "never".
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    converge(&mut sc, &node.socket, &id).await;
}

/// The session's row in `GET /sessions`.
async fn listed_row(node: &Node, id: &str) -> Value {
    let rows = node.ok("GET", "/sessions", None).await.unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["session_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no row for {id}: {rows}"))
}

/// A pending question is state of the session: its row (`GET /sessions`, MCP `session
/// action=list`) carries it with its choices, a viewer that comes after it appeared gets it
/// after its first screen, and once answered the row drops it.
#[tokio::test]
async fn a_pending_question_is_on_the_row_and_reaches_a_viewer_that_came_later() {
    let node = Node::start(None).await.unwrap();
    let script = concat!(
        "stty -echo; printf 'READY\\n'; read go; ",
        "printf '\\n Do you want to make this edit?\\n ❯ 1. Yes\\n   2. No\\n'; ",
        "read a; printf '\\033[2J\\033[H'; echo \"answered:$a\"; read z"
    );
    let c = node.create(sh(24, 80, script)).await.unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let mut first = ScreenClient::connect(&node.socket, &id, true).await;
    first
        .until("READY", |s| s.text_rows()[0].contains("READY"))
        .await;
    node.write(&id, "go\n").await.unwrap();
    // The monitor publishes the question after storing the probe the rows read.
    let ev = first
        .until_parsed("the question", |e| e["type"] == "question")
        .await;
    assert_eq!(ev["options"], json!(["Yes", "No"]), "{ev}");
    let want =
        json!({"text": "Do you want to make this edit?", "options": ["Yes", "No"], "select": true});
    let row = listed_row(&node, &id).await;
    assert_eq!(row["question"], want, "{row}");
    let (mut agent, _) = tuic_tests::agent::Agent::new(&node.socket, "row-reader").await;
    let (err, listed) = agent.tool("session", json!({"action": "list"})).await;
    assert!(!err, "{listed}");
    let mcp_row = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["session_id"] == id.as_str())
        .cloned()
        .unwrap();
    assert_eq!(mcp_row["question"], want, "{mcp_row}");
    // A viewer that never saw the event (a reload, another device) gets it with its screen.
    let mut late = ScreenClient::connect(&node.socket, &id, true).await;
    let ev = late
        .until_parsed("the pending question", |e| e["type"] == "question")
        .await;
    assert!(
        late.mirror.screen.is_some(),
        "the question comes after the first screen"
    );
    assert_eq!(ev["text"], "Do you want to make this edit?", "{ev}");
    assert_eq!(ev["options"], json!(["Yes", "No"]), "{ev}");
    // Answered (the program redraws, as an agent's menu does): the question leaves the row (the
    // state change is published after the probe the rows read).
    first
        .until_parsed("needs input", |e| {
            e["type"] == "state" && e["state"] == "needs_input"
        })
        .await;
    first.parsed.clear();
    node.write(&id, "1\n").await.unwrap();
    first
        .until("the answer", |s| {
            s.text_rows().iter().any(|r| r.contains("answered:1"))
        })
        .await;
    first
        .until_parsed("the state after the answer", |e| {
            e["type"] == "state" && e["state"] != "needs_input"
        })
        .await;
    let row = listed_row(&node, &id).await;
    assert!(row.get("question").is_none(), "{row}");
}

/// The size policy: a viewer's Fit resizes the PTY for everyone while it stays; when the last
/// viewer that fitted leaves, the size before comes back (the desktop never stays phone-width);
/// an explicit resize by anyone else stands.
#[tokio::test]
async fn a_fit_is_undone_when_the_viewer_that_fitted_leaves() {
    let node = Node::start(None).await.unwrap();
    let c = node
        .create(sh(24, 80, "stty -echo; printf READY; read x"))
        .await
        .unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let mut desk = ScreenClient::connect(&node.socket, &id, true).await;
    desk.until("READY", |s| s.text_rows()[0].contains("READY"))
        .await;
    let mut phone = ScreenClient::connect(&node.socket, &id, true).await;
    phone
        .until("READY", |s| s.text_rows()[0].contains("READY"))
        .await;
    phone
        .send(&ClientFrame::Resize {
            rows: 40,
            cols: 45,
            apply: true,
        })
        .await;
    desk.until("the phone's size", |s| (s.rows, s.cols) == (40, 45))
        .await;
    drop(phone);
    desk.until("the size before", |s| (s.rows, s.cols) == (24, 80))
        .await;
    // Fit again, then an explicit resize (the REST route): that size stays after the phone goes.
    let mut phone = ScreenClient::connect(&node.socket, &id, true).await;
    phone
        .until("READY", |s| s.text_rows()[0].contains("READY"))
        .await;
    phone
        .send(&ClientFrame::Resize {
            rows: 40,
            cols: 45,
            apply: true,
        })
        .await;
    desk.until("the phone's size", |s| (s.rows, s.cols) == (40, 45))
        .await;
    node.ok(
        "POST",
        &format!("/sessions/{id}/resize"),
        Some(json!({"rows": 30, "cols": 100})),
    )
    .await
    .unwrap();
    desk.until("the explicit size", |s| (s.rows, s.cols) == (30, 100))
        .await;
    drop(phone);
    // Nothing is put back: a fresh viewer sees the explicit size.
    let mut again = ScreenClient::connect(&node.socket, &id, true).await;
    again.until("a screen", |_| true).await;
    assert_eq!((again.screen().rows, again.screen().cols), (30, 100));
}
