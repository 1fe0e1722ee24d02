//! What interrupted operations leave in the store: found by `fsck`, removed by `prune`.
//!
//! One file (over 600 lines, about 130 of them tests): finding (`fsck`) and removing
//! (`prune`) walk one list of kinds and must agree on each, so they are kept side by side.
//!
//! A crash (or a kill) in the middle of a commit, an import or a create leaves data nothing
//! names: a layer still under its temporary name (`layers/.tmp-<id>`), a published layer
//! whose record was never written, an import's or create's staging area (`tmp/…`),
//! temporary files of atomic writes, a node whose commit was never acknowledged, a deletion
//! stopped after its tombstone, an environment directory whose creation never finished,
//! and layers that no node references. A derive or flatten stopped before its ref leaves
//! the same kinds of layer data (`layers/.tmp-<id>`, with a derive's `.tmp-<id>-scratch`
//! templates; an unrecorded or unreferenced layer) plus a detached node no ref names.
//!
//! Invariant: leftovers are only looked for, and only removed, while the store lock is
//! held *exclusively*. Every operation that writes data holds that lock shared from before
//! it creates its first temporary until its commit point (commits, checkouts, creates,
//! imports; staging through [`Store::hold`]), so while the lock is exclusive nothing of a
//! live operation exists that is not yet named by a node or environment — whatever is
//! unnamed then is half-made. When the lock cannot be had at once (some operation is
//! running), nothing is reported or removed, and the caller says so.

use std::path::PathBuf;

use agentbox_core::atomic;
use agentbox_core::id;
use agentbox_core::lock::{FileLock, Mode};
use serde::Serialize;

use crate::store::Store;
use crate::{Error, Result};

/// What kind of leftover it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LeftoverKind {
    /// An environment's working files under the name of the layer its interrupted commit
    /// was making (a `layers` commit renames the upper directory to be the layer): given
    /// back to the environment, never removed.
    InterruptedCommit,
    /// `layers/.tmp-<id>`: a layer a commit or import was still writing.
    TempLayer,
    /// `layers/<id>/` without `layers/<id>.json`: published, but its record never written.
    UnrecordedLayer,
    /// An entry of `tmp/`: the staging area of an import or create, or the working files of
    /// a removed environment still to be deleted (see [`crate::discard`]).
    Staging,
    /// A temporary file of an interrupted atomic write (`nodes/`, `layers/`).
    TempFile,
    /// A node whose commit never reached its environment's HEAD.
    UnacknowledgedNode,
    /// A node tombstoned by a deletion that did not finish.
    InterruptedDeletion,
    /// `envs/<name>/` without `env.json`: a create or import that never finished.
    HalfCreatedEnv,
    /// A layer (record and data) no node references: what an interrupted commit or import
    /// leaves after its record, and what deleting or thinning nodes leaves for `gc`.
    UnreferencedLayer,
    /// A detached node (see [`crate::node`]) nothing names: what removing a checkpoint's
    /// ref leaves for `gc`, and what a derive or flatten stopped before its ref (its commit
    /// point) leaves; the two look the same.
    UnreferencedNode,
    /// `index/ids/<ab>/<id>` naming no node: a commit, import or create stopped between
    /// writing the entry and the node file (see [`crate::index`]). Harmless (lookups check
    /// the node file), so listed but not a problem.
    StaleIndexEntry,
}

impl LeftoverKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LeftoverKind::InterruptedCommit => "interrupted-commit",
            LeftoverKind::TempLayer => "temp-layer",
            LeftoverKind::UnrecordedLayer => "unrecorded-layer",
            LeftoverKind::Staging => "staging",
            LeftoverKind::TempFile => "temp-file",
            LeftoverKind::UnacknowledgedNode => "unacknowledged-node",
            LeftoverKind::InterruptedDeletion => "interrupted-deletion",
            LeftoverKind::HalfCreatedEnv => "half-created-env",
            LeftoverKind::UnreferencedLayer => "unreferenced-layer",
            LeftoverKind::UnreferencedNode => "unreferenced-node",
            LeftoverKind::StaleIndexEntry => "stale-index-entry",
        }
    }

    /// What `prune` does with it is giving it back, not removing it (so it frees nothing).
    pub fn is_given_back(self) -> bool {
        self == LeftoverKind::InterruptedCommit
    }

    /// Half-made: left only by an operation that stopped half-way, so `fsck` reports it as
    /// a problem. Unreferenced layers and detached nodes are also the normal result of
    /// deleting nodes and refs (`gc` frees them), so they are listed but are not a problem.
    pub fn is_problem(self) -> bool {
        !matches!(
            self,
            LeftoverKind::UnreferencedLayer
                | LeftoverKind::UnreferencedNode
                | LeftoverKind::StaleIndexEntry
        )
    }
}

