//! The tools: each parses its input ([`crate::mcp::params`]), calls one operation of the
//! façade, and answers with its typed result ([`crate::mcp::reply`]) — the JSON the command
//! line prints with `--json` for the same operation. Inside a box, a tool the relay answers
//! is sent as the relay's request ([`crate::mcp::inbox`]); the others are refused.

use agentbox_boxes::records::registry;
use agentbox_boxes::relay::RelayRequest as R;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};

use crate::errors::{CliError, ExitCode};
use crate::mcp::ops::{NewBox, Race};
use crate::mcp::params::*;
use crate::mcp::reply::{self, Executed};
use crate::mcp::server::{usage, CheckedOut, Notes, Tools};

#[tool_router(vis = "pub(super)")]
impl Tools {
    /// The boxes of the server's current project (`all`: of every project) and the
    /// versioned directories, with state, HEAD, branches and where each runs.
    #[tool]
    async fn list_boxes(&self, Parameters(p): Parameters<ListParams>) -> CallToolResult {
        self.host("list_boxes", "boxes", move |h| {
            let here = if p.all {
                None
            } else {
                registry::current_project(&h.home, &h.cwd)?
            };
            Ok(h.boxes.list(here.as_deref())?)
        })
        .await
    }

    /// Create a box of a project directory, on its own git branch, with the project's
    /// uncommitted work carried over; from a checkpoint when one is named (or the project
    /// has a default). The box is left running.
    #[tool]
    async fn create_box(&self, Parameters(p): Parameters<CreateParams>) -> CallToolResult {
        self.host("create_box", "boxes", move |h| {
            h.create_box(NewBox {
                name: p.name,
                project: p.project,
                checkpoint: p.checkpoint,
                no_checkpoint: p.no_checkpoint,
                accept_stale: p.accept_stale,
                provider: p.provider,
            })
        })
        .await
    }

    /// Run a command in a box (started if stopped) and wait for it: its exit status, its
    /// output (stdout and stderr together; long output is cut in the middle, with a note
    /// saying how to get all of it), and the node its changes made.
    #[tool]
    async fn exec(&self, Parameters(p): Parameters<ExecParams>) -> CallToolResult {
        self.host("exec", "result", move |h| {
            if p.argv.is_empty() {
                return Err(usage(
                    "exec needs a command",
                    "give argv, e.g. [\"ls\", \"-la\"] or [\"sh\", \"-c\", \"make test\"]",
                ));
            }
            let name = h.box_name(p.target.as_deref())?;
            let max = p
                .max_output
                .unwrap_or(reply::DEFAULT_OUTPUT)
                .clamp(1, reply::MAX_OUTPUT);
            let ran = h.boxes.run_collected(
                &name,
                p.argv,
                p.workdir.as_deref(),
                p.capture.unwrap_or(true),
            )?;
            Ok(Executed::new(ran, max))
        })
        .await
    }

    /// Read a file of a box (inside the box: its own paths and links), from `offset`, at
    /// most `limit` bytes: text as UTF-8, anything else as base64; `more` says whether the
    /// file goes on.
    #[tool]
    async fn read_file(&self, Parameters(p): Parameters<ReadFileParams>) -> CallToolResult {
        self.host("read_file", "result", move |h| {
            let name = h.box_name(p.target.as_deref())?;
            let limit = p
                .limit
                .unwrap_or(agentbox_boxes::lifecycle::files::MAX_READ);
            Ok(h.boxes.read_file(&name, &p.path, p.offset, limit)?)
        })
        .await
    }

    /// Write a file of a box (inside the box), replacing it; the change is recorded as a
    /// node when the box captures.
    #[tool]
    async fn write_file(&self, Parameters(p): Parameters<WriteFileParams>) -> CallToolResult {
        self.host("write_file", "result", move |h| {
            let name = h.box_name(p.target.as_deref())?;
            let content = match p.encoding.as_deref().unwrap_or("utf-8") {
                "utf-8" | "utf8" | "text" => p.content.into_bytes(),
                "base64" => {
                    use base64::Engine;
                    base64::engine::general_purpose::STANDARD
                        .decode(p.content.trim())
                        .map_err(|e| usage(&format!("content is not base64: {e}"), "encode it as standard base64, or give it as text with encoding utf-8"))?
                }
                other => {
                    return Err(usage(
                        &format!("unknown encoding {other:?}"),
                        "encoding is utf-8 or base64",
                    ))
                }
            };
            Ok(h.boxes.write_file(&name, &p.path, &content, p.parents)?)
        })
        .await
    }

