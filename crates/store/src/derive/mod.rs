//! Detached nodes: [`Store::derive`] makes a node whose tree is another node's with paths
//! removed and files emptied (the cleanup of a warm checkpoint), [`Store::flatten`] one
//! whose tree is another node's in a single self-contained layer.
//!
//! Neither touches an environment: HEAD, `env.json`, the working tree and the processes of
//! a running box are left exactly as they were, and the new node is in no environment's
//! history (see [`crate::node`] for detached nodes). The new node is named by a store ref
//! the caller chooses ([`DetachOpts::keep_as`], e.g. `checkpoints/<project key>/<name>`),
//! written last; while the ref exists the node, its ancestors and its whole layer chain are
//! kept by GC, retention and the removal of the environment it came from.
//!
//! Protocol (each step durable before the next, the store lock held shared throughout so
//! GC cannot free the source in between): layer data (`layers/.tmp-<id>`, then
//! `layers/<id>`) → layer record → node file → ref (the commit point). A crash before the
//! ref leaves a half-made layer (removed by `reconcile`), an unreferenced layer (freed by
//! GC) or a detached node no ref names (removed by `reconcile`, listed by `fsck`/`prune`).
//! Failpoints: `derive:after-copy`, `derive:after-layer`, `derive:after-record`,
//! `derive:after-node`, `derive:after-ref`, and the same for `flatten:`.
//!
//! The cleanup plan of a node found from its layers' listings (without a scan of the whole
//! tree) is in `cleanup_plan`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use agentbox_core::atomic::{read_json_opt, write_json_unsynced};
use agentbox_core::failpoint;
use agentbox_core::glob::{PathPattern, PatternWalk, SetState};
use agentbox_core::id::{new_id, NodeId};
use agentbox_core::lock::Mode;
use chrono::Utc;
use serde::{Deserialize, Serialize};

use crate::backend::LayerRecord;
use crate::fsops::scan::{read_meta, scan_chain, scan_chain_below, strip_overlay_xattrs};
use crate::fsops::{Entry, Kind, Tree};
use crate::listing::Listing;
use crate::node::{Detached, DetachedHow, Node};
use crate::store::Store;
use crate::{Error, Result};

mod cleanup_plan;
#[cfg(test)]
mod tests;

/// What [`Store::derive`] removes and empties. Patterns are [`PathPattern`]s over paths
/// relative to the environment's root (`/tmp/**`, `**/.bash_history`, `*.log`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cleanup {
    /// An entry matching one of these is removed with everything below it.
    pub delete: Vec<String>,
    /// A regular file matching one of these (and not removed) is emptied. Symlinks,
    /// directories and special files are left alone; every name of a hard-linked file is
    /// emptied, since they are one file.
    pub truncate: Vec<String>,
}

impl Cleanup {
    /// The cleanup of a warm checkpoint: what `apt-get clean`, `rm -rf /tmp/* /var/tmp/*
    /// /var/lib/apt/lists/*`, npm's debug logs and emptying system logs and shell histories
    /// remove. Caches (`~/.npm`, `~/.cache`, …) stay: warm state is the checkpoint's value.
    /// Callers add their own (package-manager caches, project logs).
    pub fn checkpoint() -> Cleanup {
        let owned = |v: &[&str]| v.iter().map(|p| (*p).to_owned()).collect();
        Cleanup {
            delete: owned(&[
                "/tmp/**",
                "/var/tmp/**",
                "/var/lib/apt/lists/**",
                "/var/cache/apt/*.bin",
                "/var/cache/apt/archives/*.deb",
                "/var/cache/apt/archives/partial/**",
                "**/.npm/_logs/**",
            ]),
            truncate: owned(&[
                "/var/log/**/*.log",
                "**/.bash_history",
                "**/.zsh_history",
                "**/.sh_history",
                "**/.local/share/fish/fish_history",
            ]),
        }
    }

    /// Compile the patterns; a pattern that could only name the root (`""`, `/`) is
    /// refused.
    fn compile(&self) -> Result<(Vec<PathPattern>, Vec<PathPattern>)> {
        let compile = |patterns: &[String]| -> Result<Vec<PathPattern>> {
            patterns
                .iter()
                .map(|p| {
                    PathPattern::new(p).ok_or_else(|| Error::InvalidPattern {
                        pattern: p.clone(),
                        reason: "it names no path below the root (the root itself is never removed or emptied)".into(),
                    })
                })
                .collect()
        };
        Ok((compile(&self.delete)?, compile(&self.truncate)?))
    }

    /// What the cleanup does to `tree` (a merged tree: [`scan_chain`] of a node's chain).
    pub fn plan(&self, tree: &Tree) -> Result<CleanupPlan> {
        let (delete, truncate) = self.compile()?;
        Ok(plan(&delete, &truncate, tree))
    }
}