/// One thing an interrupted operation left.
#[derive(Debug, Clone, Serialize)]
pub struct Leftover {
    pub kind: LeftoverKind,
    pub path: PathBuf,
    /// Disk space it occupies (its own allocated bytes; extents shared with live layers by
    /// reflink or snapshot are counted too, so this is an upper bound of what removing it
    /// frees). 0 when it cannot be measured.
    pub bytes: u64,
    /// What it is, for people.
    pub what: String,
    /// Node or layer id, or environment name, the removal acts on.
    #[serde(skip)]
    pub(crate) id: String,
}

impl Leftover {
    /// For an [`LeftoverKind::InterruptedCommit`]: its environment and the layer that holds
    /// the environment's working files.
    pub(crate) fn interrupted(&self) -> Option<(&str, &str)> {
        (self.kind == LeftoverKind::InterruptedCommit)
            .then(|| self.id.split_once('/'))
            .flatten()
    }
}

/// One row of [`PruneReport`].
#[derive(Debug, Clone, Serialize)]
pub struct Pruned {
    #[serde(flatten)]
    pub leftover: Leftover,
    /// `removed`, `would remove`, `given back`, `would give back`, or `kept: <error>`.
    pub outcome: String,
}

/// What [`Store::prune_leftovers`] found and did.
#[derive(Debug, Clone, Serialize)]
pub struct PruneReport {
    /// Set when another process held the store lock: nothing was examined or removed.
    pub busy: Option<String>,
    pub items: Vec<Pruned>,
    /// Sum of [`Leftover::bytes`] of what was removed (what would be, on a dry run).
    pub bytes: u64,
}

fn usage(path: &std::path::Path) -> u64 {
    // A size is information, not a reason to fail: an unreadable tree counts as 0.
    agentbox_sys::fiemap::disk_usage(&[path])
        .map(|u| u.physical_bytes)
        .unwrap_or(0)
}

impl Store {
    /// The store lock, exclusively, if it can be had now; `Ok(Err(holder))` when another
    /// process holds it (a live operation, whose data must not be touched).
    pub(crate) fn try_exclusive(
        &self,
        doing: &str,
    ) -> Result<std::result::Result<crate::StoreLock, String>> {
        match self.lock_store(Mode::TryExclusive, doing) {
            Ok(lock) => Ok(Ok(lock)),
            Err(Error::Core(e @ agentbox_core::Error::Locked { .. })) => Ok(Err(e.to_string())),
            Err(e) => Err(e),
        }
    }