    /// List a directory of a box (inside the box): each entry's name, kind, size, mode and
    /// modification time.
    #[tool]
    async fn list_files(&self, Parameters(p): Parameters<ListFilesParams>) -> CallToolResult {
        self.host("list_files", "entries", move |h| {
            let name = h.box_name(p.target.as_deref())?;
            let path = p
                .path
                .unwrap_or_else(|| agentbox_boxes::records::record::WORKSPACE.to_owned());
            Ok(h.boxes.list_files(&name, &path)?)
        })
        .await
    }

    /// A box's history: every node as a tree (id, parent, message, command, time, HEAD and
    /// tags), or only HEAD's ancestors, or only the leaves.
    #[tool]
    async fn log(&self, Parameters(p): Parameters<LogParams>) -> CallToolResult {
        let request = R::Log {
            ancestors: p.ancestors,
            leaves: p.leaves,
        };
        if let Some(r) = self.relayed(p.target.as_deref(), "nodes", request).await {
            return r;
        }
        self.host("log", "nodes", move |h| {
            let env = h.env_name(p.target.as_deref())?;
            if p.ancestors {
                serde_json::to_value(h.boxes.ancestors(&env, None)?.nodes)
            } else if p.leaves {
                serde_json::to_value(h.boxes.leaves(&env)?.nodes)
            } else {
                serde_json::to_value(h.boxes.history(&env)?)
            }
            .map_err(|e| CliError::new(ExitCode::Failure, e.to_string(), None))
        })
        .await
    }

    /// A node of a box's history and what it changed from its parent.
    #[tool]
    async fn show(&self, Parameters(p): Parameters<ShowParams>) -> CallToolResult {
        let request = R::Show {
            reference: p.reference.clone(),
        };
        if let Some(r) = self.relayed(p.target.as_deref(), "changes", request).await {
            return r;
        }
        self.host("show", "changes", move |h| {
            let env = h.env_name(p.target.as_deref())?;
            Ok(h.boxes
                .show(&env, p.reference.as_deref().unwrap_or("HEAD"))?)
        })
        .await
    }

    /// What changed between two nodes of a box (default: from HEAD to the working tree):
    /// paths added, removed and modified; with `patch`, each file's unified diff.
    #[tool]
    async fn diff(&self, Parameters(p): Parameters<DiffParams>) -> CallToolResult {
        let request = R::Diff {
            from: p.from.clone(),
            to: p.to.clone(),
            patch: p.patch,
        };
        if let Some(r) = self.relayed(p.target.as_deref(), "changes", request).await {
            return r;
        }
        self.host("diff", "changes", move |h| {
            let env = h.env_name(p.target.as_deref())?;
            let from = p.from.as_deref().unwrap_or("HEAD");
            if p.patch {
                serde_json::to_value(h.boxes.diff_patch(&env, from, p.to.as_deref())?)
            } else {
                serde_json::to_value(h.boxes.diff(&env, from, p.to.as_deref())?)
            }
            .map_err(|e| CliError::new(ExitCode::Failure, e.to_string(), None))
        })
        .await
    }

    /// Move a box to a node of its history (its processes are killed unless
    /// `keep_processes`); the node now HEAD and how many processes were killed.
    #[tool]
    async fn checkout(&self, Parameters(p): Parameters<CheckoutParams>) -> CallToolResult {
        let request = R::Checkout {
            reference: p.reference.clone(),
            keep_processes: p.keep_processes,
        };
        if let Some(r) = self.relayed(p.target.as_deref(), "result", request).await {
            return r;
        }
        self.host("checkout", "result", move |h| {
            let env = h.env_name(p.target.as_deref())?;
            let done = h.boxes.checkout(&env, &p.reference, p.keep_processes)?;
            Ok(CheckedOut {
                node: done.node,
                killed: done.killed,
            })
        })
        .await
    }

    /// Move a box back to HEAD's parent (a checkout of HEAD~1).
    #[tool]
    async fn undo(&self, Parameters(p): Parameters<BoxParams>) -> CallToolResult {
        if let Some(r) = self.relayed(p.target.as_deref(), "result", R::Undo).await {
            return r;
        }
        self.host("undo", "result", move |h| {
            let name = h.box_name(p.target.as_deref())?;
            let done = h.boxes.checkout(&name, "HEAD~1", false)?;
            Ok(CheckedOut {
                node: done.node,
                killed: done.killed,
            })
        })
        .await
    }