/// The edits [`Cleanup`] makes to one tree, computed from a scan of it. Paths are relative
/// to the tree's root; every `Entry` is the tree's (its `src` is where the scan found it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanupPlan {
    /// Entries removed with everything below them; none lies below another. Sorted.
    pub delete: Vec<Entry>,
    /// Non-empty regular files emptied (none is below a removed entry). Sorted.
    pub truncate: Vec<Entry>,
    /// Every directory holding an edited path, up to the root (included), with its metadata
    /// in the tree: what a layer of the edits needs around them, and what keeps its mtime.
    pub dirs: BTreeMap<PathBuf, Entry>,
    /// Apparent bytes of the files removed or emptied.
    pub bytes: u64,
}

impl CleanupPlan {
    /// Whether the cleanup changes nothing in the tree.
    pub fn is_empty(&self) -> bool {
        self.delete.is_empty() && self.truncate.is_empty()
    }
}

fn components(rel: &Path) -> Vec<&[u8]> {
    rel.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.as_bytes()),
            _ => None,
        })
        .collect()
}

fn plan(delete: &[PathPattern], truncate: &[PathPattern], tree: &Tree) -> CleanupPlan {
    let mut out = CleanupPlan::default();
    let mut deleted: HashSet<&Path> = HashSet::new();
    let mut emptied: BTreeSet<&Path> = BTreeSet::new();
    let under_deleted =
        |deleted: &HashSet<&Path>, rel: &Path| rel.ancestors().skip(1).any(|a| deleted.contains(a));
    // Parents come before their children (the tree is sorted by path).
    for (rel, e) in &tree.entries {
        if rel.as_os_str().is_empty() || under_deleted(&deleted, rel) {
            continue;
        }
        let c = components(rel);
        if delete.iter().any(|p| p.matches(&c)) {
            deleted.insert(rel.as_path());
            continue;
        }
        // An empty file needs no edit.
        if e.meta.kind == Kind::File && e.meta.size > 0 && truncate.iter().any(|p| p.matches(&c)) {
            emptied.insert(rel.as_path());
        }
    }
    // The other names of an emptied hard-linked file are the same file: emptied too
    // (unless removed). Within a tree, names of one inode share (dev, ino).
    let linked: HashSet<(u64, u64)> = emptied
        .iter()
        .filter_map(|rel| tree.get(rel))
        .filter(|e| e.meta.nlink > 1)
        .map(|e| (e.meta.dev, e.meta.ino))
        .collect();
    if !linked.is_empty() {
        for (rel, e) in &tree.entries {
            if e.meta.kind == Kind::File
                && linked.contains(&(e.meta.dev, e.meta.ino))
                && !deleted.contains(rel.as_path())
                && !under_deleted(&deleted, rel)
            {
                emptied.insert(rel.as_path());
            }
        }
    }
    let mut bytes = 0u64;
    let mut counted: HashSet<(u64, u64)> = HashSet::new();
    let mut count = |e: &Entry| {
        if e.meta.kind == Kind::File && counted.insert((e.meta.dev, e.meta.ino)) {
            bytes += e.meta.size;
        }
    };
    for rel in &deleted {
        for (_, e) in tree.entries.range(rel.to_path_buf()..) {
            if !e.rel.starts_with(rel) {
                break;
            }
            count(e);
        }
    }
    for rel in &emptied {
        if let Some(e) = tree.get(rel) {
            count(e);
        }
    }
    out.bytes = bytes;
    let mut deleted: Vec<&Path> = deleted.into_iter().collect();
    deleted.sort();
    for rel in deleted.iter().chain(emptied.iter()) {
        for a in rel.ancestors().skip(1) {
            if out.dirs.contains_key(a) {
                break;
            }
            if let Some(e) = tree.get(a) {
                out.dirs.insert(a.to_owned(), e.clone());
            }
        }
    }
    out.delete = deleted
        .iter()
        .filter_map(|rel| tree.get(rel).cloned())
        .collect();
    out.truncate = emptied
        .iter()
        .filter_map(|rel| tree.get(rel).cloned())
        .collect();
    out
}

/// How the node a detached operation makes is described and kept.
#[derive(Debug, Clone, Default)]
pub struct DetachOpts {
    /// The store ref that names the new node (`ns/…/name`, see
    /// [`crate::names::validate_ref`]), created or moved. Writing it is the operation's
    /// commit point: the node lives as long as the ref (or a fork, tag or child) names it.
    pub keep_as: String,
    pub message: String,
    pub command: Option<String>,
    pub metadata: BTreeMap<String, serde_json::Value>,
}

