//! The MCP server's state and what every tool shares: where a call runs (on the host, off
//! the protocol's threads, with a façade of its own; inside a box, through the relay), how a
//! box is named, and the results several tools print.

use std::path::PathBuf;

use agentbox_boxes::records::record::BoxRecord;
use agentbox_boxes::records::registry;
use agentbox_boxes::relay::RelayRequest as R;
use agentbox_boxes::Boxes;
use agentbox_core::Home;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::CallToolResult;
use serde::Serialize;

use crate::errors::{CliError, CliResult, ExitCode};
use crate::mcp::inbox::InBox;
use crate::mcp::reply;

/// The MCP server's state: the agentbox home it serves (each call builds its own façade,
/// as each command does), or the box it runs in.
#[derive(Clone)]
pub struct Tools {
    home: Home,
    inbox: Option<InBox>,
    pub(super) tool_router: ToolRouter<Tools>,
}

/// What a call on the host works with: a façade for this call and where the server runs
/// (box numbers and the implicit box are relative to its project).
pub(crate) struct Host {
    pub(crate) home: Home,
    pub(crate) boxes: Boxes,
    pub(crate) cwd: PathBuf,
}

impl Host {
    /// The box `target` names (its name, id, prefix, display name or number), else the
    /// current project's only box.
    pub(crate) fn box_record(&self, target: Option<&str>) -> CliResult<BoxRecord> {
        Ok(match target {
            Some(r) => registry::resolve(&self.home, r, &self.cwd)?,
            None => registry::implicit(&self.home, &self.cwd)?,
        })
    }

    pub(crate) fn box_name(&self, target: Option<&str>) -> CliResult<String> {
        Ok(self.box_record(target)?.name.into_string())
    }

    /// A box, or a versioned directory's environment by its own name.
    pub(crate) fn env_name(&self, target: Option<&str>) -> CliResult<String> {
        match target {
            Some(r) if self.boxes.env(r).is_ok() => Ok(r.to_owned()),
            _ => self.box_name(target),
        }
    }
}

/// The notes an operation reports while it works, kept for its result.
#[derive(Default)]
pub(crate) struct Notes(std::sync::Mutex<Vec<String>>);

impl agentbox_boxes::progress::Progress for Notes {
    fn note(&self, line: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line.to_owned());
    }
    fn busy(
        &self,
        _what: &str,
        work: &mut dyn FnMut() -> agentbox_boxes::Result<()>,
    ) -> agentbox_boxes::Result<()> {
        work()
    }
}

impl Notes {
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A new box as `create --json` and `fork --json` print it.
#[derive(Serialize)]
pub(crate) struct Made {
    #[serde(flatten)]
    pub(crate) record: BoxRecord,
    pub(crate) head: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) forked_from: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) notes: Vec<String>,
}

/// A checkout as `checkout --json` prints it.
#[derive(Serialize)]
pub(crate) struct CheckedOut {
    #[serde(flatten)]
    pub(crate) node: agentbox_store::Node,
    pub(crate) killed: usize,
}

pub(crate) fn usage(message: &str, hint: &str) -> CliError {
    CliError::usage(message, hint)
}

impl Tools {
    /// A server for agentbox home `home`, or (`inbox`) for the box it runs in.
    pub fn new(home: Home, inbox: Option<InBox>) -> Tools {
        Tools {
            home,
            inbox,
            tool_router: Self::tool_router(),
        }
    }

    /// The tools offered: all of them on the host; inside a box, only those the relay
    /// answers (a call of another one is refused with the relay's error).
    pub fn offered(&self) -> Vec<rmcp::model::Tool> {
        let mut tools = self.tool_router.list_all();
        if self.inbox.is_some() {
            tools.retain(|t| crate::mcp::inbox::TOOLS.contains(&t.name.as_ref()));
        }
        tools
    }

    /// Run `work` on the host (off the protocol's threads: the façade blocks) and answer
    /// with its result, an array under `key`. Inside a box, tool `tool` is refused.
    pub(super) async fn host<T: Serialize>(
        &self,
        tool: &str,
        key: &'static str,
        work: impl FnOnce(&Host) -> CliResult<T> + Send + 'static,
    ) -> CallToolResult {
        if let Some(inbox) = &self.inbox {
            return reply::error(&inbox.refuse(tool));
        }
        let home = self.home.clone();
        let done = tokio::task::spawn_blocking(move || {
            let host = Host {
                boxes: crate::compose::boxes(&home),
                cwd: registry::current_dir()?,
                home,
            };
            work(&host).and_then(|v| {
                serde_json::to_value(&v).map_err(|e| {
                    CliError::new(
                        ExitCode::Failure,
                        format!("cannot encode the result: {e}"),
                        None,
                    )
                })
            })
        })
        .await;
        match done {
            Ok(Ok(v)) => reply::structured(key, v),
            Ok(Err(e)) => reply::error(&e),
            Err(e) => reply::error(&CliError::new(
                ExitCode::Failure,
                format!("the operation failed: {e}"),
                None,
            )),
        }
    }

    /// Inside a box: send `request` through the relay for box `target` (which must be this
    /// one). `None` on the host.
    pub(super) async fn relayed(
        &self,
        target: Option<&str>,
        key: &'static str,
        request: R,
    ) -> Option<CallToolResult> {
        let inbox = self.inbox.clone()?;
        if let Err(e) = inbox.check_box(target) {
            return Some(reply::error(&e));
        }
        Some(
            tokio::task::spawn_blocking(move || inbox.call(key, request))
                .await
                .unwrap_or_else(|e| {
                    reply::error(&CliError::new(
                        ExitCode::Failure,
                        format!("the request failed: {e}"),
                        None,
                    ))
                }),
        )
    }
}
