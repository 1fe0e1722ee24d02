//! `agentbox mcp` inside a box: a relay client like the in-box command line (see
//! `crate::relay`). Each tool the relay allows becomes the relay's own typed request for this
//! box, answered on the host under the relay's policy; every other tool is refused with the
//! relay's error. The server adds no power of its own: what it can do is exactly what
//! `agentbox` run in the box can.

use std::io::{Read, Seek};
use std::os::fd::AsFd;

use agentbox_boxes::relay::{RelayCall, RelayRequest};
use rmcp::model::CallToolResult;

use crate::errors::{CliError, CliResult, ExitCode};
use crate::mcp::reply;

/// The tools the relay answers (the others are not offered inside a box).
pub const TOOLS: &[&str] = &[
    "log",
    "show",
    "diff",
    "status",
    "checkout",
    "undo",
    "tag",
    "checkpoint_create",
];

/// The box this server runs in.
#[derive(Debug, Clone)]
pub struct InBox {
    /// Its name (`AGENTBOX_BOX`).
    pub own: String,
}

impl InBox {
    /// This process's box, when it runs in one.
    pub fn detect() -> Option<InBox> {
        agentbox_provider_local::client::Client::inside_box()?;
        Some(InBox {
            own: std::env::var("AGENTBOX_BOX").ok()?,
        })
    }

    /// Refuse `target` unless it names this box.
    pub fn check_box(&self, target: Option<&str>) -> CliResult {
        crate::relay::other_box(&self.own, target)
    }

    /// The refusal of tool `tool`, which the relay does not answer.
    pub fn refuse(&self, tool: &str) -> CliError {
        crate::relay::not_here(format!("the {tool} tool is not available inside a box"))
    }

    /// Send `request` for this box, as `agentbox --json` in the box would, and answer with
    /// what the host printed (an array under `key`), or its error.
    pub fn call(&self, key: &str, request: RelayRequest) -> CallToolResult {
        match self.relay(request) {
            Ok((0, out)) => match serde_json::from_slice(&out) {
                Ok(v) => reply::structured(key, v),
                Err(e) => reply::error(&failure(format!("the host's answer is no JSON: {e}"))),
            },
            Ok((status, out)) => {
                let v: serde_json::Value = serde_json::from_slice(&out).unwrap_or_default();
                reply::error(&CliError {
                    code: v["code"].as_i64().map_or(status, |c| c as i32),
                    message: v["error"]
                        .as_str()
                        .unwrap_or("the host refused the request")
                        .to_owned(),
                    hint: v["hint"].as_str().map(str::to_owned),
                })
            }
            Err(e) => reply::error(&e),
        }
    }

    /// The relay's exit status and what it printed on stdout.
    fn relay(&self, request: RelayRequest) -> CliResult<(i32, Vec<u8>)> {
        let call = RelayCall {
            json: true,
            request,
        };
        call.check()
            .map_err(|why| CliError::new(ExitCode::Usage, why, None))?;
        let client = agentbox_provider_local::client::Client::inside_box()
            .ok_or_else(|| failure("the box's agentbox socket does not answer".into()))?;
        // The host writes its answer into files of this process (never a pipe it could
        // fill while this side waits for the status).
        let mut out = tempfile::tempfile()?;
        let err = tempfile::tempfile()?;
        let null = fs_err::File::open("/dev/null")?;
        let status = client.relay_with(call, [null.as_fd(), out.as_fd(), err.as_fd()])?;
        let mut said = Vec::new();
        out.rewind()?;
        out.read_to_end(&mut said)?;
        Ok((status, said))
    }
}

fn failure(message: String) -> CliError {
    CliError::new(ExitCode::Failure, message, None)
}