impl DetachOpts {
    /// A node kept as ref `keep_as` with `message`.
    pub fn new(keep_as: impl Into<String>, message: impl Into<String>) -> DetachOpts {
        DetachOpts {
            keep_as: keep_as.into(),
            message: message.into(),
            ..DetachOpts::default()
        }
    }
}

/// What [`Store::derive`] made.
#[derive(Debug, Clone, Serialize)]
pub struct Derived {
    pub node: Node,
    /// Paths removed (a removed directory counts once, with everything below it).
    pub deleted: usize,
    /// Files emptied.
    pub truncated: usize,
    /// Apparent bytes of the files removed or emptied.
    pub bytes: u64,
}

impl Store {
    /// Make a detached node holding the tree of `from` (resolved in `env`: `HEAD`, a tag,
    /// a ref, an id) with `cleanup` applied: every path matching a delete pattern removed,
    /// every regular file matching a truncate pattern emptied, everything else exactly as
    /// it was — metadata included (the directories holding a removed path keep their
    /// mtime; an emptied file keeps its mode, owner, xattrs and mtime).
    ///
    /// `env` is only read: its HEAD, `env.json`, working tree and running processes stay
    /// exactly as they were, and its writer lock is not taken (a box may commit meanwhile).
    /// The node is kept as ref [`DetachOpts::keep_as`].
    ///
    /// Storage: on `layers`, one small layer on top of `from`'s chain holding whiteouts for
    /// the removed paths and empty files for the emptied ones (a complete layer when the
    /// chain is at the store's maximum depth); on `btrfs`, a snapshot of `from`'s subvolume,
    /// edited, then sealed read-only. When nothing matches, the node shares `from`'s layer.
    /// The new layer's record keeps `cleanup` ([`LayerRecord::cleaned`]).
    ///
    /// Cost: not a scan of the tree. The paths the cleanup could touch are found by
    /// matching it against the layers' listings in memory ([`crate::listing`]: what each
    /// layer holds, written when it was made), going down the chain only to the first layer
    /// an earlier derive already cleaned with these patterns; each match is then looked up
    /// in the tree. So a derive costs O(entries of the layers above the last checkpoint) in
    /// memory plus O(matches) on disk: a box's new layers, not its whole tree. A layer
    /// without a listing is walked once (one `getdents` per directory) and its listing
    /// kept. The plan is exactly what a scan of the whole tree gives ([`Cleanup::plan`]);
    /// where it cannot be had this way (an emptied file with other names, which may be
    /// anywhere in the tree) the whole tree is scanned.
    ///
    /// For a box (an environment without a mount point, whose layers sit on a base), a
    /// removed path is recorded as a whiteout on both backends: the box does not see the
    /// base's file at that path either, as after an `rm` inside the box.
    pub fn derive(
        &self,
        env: &str,
        from: &str,
        cleanup: &Cleanup,
        opts: DetachOpts,
    ) -> Result<Derived> {
        let mut timer = agentbox_core::timing::Timer::start("derive");
        let ref_path = self.ref_path(&opts.keep_as)?;
        let (delete, truncate) = cleanup.compile()?;
        let _store = self.lock_store(Mode::Shared, "derive")?;
        let state = self.env(env)?;
        let source = self.node(&self.resolve_in(&state, from)?)?;
        let chain = self.chain(&source)?;
        let dirs: Vec<PathBuf> = chain
            .iter()
            .map(|l| self.backend.layer_dir(&l.id))
            .collect();
        timer.lap("prepare");
        let plan = match self.plan_from_listings(&chain, &dirs, &delete, &truncate)? {
            Some(plan) => plan,
            None => {
                let tree = scan_chain(
                    &dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
                    self.backend.opaque_xattr(),
                )?;
                plan(&delete, &truncate, &tree)
            }
        };
        timer.lap("plan");
        let over_base = state.mountpoint.is_none();
        let id = new_id();
        let layer = if plan.is_empty() {
            None
        } else {
            Some(self.make_layer("derive", &id, || {
                let mut record = self.backend.derive_layer(
                    &chain,
                    &plan,
                    &id,
                    over_base,
                    state.box_base.as_ref(),
                )?;
                record.cleaned = Some(cleanup.clone());
                Ok(record)
            })?)
        };
        timer.lap("layer");
        let node = self.finish_detached(
            "derive",
            env,
            &source,
            DetachedHow::Derive,
            id,
            layer,
            &ref_path,
            opts,
        )?;
        timer.lap("node and ref");
        Ok(Derived {
            node,
            deleted: plan.delete.len(),
            truncated: plan.truncate.len(),
            bytes: plan.bytes,
        })
    }

