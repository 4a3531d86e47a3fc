//! The hub's upstream tools as a registry [`ToolSource`]: the service
//! ([`crate::upstream::hubtools::HubTools`]) lists them and carries a call over the live hub
//! link; this adapter hands it the link task's channel and the call deadline in force.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::registry::{CallCtx, ToolError, ToolSource};
use crate::state::Node;
use crate::upstream::hubtools::HubTools;

impl ToolSource for HubTools {
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
        let timeout_ms = node.config().tuning.hub_tool_call_timeout_ms;
        let link = node.peer.link_cmd();
        Box::pin(self.call_over(link, timeout_ms, ctx, name, args))
    }
}
