//! The BM25 index behind the collapsed surface's `search_tools`: one document per tool, built
//! from its name, its description and the names of its input parameters. Pure: no IO, no
//! clock; the registry rebuilds it when the tool set changes and keeps it until the next change.
//!
//! Fields are weighted by repetition (a name term counts 3×, a parameter name 2×, a
//! description term once), the usual BM25F shortcut. Tokens are lowercase alphanumeric runs,
//! split at `_`, `-`, `.`, `/` and camelCase humps; a trailing plural `s` is dropped so
//! "files" finds `read_file`.

use std::collections::HashMap;

use serde_json::Value;

/// BM25 term-frequency saturation.
const K1: f64 = 1.2;
/// BM25 length normalisation.
const B: f64 = 0.75;
/// Weight of a term in the tool's name.
const NAME_WEIGHT: u32 = 3;
/// Weight of a parameter name.
const PARAM_WEIGHT: u32 = 2;

/// One searchable tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Doc {
    /// The callable name.
    pub name: String,
    /// The description.
    pub description: String,
    /// Input parameter names (top-level `inputSchema.properties` keys).
    pub params: Vec<String>,
}

impl Doc {
    /// A document from an MCP `Tool` object.
    pub fn from_listing(tool: &Value) -> Option<Self> {
        let name = tool.get("name")?.as_str()?.to_owned();
        let description = tool
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let params = tool
            .get("inputSchema")
            .and_then(|s| s.get("properties"))
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        Some(Self {
            name,
            description,
            params,
        })
    }
}

/// The index.
#[derive(Debug, Clone, Default)]
pub struct Index {
    names: Vec<String>,
    /// Weighted length of each document.
    lengths: Vec<f64>,
    avg_len: f64,
    /// term → (document, weighted frequency).
    postings: HashMap<String, Vec<(u32, u32)>>,
}

/// Splits text into normalised terms.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    let flush = |cur: &mut String, out: &mut Vec<String>| {
        if !cur.is_empty() {
            out.push(normalise(cur));
            cur.clear();
        }
    };
    for c in text.chars() {
        if c.is_alphanumeric() {
            // camelCase: a capital after a lowercase letter starts a new term.
            if c.is_uppercase() && prev_lower {
                flush(&mut cur, &mut out);
            }
            prev_lower = c.is_lowercase() || c.is_ascii_digit();
            cur.extend(c.to_lowercase());
        } else {
            prev_lower = false;
            flush(&mut cur, &mut out);
        }
    }
    flush(&mut cur, &mut out);
    out
}

fn normalise(t: &str) -> String {
    // A light stemmer: plural `s` (not `ss`), so "files" and "file" meet.
    if t.len() > 3 && t.ends_with('s') && !t.ends_with("ss") {
        t[..t.len() - 1].to_owned()
    } else {
        t.to_owned()
    }
}

impl Index {
    /// Builds the index over `docs`, in their order (ties rank in that order).
    pub fn build(docs: &[Doc]) -> Self {
        let mut postings: HashMap<String, Vec<(u32, u32)>> = HashMap::new();
        let mut lengths = Vec::with_capacity(docs.len());
        for (i, d) in docs.iter().enumerate() {
            let mut tf: HashMap<String, u32> = HashMap::new();
            let mut add = |text: &str, w: u32| {
                for t in tokenize(text) {
                    *tf.entry(t).or_default() += w;
                }
            };
            add(&d.name, NAME_WEIGHT);
            for p in &d.params {
                add(p, PARAM_WEIGHT);
            }
            add(&d.description, 1);
            lengths.push(f64::from(tf.values().sum::<u32>()));
            for (t, f) in tf {
                postings.entry(t).or_default().push((i as u32, f));
            }
        }
        let avg_len = if lengths.is_empty() {
            0.0
        } else {
            lengths.iter().sum::<f64>() / lengths.len() as f64
        };
        Self {
            names: docs.iter().map(|d| d.name.clone()).collect(),
            lengths,
            avg_len,
            postings,
        }
    }

    /// How many documents it holds.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The best `limit` matches of `query`, best first: `(name, score)`. Documents matching no
    /// query term are not returned.
    pub fn search(&self, query: &str, limit: usize) -> Vec<(&str, f64)> {
        let n = self.names.len() as f64;
        let mut terms = tokenize(query);
        terms.sort();
        terms.dedup();
        let mut scores: HashMap<u32, f64> = HashMap::new();
        for t in &terms {
            let Some(list) = self.postings.get(t) else {
                continue;
            };
            let df = list.len() as f64;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for &(doc, f) in list {
                let f = f64::from(f);
                let len = self.lengths[doc as usize];
                let norm = 1.0 - B + B * len / self.avg_len.max(f64::EPSILON);
                *scores.entry(doc).or_default() += idf * f * (K1 + 1.0) / (f + K1 * norm);
            }
        }
        let mut hits: Vec<(u32, f64)> = scores.into_iter().collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.truncate(limit);
        hits.into_iter()
            .map(|(d, s)| (self.names[d as usize].as_str(), s))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(name: &str, description: &str, params: &[&str]) -> Doc {
        Doc {
            name: name.into(),
            description: description.into(),
            params: params.iter().map(|p| (*p).into()).collect(),
        }
    }

    #[test]
    fn tokens_split_names_and_humps() {
        assert_eq!(
            tokenize("fs__readFile get-URL v2.files"),
            vec!["fs", "read", "file", "get", "url", "v2", "file"]
        );
    }

    #[test]
    fn ranks_name_over_description_and_finds_parameters() {
        let docs = vec![
            doc(
                "session",
                "Manage terminal sessions: list, create, input, output.",
                &["action", "session_id"],
            ),
            doc("fs__read_file", "Read a file from disk.", &["path"]),
            doc(
                "git__log",
                "Show the commit log; mentions a file only in passing.",
                &["repo"],
            ),
            doc(
                "weather__forecast",
                "Weather for a city.",
                &["city", "days"],
            ),
        ];
        let idx = Index::build(&docs);
        let hits = idx.search("read file", 10);
        assert_eq!(hits[0].0, "fs__read_file", "{hits:?}");
        assert!(
            hits.iter().any(|h| h.0 == "git__log"),
            "description match is found too"
        );
        assert_eq!(
            idx.search("city", 10)[0].0,
            "weather__forecast",
            "parameter names count"
        );
        assert_eq!(
            idx.search("terminals", 10)[0].0,
            "session",
            "plural stemming"
        );
        assert!(idx.search("zebra", 10).is_empty());
        assert_eq!(idx.search("file", 1).len(), 1, "limit applies");
    }

    #[test]
    fn docs_from_listings() {
        let d = Doc::from_listing(&json!({"name": "x__y", "description": "d",
            "inputSchema": {"type": "object", "properties": {"alpha": {}, "beta": {}}}}))
        .unwrap();
        assert_eq!(d.params, vec!["alpha", "beta"]);
    }
}