    /// Make a detached node holding the tree of `from` (resolved in `env`) in one
    /// self-contained layer: its chain has length 1 and depends on no other layer, so once
    /// `from` and the nodes sharing its chain are gone, GC frees their layers while this
    /// node keeps working.
    ///
    /// On `layers`, the merged tree of the chain is copied (reflinked where the filesystem
    /// can) into one complete layer; a box's overlay markers (whiteouts, opaque directories
    /// hiding the base) are kept. When `from`'s chain already has length 1, and always on
    /// `btrfs` (every layer there is a complete subvolume), the new node shares `from`'s
    /// layer: O(1), no copy; the layer then lives while either node does.
    ///
    /// `env` is only read (as for [`Store::derive`]). The node is kept as ref
    /// [`DetachOpts::keep_as`] (which may be the ref `from` is: it moves to the flattened
    /// node, and the node it named before is left to GC).
    pub fn flatten(&self, env: &str, from: &str, opts: DetachOpts) -> Result<Node> {
        let mut timer = agentbox_core::timing::Timer::start("flatten");
        let ref_path = self.ref_path(&opts.keep_as)?;
        let _store = self.lock_store(Mode::Shared, "flatten")?;
        let state = self.env(env)?;
        let source = self.node(&self.resolve_in(&state, from)?)?;
        let chain = self.chain(&source)?;
        let over_base = state.mountpoint.is_none();
        let id = new_id();
        let layer = if chain.len() == 1 {
            None
        } else {
            Some(self.make_layer("flatten", &id, || {
                let mut record =
                    self.backend
                        .flatten_layer(&chain, &id, over_base, state.box_base.as_ref())?;
                // The same tree as the chain's top layer: as clean as it is.
                record.cleaned = chain.first().and_then(|l| l.cleaned.clone());
                Ok(record)
            })?)
        };
        timer.lap("layer");
        let node = self.finish_detached(
            "flatten",
            env,
            &source,
            DetachedHow::Flatten,
            id,
            layer,
            &ref_path,
            opts,
        )?;
        timer.lap("node and ref");
        Ok(node)
    }

    /// Run `make` (which creates layer `id`) and write the layer's record; on failure,
    /// whatever stage the layer reached is removed.
    fn make_layer(
        &self,
        op: &str,
        id: &str,
        make: impl FnOnce() -> Result<LayerRecord>,
    ) -> Result<LayerRecord> {
        let result = make().and_then(|record| {
            failpoint::hit(&format!("{op}:after-layer"));
            write_json_unsynced(&self.layout.layer_record(id), &record)?;
            failpoint::hit(&format!("{op}:after-record"));
            Ok(record)
        });
        if result.is_err() {
            let _ = std::fs::remove_file(self.layout.layer_record(id));
            let _ = self.backend.remove_layer(id);
        }
        result
    }

    /// Write the detached node `id` (on the new `layer`, or on `source`'s layer when
    /// `None`), make it durable, then point the ref at it: the commit point.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn finish_detached(
        &self,
        op: &str,
        env: &str,
        source: &Node,
        how: DetachedHow,
        id: String,
        layer: Option<LayerRecord>,
        ref_path: &Path,
        opts: DetachOpts,
    ) -> Result<Node> {
        let node = Node {
            id: NodeId::from_trusted(id),
            parent: None,
            env: env.to_owned(),
            seq: 0,
            layer: layer
                .as_ref()
                .map_or_else(|| source.layer.clone(), |l| l.id.clone()),
            message: opts.message,
            command: opts.command,
            created: Utc::now(),
            metadata: opts.metadata,
            deleted: None,
            detached: Some(Detached {
                from: source.id.clone(),
                how,
            }),
        };
        let result = (|| {
            // The id's index entry before the node file (see `index`).
            let entry = self.index_id(&node.id)?;
            write_json_unsynced(&self.layout.node(&node.id), &node)?;
            let mut files = Vec::new();
            if let Some(l) = &layer {
                files.push(self.layout.layer_record(&l.id));
            }
            files.push(self.layout.node(&node.id));
            files.extend(entry);
            self.backend.make_durable(&files)?;
            failpoint::hit(&format!("{op}:after-node"));
            self.write_ref_locked(ref_path, &node.id)
        })();
        if let Err(e) = result {
            // Never named: take it all back (a crash instead leaves it to reconcile and GC).
            let _ = self.remove_node_file(&node.id);
            if let Some(l) = &layer {
                let _ = std::fs::remove_file(self.layout.layer_record(&l.id));
                let _ = self.backend.remove_layer(&l.id);
            }
            return Err(e);
        }
        failpoint::hit(&format!("{op}:after-ref"));
        Ok(node)
    }
}
