//! Watching the boxes of a home: what a front end that streams events (the HTTP API's
//! server-sent events) asks the façade, instead of reading records or the store's files
//! behind its back. A [`Seen`] is what the façade reports of the environments at one moment
//! (state, HEAD, nodes); [`Seen::changes`] turns two of them into the events between them.
//!
//! Polling, not notification: the store and the providers are written by other processes
//! (each command, each box's supervisor), so a watcher looks again; reading is cheap because
//! an environment's nodes are read only when its sequence number moved.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::facade::Boxes;
use crate::Result;

/// One environment as last seen.
#[derive(Debug, Clone, PartialEq)]
struct SeenEnv {
    state: &'static str,
    head: String,
    next_seq: u64,
    nodes: BTreeSet<String>,
}

/// The environments of a home at one moment (only `only`'s when it was given).
#[derive(Debug, Clone, Default)]
pub struct Seen {
    envs: BTreeMap<String, SeenEnv>,
}

/// Something that changed between two [`Seen`]s. Node messages and commands are
/// box-controlled text: a front end escapes them where it prints them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WatchEvent {
    /// An environment appeared.
    Created { r#box: String, state: String },
    /// An environment is gone.
    Destroyed { r#box: String },
    /// A box started or stopped (a directory was mounted or unmounted).
    State {
        r#box: String,
        from: String,
        to: String,
    },
    /// A new node in an environment's history.
    Node {
        r#box: String,
        id: String,
        parent: Option<String>,
        message: String,
        command: Option<String>,
    },
    /// HEAD moved (a checkout, an undo, or a new node).
    Head { r#box: String, node: String },
}

impl Boxes {
    /// The environments of the home as they are now (only `only` when given). `previous`
    /// saves work: an environment whose sequence number did not move keeps its nodes.
    pub fn seen(&self, only: Option<&str>, previous: &Seen) -> Result<Seen> {
        let mut envs = BTreeMap::new();
        if self.home.store_dir().join("store.json").exists() {
            for listed in self.list(None)? {
                let name = listed.env.name.clone();
                if only.is_some_and(|o| o != name) {
                    continue;
                }
                let next_seq = listed.env.next_seq;
                let nodes = match previous.envs.get(&name) {
                    Some(p) if p.next_seq == next_seq => p.nodes.clone(),
                    _ => self
                        .history(&name)?
                        .nodes
                        .into_iter()
                        .map(|n| n.id.into_string())
                        .collect(),
                };
                envs.insert(
                    name,
                    SeenEnv {
                        state: listed.state.as_str(),
                        head: listed.env.head.into_string(),
                        next_seq,
                        nodes,
                    },
                );
            }
        }
        Ok(Seen { envs })
    }

    /// The events from `before` to `after`, in order: environments made, their new nodes
    /// (oldest first), HEAD moves and state changes, then environments gone.
    pub fn changes(&self, before: &Seen, after: &Seen) -> Result<Vec<WatchEvent>> {
        let mut out = Vec::new();
        for (name, now) in &after.envs {
            let was = before.envs.get(name);
            if was.is_none() {
                out.push(WatchEvent::Created {
                    r#box: name.clone(),
                    state: now.state.to_owned(),
                });
            }
            let empty = BTreeSet::new();
            let old_nodes = was.map_or(&empty, |w| &w.nodes);
            if now.nodes.len() != old_nodes.len() || now.nodes != *old_nodes {
                // The history, oldest first, for the new nodes' order and what they say.
                for n in self.history(name)?.nodes {
                    if now.nodes.contains(n.id.as_str()) && !old_nodes.contains(n.id.as_str()) {
                        out.push(WatchEvent::Node {
                            r#box: name.clone(),
                            id: n.id.into_string(),
                            parent: n.parent.map(|p| p.into_string()),
                            message: n.message,
                            command: n.command,
                        });
                    }
                }
            }
            if was.is_some_and(|w| w.head != now.head) {
                out.push(WatchEvent::Head {
                    r#box: name.clone(),
                    node: now.head.clone(),
                });
            }
            if let Some(w) = was.filter(|w| w.state != now.state) {
                out.push(WatchEvent::State {
                    r#box: name.clone(),
                    from: w.state.to_owned(),
                    to: now.state.to_owned(),
                });
            }
        }
        for name in before.envs.keys() {
            if !after.envs.contains_key(name) {
                out.push(WatchEvent::Destroyed {
                    r#box: name.clone(),
                });
            }
        }
        Ok(out)
    }
}
