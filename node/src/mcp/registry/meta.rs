//! The collapsed surface: `search_tools` (BM25 over every callable tool, the index rebuilt
//! only when the tool set changed), `get_tool_schema` and `call_tool`, which dispatches with
//! the same filters and identity as a direct call.

use serde::Deserialize;
use serde::de::Error as _;

use super::*;

/// `search_tools`' typed arguments (`crate::args`).
#[derive(Debug, Deserialize)]
struct SearchArgs {
    #[serde(default, deserialize_with = "crate::args::string")]
    query: Option<String>,
    #[serde(default, deserialize_with = "limit")]
    limit: Option<usize>,
}

/// `get_tool_schema`'s and `call_tool`'s typed arguments (`crate::args`); only `call_tool`
/// has `arguments`.
#[derive(Debug, Deserialize)]
struct ToolArgs {
    #[serde(default, deserialize_with = "crate::args::string")]
    name: Option<String>,
    #[serde(default, deserialize_with = "object")]
    arguments: Option<Map<String, Value>>,
}

/// A required string argument of a meta-tool.
fn required(v: Option<String>, k: &str) -> Result<String, ToolError> {
    v.ok_or_else(|| ToolError::invalid(format!("{k} is required")))
}

/// `search_tools`' `limit`: an integer 1..=100.
fn limit<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=100).contains(n))
            .map(|n| Some(n as usize))
            .ok_or_else(|| D::Error::custom("must be an integer 1..=100")),
    }
}

/// `call_tool`'s `arguments`: an object (absent or null: none).
fn object<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Map<String, Value>>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(_) => Err(D::Error::custom("must be an object")),
    }
}

impl Registry {
    /// `search_tools`: the BM25 ranking over every callable tool (native, run-time and
    /// proxied), best first, at most `limit` rows `{name, summary}`. The index is rebuilt
    /// only when the tool set changed since it was built.
    pub fn search(&self, cfg: &crate::config::Config, query: &str, limit: usize) -> Vec<Value> {
        let corpus = self.corpus(cfg);
        corpus
            .index
            .search(query, limit)
            .into_iter()
            .filter_map(|(name, _)| corpus.rows.get(name).cloned())
            .collect()
    }

    fn corpus(&self, cfg: &crate::config::Config) -> Arc<Corpus> {
        use crate::upstream::search::{Doc, Index};
        let key: IndexKey = (
            surface_fingerprint(cfg),
            self.dynamic_generation.load(Ordering::Relaxed),
            self.sources().iter().map(|s| s.generation()).collect(),
        );
        let mut g = self.index.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((k, c)) = g.as_ref()
            && *k == key
        {
            return c.clone();
        }
        let mut docs = Vec::new();
        let mut rows = std::collections::HashMap::new();
        for t in self.visible(cfg) {
            let listing = t.listing();
            if let Some(d) = Doc::from_listing(&listing) {
                rows.insert(
                    d.name.clone(),
                    json!({"name": t.name, "summary": t.summary}),
                );
                docs.push(d);
            }
        }
        for src in self.sources() {
            for l in src.listings() {
                if let Some(d) = Doc::from_listing(&l) {
                    let summary: String = d
                        .description
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .chars()
                        .take(120)
                        .collect();
                    rows.insert(d.name.clone(), json!({"name": d.name, "summary": summary}));
                    docs.push(d);
                }
            }
        }
        let corpus = Arc::new(Corpus {
            index: Index::build(&docs),
            rows,
        });
        *g = Some((key, corpus.clone()));
        corpus
    }

    pub(super) async fn call_meta(
        &self,
        node: &Arc<Node>,
        ctx: &CallCtx,
        name: &str,
        args: Map<String, Value>,
    ) -> Dispatched {
        match self.call_meta_inner(node, ctx, name, args).await {
            Ok((v, p)) => (v, p),
            Err(e) => (Err(e), false),
        }
    }

    async fn call_meta_inner(
        &self,
        node: &Arc<Node>,
        ctx: &CallCtx,
        name: &str,
        args: Map<String, Value>,
    ) -> Result<Dispatched, ToolError> {
        let cfg = node.config();
        if name == "search_tools" {
            let a: SearchArgs = crate::args::parse(&args)?;
            let q = required(a.query, "query")?;
            let limit = a.limit.unwrap_or(10);
            let hits = if q.trim().is_empty() {
                // No keywords: the catalogue's first rows, so the agent sees what exists.
                let mut all: Vec<Value> = self
                    .visible(&cfg)
                    .iter()
                    .map(|t| json!({"name": t.name, "summary": t.summary}))
                    .collect();
                all.truncate(limit);
                all
            } else {
                self.search(&cfg, &q, limit)
            };
            return Ok((Ok(Answer::Value(json!({"tools": hits}))), false));
        }
        let a: ToolArgs = crate::args::parse(&args)?;
        let n = required(a.name, "name")?;
        if name == "get_tool_schema" {
            if META_TOOLS.contains(&n.as_str()) {
                return Err(ToolError::invalid(format!("{n} is a meta-tool")));
            }
            if let Some(src) = self.owner(&n) {
                return src.schema(&n).map(|l| (Ok(Answer::Value(l)), false));
            }
            return self
                .find(&cfg, &n)
                .map(|t| (Ok(Answer::Value(t.listing())), false))
                .ok_or_else(|| ToolError::invalid(format!("no such tool: {n}")));
        }
        if META_TOOLS.contains(&n.as_str()) {
            return Err(ToolError::invalid("call_tool cannot call a meta-tool"));
        }
        let inner = a.arguments.unwrap_or_default();
        // The proxied tools' filters apply here too: discovery does not gate dispatch.
        if let Some(src) = self.owner(&n) {
            return Ok((
                src.call(node, ctx, &n, inner).await.map(Answer::Value),
                true,
            ));
        }
        let Some(def) = self.find(&cfg, &n) else {
            return Err(ToolError::invalid(format!(
                "no such tool (or disabled): {n}"
            )));
        };
        let passthrough = def.passthrough;
        Ok((run(node, ctx, def, inner).await, passthrough))
    }
}

/// The meta-tools' listings, trimmed to what a model needs: they are listed on the full
/// surface too (they are always callable; SDKs warn on a call to an unlisted tool), where
/// every byte counts against the `tools/list` budget.
pub(super) fn meta_listings() -> Vec<Value> {
    vec![
        json!({"name": "search_tools",
            "description": "Find tools by keywords: names and one-line summaries.",
            "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["query"]}}),
        json!({"name": "get_tool_schema",
            "description": "One tool's description and input schema.",
            "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}),
        json!({"name": "call_tool",
            "description": "Call a tool by name with its arguments.",
            "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}}, "required": ["name"]}}),
    ]
}
