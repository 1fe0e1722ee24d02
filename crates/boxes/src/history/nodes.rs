//! The façade's history operations on an environment (a box, or a versioned directory):
//! reading its nodes (`log`, `show`, `diff`), naming them (tags) and dropping them (`delete`,
//! `retain`, `gc`). Writes that a running box must serialise with its auto-capture
//! (`commit`, `checkout`) are in [`crate::lifecycle::ops`]; these go to the store, whose own locks
//! keep them safe next to a running box.

use std::collections::BTreeMap;

use agentbox_store::fsops::diff::Change;
use agentbox_store::gc::GcReport;
use agentbox_store::history::History;
use agentbox_store::retention::RetainReport;
use agentbox_store::{EnvState, Node};
use serde::Serialize;

use crate::facade::Boxes;
use crate::Result;

pub use crate::types::Patched;

/// Nodes to print, with what marks them: the environment's HEAD and its tags by node.
#[derive(Debug, Serialize)]
pub struct Nodes {
    pub nodes: Vec<Node>,
    #[serde(skip)]
    pub head: String,
    #[serde(skip)]
    pub tags: BTreeMap<String, String>,
}

/// One node and what it changed from its parent.
#[derive(Debug, Serialize)]
pub struct Shown {
    pub node: Node,
    pub changes: Vec<Change>,
    #[serde(skip)]
    pub head: String,
    #[serde(skip)]
    pub tags: BTreeMap<String, String>,
}

impl Boxes {
    /// Environment `name` as the store has it.
    pub fn env(&self, name: &str) -> Result<EnvState> {
        Ok(self.store()?.env(name)?)
    }

    /// Every environment of the home (boxes and versioned directories).
    pub fn envs(&self) -> Result<Vec<EnvState>> {
        Ok(self.store()?.envs()?)
    }

    /// The versioned directory containing `path`, if any.
    pub fn env_for_path(&self, path: &std::path::Path) -> Result<Option<EnvState>> {
        Ok(self.store()?.env_for_path(path)?)
    }

    /// HEAD and its ancestors, HEAD first; at most `limit` of them.
    pub fn ancestors(&self, env: &str, limit: Option<usize>) -> Result<Nodes> {
        let store = self.store()?;
        let state = store.env(env)?;
        Ok(Nodes {
            nodes: store.log_limit(env, limit)?,
            head: state.head.into_string(),
            tags: state.tags,
        })
    }

    /// Every node of the environment's history, oldest first.
    pub fn history(&self, env: &str) -> Result<History> {
        Ok(self.store()?.history(env)?)
    }

    /// The nodes nothing descends from (each line of work's newest node).
    pub fn leaves(&self, env: &str) -> Result<Nodes> {
        let h = self.history(env)?;
        Ok(Nodes {
            nodes: h.leaves().into_iter().cloned().collect(),
            head: h.head.into_string(),
            tags: h.tags,
        })
    }

    /// Node `reference` and its changes.
    pub fn show(&self, env: &str, reference: &str) -> Result<Shown> {
        let store = self.store()?;
        let (node, changes) = if self.held(env)? {
            // Its provider holds the trees: it tells the changes.
            let node = store.node(&store.resolve(env, reference)?)?;
            let changes = match &node.parent {
                Some(p) => {
                    let parent = store.node(p)?;
                    self.held_changes(env, &parent, Some(&node), false)?
                }
                None => Vec::new(),
            };
            (node, changes.into_iter().map(|p| p.change).collect())
        } else {
            store.show(env, reference)?
        };
        let state = store.env(env)?;
        Ok(Shown {
            node,
            changes,
            head: state.head.into_string(),
            tags: state.tags,
        })
    }

    /// What changed from `from` to `to` (`None`: the working tree).
    pub fn diff(&self, env: &str, from: &str, to: Option<&str>) -> Result<Vec<Change>> {
        if self.held(env)? {
            return Ok(self
                .held_diff(env, from, to, false)?
                .into_iter()
                .map(|p| p.change)
                .collect());
        }
        Ok(self.store()?.diff(env, from, to)?)
    }

    /// [`Boxes::diff`] with each changed file's content difference.
    pub fn diff_patch(&self, env: &str, from: &str, to: Option<&str>) -> Result<Vec<Patched>> {
        if self.held(env)? {
            return self.held_diff(env, from, to, true);
        }
        Ok(self
            .store()?
            .diff_patch(env, from, to)?
            .into_iter()
            .map(|(change, patch)| Patched { change, patch })
            .collect())
    }

    /// The nodes `from` and `to` resolve to in box `env`, their changes told by its provider.
    fn held_diff(
        &self,
        env: &str,
        from: &str,
        to: Option<&str>,
        patch: bool,
    ) -> Result<Vec<Patched>> {
        let store = self.store()?;
        let from = store.node(&store.resolve(env, from)?)?;
        let to = to
            .map(|r| store.resolve(env, r).and_then(|id| store.node(&id)))
            .transpose()?;
        self.held_changes(env, &from, to.as_ref(), patch)
    }

    fn held_changes(
        &self,
        env: &str,
        from: &Node,
        to: Option<&Node>,
        patch: bool,
    ) -> Result<Vec<Patched>> {
        self.provider_of(env)?.changes(env, from, to, patch)
    }

    /// The environment's tags: name → node id.
    pub fn tags(&self, env: &str) -> Result<BTreeMap<String, String>> {
        Ok(self.env(env)?.tags)
    }

    /// Tag `reference` as `name`; the node id tagged.
    pub fn tag(&self, env: &str, name: &str, reference: &str) -> Result<String> {
        Ok(self.store()?.set_tag(env, name, reference)?.into_string())
    }

    /// Remove tag `name`; the node id it named.
    pub fn untag(&self, env: &str, name: &str) -> Result<String> {
        Ok(self.store()?.delete_tag(env, name)?.into_string())
    }

    /// Drop node `reference` from the history (its children then descend from its parent).
    pub fn delete_node(&self, env: &str, reference: &str) -> Result<Node> {
        Ok(self.store()?.delete_node(env, reference)?)
    }

    /// Keep the environment's `keep` newest nodes (and tagged ones), drop the rest.
    pub fn retain(&self, env: &str, keep: u64) -> Result<RetainReport> {
        Ok(self.store()?.retain(env, keep)?)
    }

    /// Free the data no node, environment or ref uses any more.
    pub fn gc(&self) -> Result<GcReport> {
        Ok(self.store()?.gc()?)
    }

    /// What [`Boxes::gc`] would free now; nothing is removed.
    pub fn gc_dry_run(&self) -> Result<GcReport> {
        Ok(self.store()?.gc_dry_run()?)
    }
}
