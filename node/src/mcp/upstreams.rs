//! The upstream MCP servers as a registry [`ToolSource`]: the upstream service
//! ([`crate::upstream::Upstreams`]) lists and dispatches; this adapter restores a caller's
//! progress token on the caller's stream, and announces every tool-set change to every
//! `GET /mcp` stream.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::registry::{CallCtx, ToolError, ToolSource};
use crate::state::Node;
use crate::upstream::Upstreams;
use crate::upstream::client::ProgressSink;

impl ToolSource for Upstreams {
    fn generation(&self) -> u64 {
        self.tool_generation()
    }

    fn listings(&self) -> Vec<Value> {
        self.tool_listings()
    }

    fn owns(&self, name: &str) -> bool {
        self.owns_tool(name)
    }

    fn schema(&self, name: &str) -> Result<Value, ToolError> {
        self.tool_schema(name)
    }

    fn call<'a>(
        &'a self,
        node: &'a Arc<Node>,
        ctx: &'a CallCtx,
        name: &'a str,
        args: Map<String, Value>,
    ) -> futures::future::BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            // The caller's token is restored in the params: the request's own stream when it
            // has one, else the session's GET /mcp stream.
            let progress = ctx.progress_token.as_ref().map(|token| {
                let (node, sid) = (node.clone(), ctx.mcp_session.clone());
                let sink: ProgressSink = Arc::new(move |params: Value| {
                    let token = params.get("progressToken").cloned().unwrap_or(Value::Null);
                    super::features::streams::progress_out(
                        &node,
                        sid.as_deref(),
                        &token,
                        &json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params}),
                    );
                });
                (token.clone(), sink)
            });
            self.call_with(name, args, progress, None).await
        })
    }
}

/// Every upstream tool-set change reaches every `GET /mcp` stream. Called once when the node
/// starts serving, beside [`crate::upstream::spawn`].
pub(crate) fn announce_changes(node: &Arc<Node>) {
    let n = node.clone();
    let mut rx = node.upstreams.subscribe();
    node.tasks.spawn(async move {
        loop {
            tokio::select! {
                _ = n.shutdown.cancelled() => break,
                r = rx.changed() => if r.is_err() { break },
            }
            n.mcp.notify_list_changed();
        }
    });
}
