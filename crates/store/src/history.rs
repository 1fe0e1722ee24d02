//! Reading the history: log, tree, leaves, show, diff, status.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use agentbox_core::id::NodeId;
use serde::Serialize;

use crate::backend::BackendKind;
use crate::fsops::diff::{diff_trees, Change};
use crate::fsops::scan::{scan_chain, scan_tree, strip_overlay_xattrs};
use crate::fsops::Tree;
use crate::node::Node;
use crate::store::Store;
use crate::Result;

/// The history of one environment: its own nodes, HEAD and its tagged nodes, plus their
/// ancestors (which may belong to the environment it was forked from).
#[derive(Debug, Clone, Serialize)]
pub struct History {
    pub env: String,
    pub head: NodeId,
    pub tags: BTreeMap<String, String>,
    /// Oldest first (by creation time, then sequence).
    pub nodes: Vec<Node>,
}

impl History {
    /// Children of each node id within this history.
    pub fn children(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for n in &self.nodes {
            if let Some(p) = &n.parent {
                out.entry(p.as_str().to_owned())
                    .or_default()
                    .push(n.id.as_str().to_owned());
            }
        }
        out
    }

    /// Branch tips: nodes without children, oldest first.
    pub fn leaves(&self) -> Vec<&Node> {
        let children = self.children();
        self.nodes
            .iter()
            .filter(|n| !children.contains_key(n.id.as_str()))
            .collect()
    }
}

/// Summary of a store (and optionally one environment) for `status`.
///
/// The store-wide figures (`environments` … `logical_bytes`) cost a walk of the whole store
/// (every node, every layer's extents), so they are given only for the store's own status;
/// the status of one environment costs what that environment is.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub store: PathBuf,
    pub backend: BackendKind,
    pub backend_chosen: String,
    pub max_depth: u32,
    #[serde(flatten)]
    pub totals: Option<Totals>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<EnvStatus>,
}

/// The store-wide figures of [`Status`].
#[derive(Debug, Clone, Serialize)]
pub struct Totals {
    pub environments: usize,
    pub nodes: usize,
    pub layers: usize,
    /// Bytes the store occupies on disk, every shared extent and hardlinked inode counted once.
    pub disk_bytes: u64,
    /// Sum of the apparent sizes of the files (what a naive `du --apparent-size` counts).
    pub logical_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct EnvStatus {
    pub name: String,
    pub mountpoint: Option<PathBuf>,
    pub mounted: bool,
    pub head: NodeId,
    pub tags: usize,
    /// Depth of HEAD's layer chain (always 1 on btrfs; 0 for a held environment, whose
    /// tree is not in the store: see [`crate::held`]).
    pub chain_depth: usize,
    /// What the environment's history and data add up to: only when asked for (`usage`),
    /// since it costs a walk of the whole history and of its layers' files.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub usage: Option<EnvUsage>,
}

/// The figures of [`EnvStatus::usage`].
#[derive(Debug, Clone, Serialize)]
pub struct EnvUsage {
    pub nodes: usize,
    pub leaves: usize,
    /// Disk taken by the environment's working tree and the layers of the nodes it made
    /// (extents shared with other layers counted once).
    pub disk_bytes: u64,
}

impl Store {
    /// Nodes of `env` and all their ancestors, oldest first: the ancestors of its branch
    /// tips, HEAD and tags (see [`crate::index`]), read parent by parent — what it costs is
    /// what it lists.
    pub fn history(&self, env: &str) -> Result<History> {
        let state = self.env(env)?;
        if !self.index_ready() {
            return self.history_unindexed(state);
        }
        let mut found: BTreeMap<String, Node> = BTreeMap::new();
        let mut todo: Vec<String> = state.tips.iter().cloned().collect();
        todo.push(state.head.as_str().to_owned());
        // Tagged nodes are part of the environment's history even off HEAD's line (an
        // imported history, or a fork's tags).
        todo.extend(state.tags.values().cloned());
        while let Some(id) = todo.pop() {
            if found.contains_key(&id) {
                continue;
            }
            let Some(node) = self.node_following(&id)? else {
                continue;
            };
            if node.id.as_str() != id && found.contains_key(node.id.as_str()) {
                continue;
            }
            if let Some(p) = &node.parent {
                todo.push(p.as_str().to_owned());
            }
            found.insert(node.id.as_str().to_owned(), node);
        }
        // Parents as `nodes` has them: through pending deletions.
        let mut list: Vec<Node> = found.into_values().collect();
        for n in &mut list {
            if let Some(p) = n.parent.clone() {
                n.parent = self.node_following(p.as_str())?.map(|pn| pn.id);
            }
        }
        list.sort_by(|a, b| a.created.cmp(&b.created).then(a.seq.cmp(&b.seq)));
        Ok(History {
            env: env.to_owned(),
            head: state.head,
            tags: state.tags,
            nodes: list,
        })
    }

