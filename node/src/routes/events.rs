//! `GET /events`: the event bus as Server-Sent Events.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tuic_proto::events::Event;

use crate::state::Node;

#[derive(Debug, Deserialize)]
pub(super) struct EventsQuery {
    /// Comma-separated event names to keep; absent means all.
    types: Option<String>,
}

pub(super) async fn sse(
    State(node): State<Arc<Node>>,
    Query(q): Query<EventsQuery>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let wanted: Option<Vec<String>> = q.types.map(|t| {
        t.split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    });
    // A stream that hears suspend requests is a UI that can answer them (spec: suspend errors
    // "when no UI is attached (headless with no open event stream)").
    let ui = wanted
        .as_ref()
        .is_none_or(|w| w.iter().any(|x| x == "session-suspend-requested"))
        .then(|| node.bus.ui_attach());
    let keep = move |name: &str| {
        name == "lagged" || wanted.as_ref().is_none_or(|w| w.iter().any(|x| x == name))
    };
    let stream = BroadcastStream::new(node.bus.subscribe())
        .filter_map(move |item| {
            let out = match item {
                Ok(env) => keep(env.event.name()).then(|| {
                    SseEvent::default()
                        .id(env.id.to_string())
                        .event(env.event.name())
                        .data(env.event.payload().to_string())
                }),
                Err(BroadcastStreamRecvError::Lagged(missed)) => {
                    let e = Event::Lagged { missed };
                    Some(
                        SseEvent::default()
                            .event(e.name())
                            .data(e.payload().to_string()),
                    )
                }
            };
            // The guard lives as long as the stream: dropped when the client goes away.
            let _ui = &ui;
            std::future::ready(out.map(Ok))
        })
        .take_until(node.shutdown.clone().cancelled_owned());
    let keepalive = Duration::from_millis(node.config().tuning.sse_keepalive_ms.max(10));
    Sse::new(stream).keep_alive(KeepAlive::new().interval(keepalive))
}
