//! Server-sent events: the boxes' new nodes, HEAD moves, state changes, and boxes made and
//! destroyed, as the façade reports them ([`agentbox_boxes::lifecycle::watch`]), looked at
//! every [`POLL`]. Each event's name is its kind (`node`, `head`, `state`, `created`,
//! `destroyed`) and its data the JSON of [`WatchEvent`]; a failed look is an `error` event
//! and the stream goes on.
//!
//! What exists when the stream starts is its baseline: only what changes after the answer's
//! headers are sent is an event.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use agentbox_boxes::lifecycle::watch::{Seen, WatchEvent};
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;

use super::answers::*;
use super::params::EventsQuery;
use super::problem::{ApiError, Query};
use super::App;
use crate::mcp::server::Host;

/// How often the façade is asked again.
pub const POLL: Duration = Duration::from_millis(300);

/// The stream's state between two events.
struct Watching {
    app: App,
    only: Option<String>,
    seen: Seen,
    queue: VecDeque<Event>,
}

/// Look once: the environments now, and the events since `seen`.
fn look(app: &App, only: Option<&str>, seen: &Seen) -> Result<(Seen, Vec<WatchEvent>), String> {
    let boxes = crate::compose::boxes(&app.home);
    let now = boxes.seen(only, seen).map_err(|e| e.to_string())?;
    let events = boxes.changes(seen, &now).map_err(|e| e.to_string())?;
    Ok((now, events))
}

fn event(e: &WatchEvent) -> Event {
    let name = match e {
        WatchEvent::Created { .. } => "created",
        WatchEvent::Destroyed { .. } => "destroyed",
        WatchEvent::State { .. } => "state",
        WatchEvent::Node { .. } => "node",
        WatchEvent::Head { .. } => "head",
    };
    Event::default()
        .event(name)
        .json_data(e)
        .unwrap_or_else(|_| {
            Event::default()
                .event("error")
                .data("cannot encode an event")
        })
}

/// The events of every environment, or of one box (`box`), as they happen.
#[utoipa::path(get, path = "/api/events", tag = "events", params(EventsQuery),
    responses((status = 200, description = "a stream of server-sent events", content_type = "text/event-stream", body = String),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn events(
    State(app): State<App>,
    Query(q): Query<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    // The box must exist (404 otherwise), and what is there now is the baseline.
    let home = app.home.clone();
    let target = q.target;
    let (only, seen) = tokio::task::spawn_blocking(move || {
        let host = Host {
            boxes: crate::compose::boxes(&home),
            cwd: agentbox_boxes::records::registry::current_dir()?,
            home,
        };
        let only = match &target {
            Some(t) => Some(host.env_name(Some(t))?),
            None => None,
        };
        let seen = host.boxes.seen(only.as_deref(), &Seen::default())?;
        Ok::<_, crate::errors::CliError>((only, seen))
    })
    .await
    .map_err(|e| ApiError::failure(format!("cannot watch: {e}")))??;
    let start = Watching {
        app,
        only,
        seen,
        queue: VecDeque::new(),
    };
    let stream = futures_util::stream::unfold(start, |mut w| async move {
        loop {
            if let Some(e) = w.queue.pop_front() {
                return Some((Ok(e), w));
            }
            tokio::time::sleep(POLL).await;
            let (app, only, seen) = (w.app.clone(), w.only.clone(), w.seen.clone());
            let looked =
                tokio::task::spawn_blocking(move || look(&app, only.as_deref(), &seen)).await;
            match looked {
                Ok(Ok((now, events))) => {
                    w.seen = now;
                    w.queue.extend(events.iter().map(event));
                }
                Ok(Err(why)) => w.queue.push_back(Event::default().event("error").data(why)),
                Err(e) => w
                    .queue
                    .push_back(Event::default().event("error").data(e.to_string())),
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