    /// [`Store::history`] of a store whose index is not built yet (format 1, opened while
    /// busy): from every node file.
    fn history_unindexed(&self, state: crate::EnvState) -> Result<History> {
        let env = state.name.clone();
        let nodes = self.nodes()?;
        // Nodes made by this environment. One of an earlier, destroyed environment of the
        // same name (not yet collected by GC) predates this one and stays out.
        let mut wanted: BTreeSet<String> = nodes
            .values()
            .filter(|n| n.in_history_of(&env) && n.created >= state.created)
            .map(|n| n.id.as_str().to_owned())
            .collect();
        wanted.insert(state.head.as_str().to_owned());
        wanted.extend(
            state
                .tags
                .values()
                .filter(|id| nodes.contains_key(*id))
                .cloned(),
        );
        for id in wanted.clone() {
            let mut p = nodes.get(&id).and_then(|n| n.parent.as_ref());
            while let Some(pid) = p {
                if !wanted.insert(pid.as_str().to_owned()) {
                    break;
                }
                p = nodes.get(pid.as_str()).and_then(|n| n.parent.as_ref());
            }
        }
        let mut list: Vec<Node> = wanted
            .iter()
            .filter_map(|id| nodes.get(id).cloned())
            .collect();
        list.sort_by(|a, b| a.created.cmp(&b.created).then(a.seq.cmp(&b.seq)));
        Ok(History {
            env,
            head: state.head,
            tags: state.tags,
            nodes: list,
        })
    }

    /// Ancestors of HEAD (HEAD first).
    pub fn log(&self, env: &str) -> Result<Vec<Node>> {
        self.log_limit(env, None)
    }

    /// At most `limit` ancestors of HEAD (HEAD first), read parent by parent: the cost is
    /// the number listed.
    pub fn log_limit(&self, env: &str, limit: Option<usize>) -> Result<Vec<Node>> {
        let state = self.env(env)?;
        let mut out: Vec<Node> = Vec::new();
        let mut seen = BTreeSet::new();
        let mut next = Some(state.head);
        while let Some(id) = next {
            if limit.is_some_and(|l| out.len() >= l) {
                break;
            }
            let Some(mut n) = self.node_following(id.as_str())? else {
                break;
            };
            // A loop in a corrupt store ends the listing (fsck reports it).
            if !seen.insert(n.id.as_str().to_owned()) {
                break;
            }
            n.parent = match n.parent.take() {
                Some(p) => self.node_following(p.as_str())?.map(|pn| pn.id),
                None => None,
            };
            next = n.parent.clone();
            out.push(n);
        }
        Ok(out)
    }

    /// The complete tree of a node.
    pub fn node_tree(&self, node: &Node) -> Result<Tree> {
        let dirs = self.chain_dirs(node)?;
        let refs: Vec<&std::path::Path> = dirs.iter().map(|d| d.as_path()).collect();
        scan_chain(&refs, self.backend().opaque_xattr())
    }

    /// The entries of [`Store::node_tree`], in its order, handed to `f` as they are read
    /// (see [`crate::fsops::walk_chain`]).
    pub fn walk_node_tree(
        &self,
        node: &Node,
        f: &mut dyn FnMut(crate::fsops::Entry) -> Result<()>,
    ) -> Result<()> {
        let dirs = self.chain_dirs(node)?;
        let refs: Vec<&std::path::Path> = dirs.iter().map(|d| d.as_path()).collect();
        crate::fsops::walk_chain(&refs, self.backend().opaque_xattr(), f)
    }

    /// What `reference` changed relative to its parent.
    pub fn show(&self, env: &str, reference: &str) -> Result<(Node, Vec<Change>)> {
        let node = self.node(&self.resolve(env, reference)?)?;
        let new = self.node_tree(&node)?;
        let old = match &node.parent {
            Some(p) => self.node_tree(&self.node(p)?)?,
            None => Tree::default(),
        };
        Ok((node, diff_trees(&old, &new)?))
    }

    /// Differences between two nodes; with `b = None`, between `a` and the working tree.
    pub fn diff(&self, env: &str, a: &str, b: Option<&str>) -> Result<Vec<Change>> {
        self.diff_with(env, a, b, |_, _, _, _| None)
            .map(|v| v.into_iter().map(|(c, _)| c).collect())
    }

