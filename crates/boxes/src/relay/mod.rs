//! The in-box `agentbox`: what a box may ask of the host, as typed requests.
//!
//! Inside a box, `agentbox` is a thin client: it turns its command line into one
//! [`RelayRequest`] and sends it over the box's own socket; the supervisor answers it on the
//! host, through a [`RelayHandler`] the front end gives it (the CLI prints the answer on the
//! caller's stdout and stderr, which travel with the request). The policy is the type: a
//! request names no box (it is always the caller's own), no agentbox home, no remote, no
//! branch to fetch, no path — so nothing a box sends can choose what the host acts on or
//! reach a host command line as an option. Anything the enum cannot say is refused before it
//! is sent, and a message that does not decode as one of these (an unknown operation or
//! field) is refused by the supervisor. Every text field is bounded ([`RelayCall::check`]).
//! Every node a request names (`show`, `diff`, `checkout`, `tag`) resolves in the box's own
//! history only ([`crate::relay::scope`]): another box's, project's or versioned directory's node
//! is "no such node", as one that never existed. A checkpoint made from inside a box never
//! replaces one or becomes its project's default ([`crate::checkpoints::checkpoint`]).
//!
//! It owns what crosses between a box and the host: the relay's typed requests (here), the
//! scope their references resolve in ([`scope`]), and errors as they cross a process
//! boundary ([`wire`]). It adds no operation of its own: a request is answered by the
//! façade's operations, and nothing below calls into it.

pub mod scope;
pub mod wire;

use serde::{Deserialize, Serialize};

/// The most bytes of any one text field of a request (a commit message, a ref).
pub const MAX_TEXT: usize = 64 << 10;
/// The most repositories a push or pull may name.
pub const MAX_REPOS: usize = 64;

/// One request of the in-box `agentbox`, always about the box it runs in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum RelayRequest {
    /// The box's history: the tree, or only HEAD's ancestors, or only the branch tips.
    Log {
        ancestors: bool,
        leaves: bool,
    },
    /// A node and what it changed (`None`: HEAD).
    Show {
        reference: Option<String>,
    },
    /// What changed from `from` (`None`: HEAD) to `to` (`None`: the working tree); with
    /// `patch`, the files' content differences too.
    Diff {
        from: Option<String>,
        to: Option<String>,
        patch: bool,
    },
    Status {
        /// Count the nodes and measure the disk too (`status --usage`).
        #[serde(default)]
        usage: bool,
    },
    Commit {
        message: String,
        command: Option<String>,
    },
    /// Check out `reference`; with `keep_processes`, under the running processes.
    Checkout {
        reference: String,
        keep_processes: bool,
    },
    /// Back to HEAD's parent.
    Undo,
    /// The box's tags.
    Tags,
    /// Tag `reference` (`None`: HEAD) as `name`.
    Tag {
        name: String,
        reference: Option<String>,
    },
    Untag {
        name: String,
    },
    /// The box's processes.
    Ps,
    /// Push the box's branches (of the repositories named; all when empty) to the remotes
    /// the host configured.
    Push {
        force: bool,
        repos: Vec<String>,
    },
    /// Merge the upstreams the host configured into the box's repositories.
    Pull {
        repos: Vec<String>,
    },
    /// The branches of the remote the host configured for one of the box's repositories
    /// (`.` or its sub-directory), fetched by the host (the in-box git remote helper's
    /// `list`).
    RemoteRefs {
        repo: String,
    },
    /// Capture the box as a checkpoint of its project (the host captures; the box names no
    /// other box).
    Checkpoint {
        name: Option<String>,
        set_default: bool,
        merged: bool,
        replace: bool,
    },
}

/// A request as sent: with the caller's output format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayCall {
    /// Print JSON (`--json`).
    pub json: bool,
    pub request: RelayRequest,
}

impl RelayCall {
    /// Refuse a request whose fields are out of bounds; the reason.
    pub fn check(&self) -> Result<(), String> {
        use RelayRequest as R;
        let texts: Vec<&str> = match &self.request {
            R::Show { reference } => reference.iter().map(String::as_str).collect(),
            R::Diff { from, to, .. } => from.iter().chain(to).map(String::as_str).collect(),
            R::Commit { message, command } => std::iter::once(message.as_str())
                .chain(command.as_deref())
                .collect(),
            R::Checkout { reference, .. } => vec![reference],
            R::Tag { name, reference } => std::iter::once(name.as_str())
                .chain(reference.as_deref())
                .collect(),
            R::Untag { name } => vec![name],
            R::Push { repos, .. } | R::Pull { repos } => {
                if repos.len() > MAX_REPOS {
                    return Err(format!("at most {MAX_REPOS} repositories may be named"));
                }
                repos.iter().map(String::as_str).collect()
            }
            R::Checkpoint { name, .. } => name.iter().map(String::as_str).collect(),
            R::RemoteRefs { repo } => vec![repo],
            R::Log { .. } | R::Status { .. } | R::Undo | R::Tags | R::Ps => Vec::new(),
        };
        match texts.iter().find(|t| t.len() > MAX_TEXT) {
            Some(_) => Err(format!("a field of the request is over {MAX_TEXT} bytes")),
            None => Ok(()),
        }
    }
}

/// Answers the in-box `agentbox`'s requests on the host.
pub trait RelayHandler: Send + Sync {
    /// Answer `call` for box `name`, writing what the command prints to `stdout` and
    /// `stderr` (the caller's own); the command's exit status.
    fn answer(
        &self,
        name: &str,
        call: RelayCall,
        stdout: std::fs::File,
        stderr: std::fs::File,
    ) -> i32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_operations_and_fields_do_not_decode() {
        let ok = r#"{"json":false,"request":{"op":"push","force":false,"repos":[]}}"#;
        assert!(serde_json::from_str::<RelayCall>(ok).is_ok());
        for bad in [
            r#"{"json":false,"request":{"op":"push","force":false,"repos":[],"remote":"x"}}"#,
            r#"{"json":false,"request":{"op":"destroy"}}"#,
            r#"{"json":false,"request":{"op":"log","ancestors":false,"leaves":false},"home":"/x"}"#,
        ] {
            assert!(serde_json::from_str::<RelayCall>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fields_are_bounded() {
        let big = RelayCall {
            json: false,
            request: RelayRequest::Commit {
                message: "x".repeat(MAX_TEXT + 1),
                command: None,
            },
        };
        assert!(big.check().is_err());
        let many = RelayCall {
            json: false,
            request: RelayRequest::Pull {
                repos: vec![".".into(); MAX_REPOS + 1],
            },
        };
        assert!(many.check().is_err());
    }
}
