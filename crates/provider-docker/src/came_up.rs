//! A new box's container started and seen to stay up: an image whose `sh` cannot run the
//! keep-alive command ([`crate::spec::KEEP_ALIVE`]), a memory limit it cannot start in,
//! an image for another machine — the container stops at once, and the create fails
//! saying how it ended instead of reporting a dead box as made.

use std::time::Duration;

use agentbox_boxes::Result;
use agentbox_docker::settle::Stopped;
use agentbox_docker::Engine;

use crate::errors::{failed, remote};
use crate::names;

/// How long a started container must stay up. What fails at once (the keep-alive
/// command's `sh` missing or exiting) does so within milliseconds; the engine says so as
/// soon as it happens, so only a container that stays up waits this long.
const SETTLE: Duration = Duration::from_millis(250);

/// Start box `name`'s container and check that it stays up.
pub fn start(engine: &Engine, name: &str) -> Result<()> {
    let container = names::container(name);
    engine.start_container(&container).map_err(remote)?;
    match engine.stops_within(&container, SETTLE).map_err(remote)? {
        None => Ok(()),
        Some(stopped) => Err(failed(format!(
            "box {name:?}: its container {container} stopped at once ({}); the box's image must run `sh` (the container only waits, with `sh -c` and `sleep`, for the box's commands)",
            why(&stopped)
        ))),
    }
}

/// How `s` ended, for a person (its output is the container's text, escaped).
fn why(s: &Stopped) -> String {
    let mut parts = Vec::new();
    match s.status {
        Some(n) => parts.push(format!("status {n}")),
        None => parts.push("status unknown".to_owned()),
    }
    if s.oom_killed {
        parts.push("killed for its memory limit".to_owned());
    }
    if let Some(e) = &s.error {
        parts.push(format!("engine: {}", e.escape_debug()));
    }
    let output = s.output.trim();
    if !output.is_empty() {
        parts.push(format!("output: {}", output.escape_debug()));
    }
    parts.join("; ")
}