    /// [`Store::diff`] with each changed file's content differences as a unified diff
    /// (see [`crate::patch`]).
    pub fn diff_patch(
        &self,
        env: &str,
        a: &str,
        b: Option<&str>,
    ) -> Result<Vec<(Change, Option<String>)>> {
        self.diff_with(env, a, b, crate::patch::unified)
    }

    /// The differences, each with what `content` makes of the change, the files on both
    /// sides (readable only during the call: a working tree is seen through a view that goes
    /// away after it) and the root of that view, below which a box may swap what was listed.
    fn diff_with(
        &self,
        env: &str,
        a: &str,
        b: Option<&str>,
        content: impl Fn(&Change, Option<&Path>, Option<&Path>, Option<&Path>) -> Option<String>,
    ) -> Result<Vec<(Change, Option<String>)>> {
        let state = self.env(env)?;
        let old = self.node_tree(&self.node(&self.resolve_in(&state, a)?)?)?;
        // Kept until the comparison has read the files it names.
        let mut _view = None;
        let new = match b {
            Some(b) => self.node_tree(&self.node(&self.resolve_in(&state, b)?)?)?,
            None => {
                let head = self.node(&state.head)?;
                let view = _view.insert(
                    self.backend()
                        .working_view(&self.work_dirs(&state), &self.chain(&head)?)?,
                );
                let mut t = scan_tree(&view.path)?;
                for e in t.entries.values_mut() {
                    strip_overlay_xattrs(&mut e.meta);
                }
                t
            }
        };
        let changes = diff_trees(&old, &new)?;
        Ok(changes
            .into_iter()
            .map(|c| {
                let src = |t: &crate::fsops::Tree| {
                    t.entries
                        .get(&c.path)
                        .filter(|e| e.meta.kind == crate::fsops::Kind::File)
                        .map(|e| e.src.clone())
                };
                let (o, n) = (src(&old), src(&new));
                // The working tree's files are read beneath its view, which the box changes.
                let beneath = _view.as_ref().map(|v| v.path.as_path());
                let text = content(&c, o.as_deref(), n.as_deref(), beneath);
                (c, text)
            })
            .collect())
    }

    /// The store-wide figures: a walk of every node and every layer.
    pub fn totals(&self) -> Result<Totals> {
        let layers = fs_err::read_dir(self.layout().layers())?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
            .count();
        let usage = agentbox_sys::fiemap::disk_usage(&[
            self.layout().layers().as_path(),
            self.layout().envs().as_path(),
        ])?;
        Ok(Totals {
            environments: self.envs()?.len(),
            nodes: self.nodes()?.len(),
            layers,
            disk_bytes: usage.physical_bytes,
            logical_bytes: usage.logical_bytes,
        })
    }

    /// Store summary (with its store-wide figures), or the details of `env` when given.
    pub fn status(&self, env: Option<&str>, usage: bool) -> Result<Status> {
        let totals = match env {
            None => Some(self.totals()?),
            Some(_) => None,
        };
        let env = match env {
            None => None,
            Some(name) => {
                let state = self.env(name)?;
                let head = self.node(&state.head)?;
                let usage = if usage {
                    let h = self.history(name)?;
                    let mut own: Vec<PathBuf> = vec![self.layout().env_dir(name)];
                    // A held environment's layers have no data here (only their records).
                    if state.held_by.is_none() {
                        own.extend(
                            h.nodes
                                .iter()
                                .filter(|n| n.in_history_of(name))
                                .map(|n| self.backend().layer_dir(&n.layer)),
                        );
                    }
                    let own_usage = agentbox_sys::fiemap::disk_usage(
                        &own.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
                    )?;
                    Some(EnvUsage {
                        nodes: h.nodes.len(),
                        leaves: h.leaves().len(),
                        disk_bytes: own_usage.physical_bytes,
                    })
                } else {
                    None
                };
                Some(EnvStatus {
                    mounted: state
                        .mountpoint
                        .as_deref()
                        .is_some_and(crate::mounts::is_mountpoint),
                    name: name.to_owned(),
                    mountpoint: state.mountpoint.clone(),
                    head: state.head.clone(),
                    tags: state.tags.len(),
                    chain_depth: if state.held_by.is_some() {
                        0
                    } else {
                        self.chain(&head)?.len()
                    },
                    usage,
                })
            }
        };
        Ok(Status {
            store: self.root().to_owned(),
            backend: self.config().backend,
            backend_chosen: self.config().chosen.clone(),
            max_depth: self.config().max_depth,
            totals,
            env,
        })
    }
}