    /// A box's tags (no `name`), or set, move (`name`, `reference`) or delete (`delete`)
    /// one.
    #[tool]
    async fn tag(&self, Parameters(p): Parameters<TagParams>) -> CallToolResult {
        let request = match (&p.name, p.delete) {
            (None, true) => {
                return reply::error(&usage("delete needs the tag's name", "give name"))
            }
            (Some(name), true) => R::Untag { name: name.clone() },
            (None, false) => R::Tags,
            (Some(name), false) => R::Tag {
                name: name.clone(),
                reference: p.reference.clone(),
            },
        };
        if let Some(r) = self.relayed(p.target.as_deref(), "tags", request).await {
            return r;
        }
        self.host("tag", "tags", move |h| {
            let env = h.env_name(p.target.as_deref())?;
            Ok(match (p.name, p.delete) {
                (Some(name), true) => {
                    let id = h.boxes.untag(&env, &name)?;
                    serde_json::json!({"deleted": name, "node": id})
                }
                (Some(name), false) => {
                    let id = h
                        .boxes
                        .tag(&env, &name, p.reference.as_deref().unwrap_or("HEAD"))?;
                    serde_json::json!({"tag": name, "node": id})
                }
                (None, _) => serde_json::to_value(h.boxes.tags(&env)?)
                    .map_err(|e| CliError::new(ExitCode::Failure, e.to_string(), None))?,
            })
        })
        .await
    }

    /// A new box from a node of a box's history (default: HEAD), on its own branch.
    #[tool]
    async fn fork(&self, Parameters(p): Parameters<ForkParams>) -> CallToolResult {
        self.host("fork", "result", move |h| {
            let source = h.box_name(p.target.as_deref())?;
            h.fork_box(source, p.name, p.at)
        })
        .await
    }

    /// Race candidate commands, each in its own fork of a box, judged by a test command;
    /// each candidate's exit, test exit, node, branch and verdict, and the winner.
    #[tool]
    async fn tournament(&self, Parameters(p): Parameters<TournamentParams>) -> CallToolResult {
        self.host("tournament", "result", move |h| {
            let source = h.box_name(p.target.as_deref())?;
            h.race(
                source,
                Race {
                    test: p.test,
                    candidates: p
                        .candidates
                        .into_iter()
                        .map(|c| (c.name, c.command))
                        .collect(),
                    at: p.at,
                    keep: p.keep,
                    keep_losers: p.keep_losers,
                    parallel: p.parallel,
                    timeout: p.timeout,
                    first: p.first,
                },
            )
        })
        .await
    }

    /// Capture a box as a checkpoint of its project: new boxes can start from it warm.
    #[tool]
    async fn checkpoint_create(
        &self,
        Parameters(p): Parameters<CheckpointCreateParams>,
    ) -> CallToolResult {
        let request = R::Checkpoint {
            name: p.name.clone(),
            set_default: p.set_default,
            merged: p.merged,
            replace: p.replace,
        };
        if let Some(r) = self.relayed(p.target.as_deref(), "result", request).await {
            return r;
        }
        self.host("checkpoint_create", "result", move |h| {
            let name = h.box_name(p.target.as_deref())?;
            h.checkpoint(name, p.name, (p.set_default, p.merged, p.replace))
        })
        .await
    }

    /// The checkpoints of a project (default: the server's current one), or of every
    /// project.
    #[tool]
    async fn checkpoint_list(
        &self,
        Parameters(p): Parameters<CheckpointListParams>,
    ) -> CallToolResult {
        self.host("checkpoint_list", "checkpoints", move |h| {
            h.checkpoints(p.project, p.all)
        })
        .await
    }

    /// A box's status: its record, state, branches (ahead/behind the host's, uncommitted
    /// paths), processes, limits, network and auto-capture's health.
    #[tool]
    async fn status(&self, Parameters(p): Parameters<BoxParams>) -> CallToolResult {
        let request = R::Status { usage: false };
        if let Some(r) = self.relayed(p.target.as_deref(), "result", request).await {
            return r;
        }
        self.host("status", "result", move |h| {
            let name = h.box_name(p.target.as_deref())?;
            Ok(serde_json::json!({ "box": h.boxes.status(&name)? }))
        })
        .await
    }

    /// Destroy a box: stop it and remove its environment and directory (its branches stay
    /// in the host repositories unless `delete_branch`).
    #[tool]
    async fn destroy(&self, Parameters(p): Parameters<DestroyParams>) -> CallToolResult {
        self.host("destroy", "result", move |h| {
            let rec = h.box_record(Some(&p.target))?;
            let notes = Notes::default();
            let deleted = h.boxes.destroy(&rec.name, p.delete_branch, &notes)?;
            Ok(serde_json::json!({
                "destroyed": rec.name,
                "id": rec.id,
                "deleted_branches": deleted,
                "notes": notes.take(),
            }))
        })
        .await
    }
}
