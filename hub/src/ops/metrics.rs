//! `GET /metrics` merged: the hub's own exposition, its federation gauges and every reachable
//! node's samples with a `connection` label.

use super::*;

/// `GET /metrics`: the hub's own exposition, the hub's federation gauges (connection up,
/// mirrored sessions, outbox depth per connection) and every reachable node's samples with a
/// `connection` label, one family block per metric name.
pub(super) async fn metrics(fed: Arc<Federation>, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    if !resp.status().is_success() {
        return resp;
    }
    let local = resp
        .into_body()
        .collect()
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default();
    let mut families = Families::default();
    families.add(&local, None);
    families.add(&federation_text(&fed), None);
    let conns = fed.all();
    let fetches = conns.iter().map(|c| {
        let fed = fed.clone();
        let c = c.clone();
        async move {
            if !c.snapshot().up {
                return (c, None);
            }
            let r = fed
                .http
                .get(format!("{}/metrics", c.url))
                .header(reqwest::header::COOKIE, c.cookie())
                .timeout(NODE_TIMEOUT)
                .send()
                .await;
            let text = match r {
                Ok(r) if r.status().is_success() => r.text().await.ok(),
                _ => None,
            };
            (c, text)
        }
    });
    for (c, text) in futures::future::join_all(fetches).await {
        if let Some(t) = text {
            families.add(&t, Some(&c.id));
        }
    }
    (
        [(header::CONTENT_TYPE, tuic_node::ext::METRICS_CONTENT_TYPE)],
        families.render(),
    )
        .into_response()
}

fn federation_text(fed: &Federation) -> String {
    use prometheus::{Encoder, IntGaugeVec, Opts, Registry, TextEncoder};
    let r = Registry::new();
    let vec = |name: &str, help: &str| {
        let g = IntGaugeVec::new(Opts::new(name, help), &["connection"]).expect("static metric");
        let _ = r.register(Box::new(g.clone()));
        g
    };
    let up = vec(
        "tuic_hub_connection_up",
        "Whether the hub's connection to a node is up (1) or down (0).",
    );
    let peer = vec(
        "tuic_hub_peer_link_up",
        "Whether the connection's peer link (cross-host mail) is up.",
    );
    let sessions = vec(
        "tuic_hub_connection_sessions",
        "Sessions mirrored from a node.",
    );
    let held = vec(
        "tuic_hub_outbox_held_messages",
        "Mail the hub holds for a node until it acknowledges, per connection.",
    );
    for c in fed.all() {
        let s = c.snapshot();
        up.with_label_values(&[&c.id]).set(i64::from(s.up));
        peer.with_label_values(&[&c.id]).set(i64::from(s.peer_up));
        sessions
            .with_label_values(&[&c.id])
            .set(s.sessions.len() as i64);
        held.with_label_values(&[&c.id])
            .set(fed.mail.held(&c.id) as i64);
    }
    let mut buf = Vec::new();
    let _ = TextEncoder::new().encode(&r.gather(), &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

/// Text-format families gathered from several expositions: each metric's `# HELP`/`# TYPE`
/// once, then every source's samples, a node's with its `connection` label added.
#[derive(Default)]
struct Families {
    order: Vec<String>,
    heads: std::collections::HashMap<String, Vec<String>>,
    samples: std::collections::HashMap<String, Vec<String>>,
}

impl Families {
    fn add(&mut self, text: &str, conn: Option<&str>) {
        let mut current: Option<String> = None;
        for line in text.lines() {
            if let Some(rest) = line
                .strip_prefix("# HELP ")
                .or_else(|| line.strip_prefix("# TYPE "))
            {
                let name = rest.split_whitespace().next().unwrap_or("").to_owned();
                if !self.heads.contains_key(&name) {
                    self.order.push(name.clone());
                    self.heads.insert(name.clone(), Vec::new());
                }
                let h = self.heads.get_mut(&name).expect("inserted");
                let kind = &line[..6];
                if !h.iter().any(|l| l.starts_with(kind)) {
                    h.push(line.to_owned());
                }
                current = Some(name);
                continue;
            }
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some(fam) = current.clone() else { continue };
            let sample = match conn {
                None => line.to_owned(),
                Some(c) => with_label(line, c),
            };
            self.samples.entry(fam).or_default().push(sample);
        }
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for name in &self.order {
            for h in &self.heads[name] {
                out.push_str(h);
                out.push('\n');
            }
            for s in self.samples.get(name).into_iter().flatten() {
                out.push_str(s);
                out.push('\n');
            }
        }
        out
    }
}

/// `name{a="b"} v` → `name{connection="c",a="b"} v`; `name v` → `name{connection="c"} v`.
fn with_label(line: &str, conn: &str) -> String {
    let label = format!("connection=\"{conn}\"");
    match line.find(['{', ' ']) {
        Some(i) if line.as_bytes()[i] == b'{' => {
            let rest = &line[i + 1..];
            let sep = if rest.starts_with('}') { "" } else { "," };
            format!("{}{{{label}{sep}{rest}", &line[..i])
        }
        Some(i) => format!("{}{{{label}}}{}", &line[..i], &line[i..]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_added_to_every_sample_form() {
        assert_eq!(
            with_label("tuic_sessions 3", "b"),
            "tuic_sessions{connection=\"b\"} 3"
        );
        assert_eq!(
            with_label("h_bucket{le=\"0.1\"} 1", "b"),
            "h_bucket{connection=\"b\",le=\"0.1\"} 1"
        );
        assert_eq!(with_label("x{} 1", "b"), "x{connection=\"b\"} 1");
    }

    #[test]
    fn families_merge_once_per_name() {
        let a = "# HELP m help\n# TYPE m gauge\nm 1\n";
        let mut f = Families::default();
        f.add(a, None);
        f.add(a, Some("b"));
        assert_eq!(
            f.render(),
            "# HELP m help\n# TYPE m gauge\nm 1\nm{connection=\"b\"} 1\n"
        );
    }
}
