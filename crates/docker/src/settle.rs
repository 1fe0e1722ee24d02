//! Whether a container just started stays up: the engine is asked to say when it stops,
//! for a moment, and a container that stopped is told with why (its status, the memory
//! limit, the runtime's error, the last of its output).

use std::time::Duration;

use bollard::query_parameters::{LogsOptions, WaitContainerOptions};
use futures_util::StreamExt;

use crate::engine::Engine;
use crate::Result;

/// The most of a stopped container's output kept for its error.
const OUTPUT_BYTES: usize = 4096;

/// How a container that should have stayed up ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    /// Its main process's status (`None`: the engine did not say).
    pub status: Option<i64>,
    /// The kernel killed it for the memory limit.
    pub oom_killed: bool,
    /// The engine's or the runtime's error, if it gave one.
    pub error: Option<String>,
    /// The end of its output (stdout and stderr together, at most a few KiB: the
    /// container's text, to be escaped where it is shown).
    pub output: String,
}

impl Engine {
    /// Container `name` (started) if it stops within `within`: how it ended; `None` when
    /// it is still up then.
    pub fn stops_within(&self, name: &str, within: Duration) -> Result<Option<Stopped>> {
        let options = WaitContainerOptions {
            condition: "not-running".into(),
        };
        let waited = self.block_on(async {
            let mut stream = self.docker.wait_container(name, Some(options));
            tokio::time::timeout(within, stream.next()).await
        });
        if waited.is_err() {
            // Still running at the end of the wait (a wait that failed says nothing).
            return Ok(None);
        }
        let Some(info) = self
            .block_on(self.docker.inspect_container(name, None))
            .map(Some)
            .or_else(|e| {
                if crate::engine::is_not_found(&e) {
                    Ok(None)
                } else {
                    Err(self.fail(&format!("inspect container {name}"), e))
                }
            })?
        else {
            return Ok(Some(Stopped {
                status: None,
                oom_killed: false,
                error: Some("the container is gone".into()),
                output: String::new(),
            }));
        };
        let state = info.state.unwrap_or_default();
        if state.running == Some(true) {
            return Ok(None);
        }
        Ok(Some(Stopped {
            status: state.exit_code,
            oom_killed: state.oom_killed.unwrap_or(false),
            error: state.error.filter(|e| !e.is_empty()),
            output: self.output_tail(name),
        }))
    }

    /// The end of container `name`'s output, at most [`OUTPUT_BYTES`]; empty when the
    /// engine keeps none (a log driver without reading).
    fn output_tail(&self, name: &str) -> String {
        let options = LogsOptions {
            stdout: true,
            stderr: true,
            tail: "20".into(),
            ..Default::default()
        };
        let bytes = self.block_on(async {
            let mut out: Vec<u8> = Vec::new();
            let mut stream = self.docker.logs(name, Some(options));
            while let Some(Ok(piece)) = stream.next().await {
                out.extend_from_slice(&piece.into_bytes());
                if out.len() > OUTPUT_BYTES {
                    let cut = out.len() - OUTPUT_BYTES;
                    out.drain(..cut);
                }
            }
            out
        });
        String::from_utf8_lossy(&bytes).into_owned()
    }
}