    /// Everything interrupted operations left, nodes before layers (removing an
    /// unacknowledged node is what makes its layer unreferenced, and both are listed).
    /// The caller holds the store lock exclusively (see the module invariant).
    pub(crate) fn leftovers_locked(&self) -> Result<Vec<Leftover>> {
        let layout = self.layout();
        let mut out = Vec::new();
        // Working files held by an interrupted commit: what looks like its half-made
        // layer is the environment's work, to give back (no space is freed by that).
        let interrupted = self.interrupted_commits()?;
        let held = |name: &str| {
            let lid = name.strip_prefix(".tmp-").unwrap_or(name);
            interrupted.iter().any(|(_, l)| l == lid)
        };
        for (env, lid) in &interrupted {
            out.push(Leftover {
                kind: LeftoverKind::InterruptedCommit,
                path: layout.env_dir(env),
                bytes: 0,
                what: format!("environment {env:?}: a commit stopped half-way while holding its working files"),
                id: format!("{env}/{lid}"),
            });
        }
        let mut push = |kind: LeftoverKind, path: PathBuf, id: String, what: String| {
            let bytes = usage(&path);
            out.push(Leftover {
                kind,
                path,
                bytes,
                what,
                id,
            });
        };
        for dir in [layout.nodes(), layout.layers()] {
            for entry in fs_err::read_dir(&dir)? {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if atomic::is_tmp_name(&name) && entry.file_type()?.is_file() {
                    push(
                        LeftoverKind::TempFile,
                        entry.path(),
                        String::new(),
                        "temporary file of an interrupted write".into(),
                    );
                }
            }
        }
        for entry in fs_err::read_dir(layout.layers())? {
            let entry = entry?;
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if held(&name) {
                continue;
            }
            if name.starts_with(".tmp-") {
                push(
                    LeftoverKind::TempLayer,
                    entry.path(),
                    name.clone(),
                    "half-made layer: a commit or import stopped while writing it".into(),
                );
            } else if id::is_full_id(&name) && !layout.layer_record(&name).exists() {
                push(
                    LeftoverKind::UnrecordedLayer,
                    entry.path(),
                    name.clone(),
                    "half-made layer: a commit or import stopped before recording it".into(),
                );
            }
        }
        if layout.tmp().is_dir() {
            for entry in fs_err::read_dir(layout.tmp())? {
                let entry = entry?;
                let discarded =
                    crate::discard::is_discarded_entry(&entry.file_name().to_string_lossy());
                push(
                    LeftoverKind::Staging,
                    entry.path(),
                    String::new(),
                    if discarded {
                        "working files of a removed environment whose deletion stopped".into()
                    } else {
                        "staging area of an import or create that stopped".into()
                    },
                );
            }
        }
        let files = self.all_node_files()?;
        let envs = self.envs()?;
        let children_of: std::collections::BTreeSet<&str> =
            files.values().filter_map(|n| n.parent.as_deref()).collect();
        let mut unacknowledged = std::collections::BTreeSet::new();
        for (nid, node) in &files {
            if node.deleted.is_some() {
                push(
                    LeftoverKind::InterruptedDeletion,
                    layout.node(nid),
                    nid.clone(),
                    format!("node {nid}: its deletion stopped half-way"),
                );
                continue;
            }
            // Detached nodes have no sequence number: they are judged below.
            if node.detached.is_some() {
                continue;
            }
            // The rule `reconcile` applies: never acknowledged, nobody's HEAD, no child.
            let Some(env) = envs.iter().find(|e| e.name == node.env) else {
                continue;
            };
            if node.seq >= env.next_seq && env.head != *nid && !children_of.contains(nid.as_str()) {
                unacknowledged.insert(nid.clone());
                push(
                    LeftoverKind::UnacknowledgedNode,
                    layout.node(nid),
                    nid.clone(),
                    format!(
                        "node {nid}: its commit to {:?} stopped before moving HEAD",
                        env.name
                    ),
                );
            }
        }
        for nid in self.stale_index_entries(&files)? {
            push(
                LeftoverKind::StaleIndexEntry,
                layout.id_entry(&nid),
                nid.clone(),
                format!("id index entry {nid}: no node file (a write of the node stopped)"),
            );
        }
        for nid in self.unnamed_detached(&files, &envs)? {
            unacknowledged.insert(nid.clone());
            push(
                LeftoverKind::UnreferencedNode,
                layout.node(&nid),
                nid.clone(),
                format!(
                    "detached node {nid}: no ref names it (its ref was removed, or its derive or flatten stopped before writing it)"
                ),
            );
        }
        for entry in fs_err::read_dir(layout.envs())? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if layout.env_state(&name).exists() || !entry.file_type()?.is_dir() {
                continue;
            }
            // Its own lock held means its creation is still running (belt and braces: a
            // creator also holds the store lock shared).
            if FileLock::acquire(
                &layout.env_lock(&name),
                Mode::TryExclusive,
                "environment",
                "prune",
            )
            .is_ok()
            {
                push(
                    LeftoverKind::HalfCreatedEnv,
                    entry.path(),
                    name.clone(),
                    format!("environment {name:?}: its creation never finished"),
                );
            }
        }
        // Layers the remaining nodes reach (through each layer record's parent).
        let mut live = std::collections::BTreeSet::new();
        for (nid, node) in &files {
            if node.deleted.is_some() || unacknowledged.contains(nid) {
                continue;
            }
            let mut next = Some(node.layer.clone());
            while let Some(lid) = next {
                if !live.insert(lid.clone()) {
                    break;
                }
                next = atomic::read_json_opt::<crate::backend::LayerRecord>(
                    &layout.layer_record(&lid),
                )?
                .and_then(|r| r.parent);
            }
        }
        let mut recorded = std::collections::BTreeSet::new();
        for entry in fs_err::read_dir(layout.layers())? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(lid) = name.strip_suffix(".json").filter(|l| id::is_full_id(l)) {
                recorded.insert(lid.to_owned());
            }
        }
        for lid in recorded.difference(&live).filter(|l| !held(l)) {
            let dir = self.backend().layer_dir(lid);
            let path = if dir.exists() {
                dir
            } else {
                layout.layer_record(lid)
            };
            push(
                LeftoverKind::UnreferencedLayer,
                path,
                lid.clone(),
                format!("layer {lid}: no node references it"),
            );
        }
        Ok(out)
    }

    /// Remove one leftover (store lock held exclusively).
    pub(crate) fn remove_leftover_locked(&self, l: &Leftover) -> Result<()> {
        let layout = self.layout();
        match l.kind {
            LeftoverKind::InterruptedCommit => {
                if let Some((env, lid)) = l.interrupted() {
                    self.give_back_interrupted(env, lid)?;
                }
            }
            LeftoverKind::TempFile => match std::fs::remove_file(&l.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::Io(crate::store::io_at(&l.path, e)))
                }
                _ => {}
            },
            LeftoverKind::TempLayer | LeftoverKind::Staging => {
                self.backend().remove_tree(&l.path)?
            }
            LeftoverKind::UnrecordedLayer => {
                self.backend().remove_tree(&l.path)?;
                // Its listing, written with the layer's data, goes with it: left alone it
                // would count as a layer of its own.
                crate::listing::remove(&layout.layers(), &l.id)?;
            }
            LeftoverKind::UnacknowledgedNode | LeftoverKind::UnreferencedNode => {
                self.remove_node_file(&l.id)?;
                atomic::sync_dir(&layout.nodes())?;
            }
            LeftoverKind::StaleIndexEntry => self.unindex_id(&l.id)?,
            LeftoverKind::InterruptedDeletion => self.finish_tombstone(&l.id)?,
            LeftoverKind::HalfCreatedEnv => {
                let work = layout.env_dir(&l.id).join("work");
                if work.exists() {
                    self.backend().remove_tree(&work)?;
                }
                fs_err::remove_dir_all(layout.env_dir(&l.id))?;
            }
            LeftoverKind::UnreferencedLayer => {
                self.free_layer(&l.id)?;
                atomic::sync_dir(&layout.layers())?;
            }
        }
        Ok(())
    }

    /// Find (and unless `dry_run`, remove) what interrupted operations left. Never waits:
    /// when another process holds the store lock, a live operation may own what looks
    /// half-made, so nothing is touched and [`PruneReport::busy`] says who holds it.
    pub fn prune_leftovers(&self, dry_run: bool) -> Result<PruneReport> {
        let _lock = match self.try_exclusive("prune")? {
            Ok(lock) => lock,
            Err(holder) => {
                return Ok(PruneReport {
                    busy: Some(holder),
                    items: Vec::new(),
                    bytes: 0,
                })
            }
        };
        let mut items = Vec::new();
        let mut bytes = 0;
        for l in self.leftovers_locked()? {
            // Given back, not removed: frees nothing.
            let given = l.kind.is_given_back();
            let (done, would) = if given {
                ("given back", "would give back")
            } else {
                ("removed", "would remove")
            };
            let outcome = if dry_run {
                bytes += if given { 0 } else { l.bytes };
                would.to_owned()
            } else {
                match self.remove_leftover_locked(&l) {
                    Ok(()) => {
                        bytes += if given { 0 } else { l.bytes };
                        done.to_owned()
                    }
                    Err(e) => format!("kept: {e}"),
                }
            };
            items.push(Pruned {
                leftover: l,
                outcome,
            });
        }
        Ok(PruneReport {
            busy: None,
            items,
            bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendKind;

    fn store() -> (tempfile::TempDir, Store) {
        let tmp = tempfile::tempdir().expect("tmp");
        let store =
            Store::init(&tmp.path().join("store"), Some(BackendKind::Layers)).expect("init");
        (tmp, store)
    }

    fn kinds(store: &Store) -> Vec<(LeftoverKind, String)> {
        let _lock = store.lock_store(Mode::Exclusive, "test").expect("lock");
        store
            .leftovers_locked()
            .expect("leftovers")
            .into_iter()
            .map(|l| {
                (
                    l.kind,
                    l.path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn half_made_layers_staging_and_temp_files_are_found_and_pruned() {
        let (_tmp, store) = store();
        let layers = store.layout().layers();
        let id = id::new_id();
        std::fs::create_dir_all(layers.join(format!(".tmp-{id}/d"))).expect("mkdir");
        std::fs::write(layers.join(format!(".tmp-{id}/d/f")), vec![7u8; 100_000]).expect("w");
        let unrecorded = id::new_id();
        std::fs::create_dir(layers.join(&unrecorded)).expect("mkdir");
        std::fs::create_dir_all(store.layout().tmp().join("import-x/x")).expect("mkdir");
        std::fs::write(store.layout().nodes().join(".n.json.tmp-1"), b"{").expect("w");
        let orphan = id::new_id();
        std::fs::create_dir(layers.join(&orphan)).expect("mkdir");
        atomic::write_json(
            &store.layout().layer_record(&orphan),
            &crate::backend::LayerRecord::new(&orphan, None, 1),
        )
        .expect("record");
        let mut found = kinds(&store);
        found.sort();
        let mut want = vec![
            (LeftoverKind::TempLayer, format!(".tmp-{id}")),
            (LeftoverKind::UnrecordedLayer, unrecorded.clone()),
            (LeftoverKind::Staging, "import-x".to_owned()),
            (LeftoverKind::UnreferencedLayer, orphan.clone()),
            (LeftoverKind::TempFile, ".n.json.tmp-1".to_owned()),
        ];
        want.sort();
        assert_eq!(found, want);
        // fsck reports the half-made layer as a problem and counts only the orphan as
        // unreferenced: one layer is never counted twice.
        let report = store.fsck(false).expect("fsck");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.path == layers.join(&unrecorded)),
            "{:?}",
            report.problems
        );
        assert_eq!(report.unreferenced_layers, 1, "{report:?}");

        let dry = store.prune_leftovers(true).expect("dry run");
        assert!(dry.busy.is_none());
        assert!(dry.items.iter().all(|i| i.outcome == "would remove"));
        assert!(dry.bytes >= 100_000, "{}", dry.bytes);
        assert!(
            layers.join(format!(".tmp-{id}")).exists(),
            "a dry run removes nothing"
        );

        let done = store.prune_leftovers(false).expect("prune");
        assert!(
            done.items.iter().all(|i| i.outcome == "removed"),
            "{done:?}"
        );
        assert_eq!(done.bytes, dry.bytes);
        assert!(!layers.join(format!(".tmp-{id}")).exists());
        assert!(!layers.join(&unrecorded).exists());
        assert!(!layers.join(&orphan).exists());
        assert!(!store.layout().layer_record(&orphan).exists());
        assert_eq!(
            std::fs::read_dir(store.layout().tmp())
                .expect("tmp")
                .count(),
            0
        );
        assert!(kinds(&store).is_empty());
    }

    #[test]
    fn nothing_is_touched_while_an_operation_holds_the_store() {
        let (_tmp, store) = store();
        let half = store
            .layout()
            .layers()
            .join(format!(".tmp-{}", id::new_id()));
        std::fs::create_dir(&half).expect("mkdir");
        // What an import or create holds while it stages (from another process in real
        // life; a second open file description of the lock behaves the same).
        let held = store.hold("import").expect("hold");
        let report = store.prune_leftovers(false).expect("prune");
        assert!(report.busy.is_some(), "{report:?}");
        assert!(report.items.is_empty());
        assert!(half.exists(), "a live operation's layer must survive");
        let fsck = store.fsck(false).expect("fsck");
        assert!(!fsck.leftovers_checked);
        assert!(fsck.problems.is_empty(), "{:?}", fsck.problems);
        drop(held);
        let fsck = store.fsck(false).expect("fsck");
        assert!(fsck.leftovers_checked);
        assert!(
            fsck.problems
                .iter()
                .any(|p| p.path == half && p.repairable && p.bytes.is_some()),
            "{:?}",
            fsck.problems
        );
    }
}
