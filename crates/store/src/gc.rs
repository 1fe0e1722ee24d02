//! Garbage collection and consistency checks.
//!
//! GC takes the store lock exclusively, so no commit, checkout or import is between steps
//! while it decides what is unreferenced; environments resume as soon as it finishes. A layer
//! is live when it is in the chain of a live node (HEADs, tags and store refs all name live
//! nodes, so they are covered).

use std::collections::BTreeSet;
use std::path::PathBuf;

use agentbox_core::atomic;
use agentbox_core::id::{self, NodeId};
use agentbox_core::lock::Mode;
use serde::Serialize;

use crate::store::Store;
use crate::{Error, Result};

/// What GC did.
#[derive(Debug, Clone, Serialize)]
pub struct GcReport {
    pub removed_nodes: Vec<String>,
    pub removed_layers: Vec<String>,
    pub repairs: Vec<String>,
    pub disk_bytes_before: u64,
    pub disk_bytes_after: u64,
}

/// One finding of `fsck`.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    pub path: PathBuf,
    pub message: String,
    /// True when `fsck --repair` (or the next open, or `gc`) fixes it.
    pub repairable: bool,
    /// Disk space the path occupies, for data an interrupted operation left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// What `fsck` found (and repaired).
#[derive(Debug, Clone, Serialize)]
pub struct FsckReport {
    pub nodes: usize,
    pub layers: usize,
    pub environments: usize,
    /// Layers no node references any more; `gc` frees them.
    pub unreferenced_layers: usize,
    /// Disk space of those layers.
    pub unreferenced_bytes: u64,
    pub problems: Vec<Problem>,
    pub repairs: Vec<String>,
    /// Whether the store was looked at with no operation running, so that half-made data
    /// (see [`crate::leftovers`]) could be told from a live operation's and is among the
    /// problems. False when another process held the store lock.
    pub leftovers_checked: bool,
    /// What interrupted operations left (half-made layers, staging, unreferenced layers…);
    /// empty unless [`FsckReport::leftovers_checked`].
    pub leftovers: Vec<crate::leftovers::Leftover>,
}

impl Store {
    fn usage_bytes(&self) -> Result<u64> {
        Ok(agentbox_sys::fiemap::disk_usage(&[
            self.layout().layers().as_path(),
            self.layout().envs().as_path(),
        ])?
        .physical_bytes)
    }

    /// Layer ids on disk (directories or records), and the ones live nodes reference.
    fn layer_sets(&self) -> Result<(BTreeSet<String>, BTreeSet<String>)> {
        self.layer_sets_without(&BTreeSet::new())
    }

    /// [`Store::layer_sets`] as if the nodes in `dropped` were gone already (what `gc`
    /// would find after removing them).
    fn layer_sets_without(
        &self,
        dropped: &BTreeSet<String>,
    ) -> Result<(BTreeSet<String>, BTreeSet<String>)> {
        let mut on_disk = BTreeSet::new();
        for entry in fs_err::read_dir(self.layout().layers())? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // A listing left without its layer (GC interrupted) makes the id count too, so
            // that it is freed with the rest.
            let id = name
                .strip_suffix(".json")
                .or_else(|| crate::listing::id_of(&name))
                .unwrap_or(&name);
            if id::is_full_id(id) {
                on_disk.insert(id.to_owned());
            }
        }
        let mut live = BTreeSet::new();
        for node in self
            .nodes()?
            .values()
            .filter(|n| !dropped.contains(n.id.as_str()))
        {
            let mut next = Some(node.layer.clone());
            while let Some(lid) = next {
                if !live.insert(lid.clone()) {
                    break;
                }
                next = atomic::read_json_opt::<crate::backend::LayerRecord>(
                    &self.layout().layer_record(&lid),
                )?
                .and_then(|r| r.parent);
            }
        }
        Ok((on_disk, live))
    }

    /// Nodes that no environment, tag or store ref can reach: those of destroyed
    /// environments (and of imports that never completed) that nothing else descends from,
    /// and detached nodes whose ref is gone. Caller holds the store lock exclusively.
    fn remove_unreachable_nodes(&self) -> Result<Vec<String>> {
        let removed: Vec<String> = self.unreachable_nodes()?.into_iter().collect();
        for id in &removed {
            self.remove_node_file(id)?;
        }
        if !removed.is_empty() {
            atomic::sync_dir(&self.layout().nodes())?;
        }
        Ok(removed)
    }

    /// The nodes [`Store::remove_unreachable_nodes`] removes, without removing them.
    fn unreachable_nodes(&self) -> Result<BTreeSet<String>> {
        let nodes = self.nodes()?;
        let envs = self.envs()?;
        let env_names: BTreeSet<&str> = envs.iter().map(|e| e.name.as_str()).collect();
        // Every node of a live environment's history is a root; a detached node is not part
        // of any history and lives only while a ref, HEAD, tag or child names it.
        let mut roots: Vec<String> = nodes
            .values()
            .filter(|n| env_names.contains(n.env.as_str()) && n.detached.is_none())
            .map(|n| n.id.as_str().to_owned())
            .collect();
        for e in &envs {
            roots.push(e.head.as_str().to_owned());
            roots.extend(e.tags.values().cloned());
            // The node an interrupted checkout moves to: its next writer finishes it.
            roots.extend(e.checkout_pending.clone().map(NodeId::into_string));
        }
        roots.extend(self.refs()?.into_values());
        let mut reachable: BTreeSet<String> = BTreeSet::new();
        for r in roots {
            let mut next = Some(r);
            while let Some(id) = next {
                if !reachable.insert(id.clone()) {
                    break;
                }
                next = nodes
                    .get(&id)
                    .and_then(|n| n.parent.clone())
                    .map(NodeId::into_string);
            }
        }
        Ok(nodes
            .keys()
            .filter(|id| !reachable.contains(*id))
            .cloned()
            .collect())
    }

    /// What [`Store::gc`] would remove now, removing nothing: the unreachable nodes, the
    /// layers no remaining node would reference, and the disk space those layers occupy
    /// (`disk_bytes_after` is `disk_bytes_before` less it). The lock is shared, so running
    /// boxes are not held up; a commit that lands meanwhile only makes the real `gc` keep
    /// more. Repairs `gc` would make first (reconcile) are not previewed.
    pub fn gc_dry_run(&self) -> Result<GcReport> {
        let _lock = self.lock_store(Mode::Shared, "gc --dry-run")?;
        let before = self.usage_bytes()?;
        let nodes = self.unreachable_nodes()?;
        let (on_disk, live) = self.layer_sets_without(&nodes)?;
        let layers: Vec<String> = on_disk.difference(&live).cloned().collect();
        let paths: Vec<PathBuf> = layers
            .iter()
            .map(|lid| self.backend().layer_dir(lid))
            .filter(|p| p.exists())
            .collect();
        let refs: Vec<&std::path::Path> = paths.iter().map(PathBuf::as_path).collect();
        let freed = agentbox_sys::fiemap::disk_usage(&refs)?.physical_bytes;
        Ok(GcReport {
            removed_nodes: nodes.into_iter().collect(),
            removed_layers: layers,
            repairs: Vec::new(),
            disk_bytes_before: before,
            disk_bytes_after: before.saturating_sub(freed),
        })
    }

    /// Free every node nothing can reach and every layer no remaining node references.
    pub fn gc(&self) -> Result<GcReport> {
        let _lock = self.lock_store(Mode::Exclusive, "gc")?;
        let repairs = self.reconcile()?;
        let before = self.usage_bytes()?;
        let removed_nodes = self.remove_unreachable_nodes()?;
        let (on_disk, live) = self.layer_sets()?;
        let mut removed = Vec::new();
        for lid in on_disk.difference(&live) {
            self.free_layer(lid)?;
            removed.push(lid.clone());
        }
        atomic::sync_dir(&self.layout().layers())?;
        let after = self.usage_bytes()?;
        Ok(GcReport {
            removed_nodes,
            removed_layers: removed,
            repairs,
            disk_bytes_before: before,
            disk_bytes_after: after,
        })
    }

    /// Check the store's consistency; with `repair`, fix what can be fixed (reconcile,
    /// dangling tags and refs, unreferenced layers).
    ///
    /// Without `repair` the store lock is taken exclusively if that is possible at once, so
    /// that half-made data an interrupted operation left is reported (with its path and
    /// size); when an operation is running, the lock is taken shared and such data is not
    /// judged ([`FsckReport::leftovers_checked`] is false), since it may be that
    /// operation's.
    pub fn fsck(&self, repair: bool) -> Result<FsckReport> {
        let (_lock, exclusive) = if repair {
            (self.lock_store(Mode::Exclusive, "fsck")?, true)
        } else {
            match self.try_exclusive("fsck")? {
                Ok(lock) => (lock, true),
                Err(_) => (self.lock_store(Mode::Shared, "fsck")?, false),
            }
        };
        let mut repairs = Vec::new();
        if repair {
            repairs = self.reconcile()?;
        }
        let leftovers = if exclusive {
            self.leftovers_locked()?
        } else {
            Vec::new()
        };
        let mut problems = Vec::new();
        let mut problem = |path: PathBuf, message: String, repairable: bool| {
            problems.push(Problem {
                path,
                message,
                repairable,
                bytes: None,
            })
        };
        let files = self.all_node_files()?;
        let nodes = self.nodes()?;
        let envs = self.envs()?;
        for (id, n) in &files {
            let path = self.layout().node(id);
            if n.id != *id {
                problem(path.clone(), format!("file holds node {}", n.id), false);
            }
            if n.deleted.is_some() {
                problem(path.clone(), "deletion was interrupted".into(), true);
                continue;
            }
            if let Some(p) = &n.parent {
                if !files.contains_key(p.as_str()) {
                    problem(path.clone(), format!("parent {p} does not exist"), false);
                }
            }
            if let Some(env) = envs
                .iter()
                .find(|e| e.name == n.env)
                .filter(|_| n.detached.is_none())
            {
                if n.seq >= env.next_seq && env.head != *id {
                    problem(
                        path.clone(),
                        format!("commit to {:?} was never acknowledged", env.name),
                        true,
                    );
                }
            }
            match self.chain(n) {
                Ok(chain) => {
                    for l in chain {
                        let dir = self.backend().layer_dir(&l.id);
                        if !dir.is_dir() {
                            problem(dir, format!("layer of node {id} is missing"), false);
                        }
                    }
                }
                // Its provider holds the tree (see `crate::held`): only the record is here.
                Err(Error::Held { .. }) => {}
                Err(e) => problem(path.clone(), e.to_string(), false),
            }
        }
        // Cycles: walking parents from any node must end.
        for id in nodes.keys() {
            let mut seen = BTreeSet::new();
            let mut next = Some(id.clone());
            while let Some(cur) = next {
                if !seen.insert(cur.clone()) {
                    problem(self.layout().node(id), "parent chain loops".into(), false);
                    break;
                }
                next = nodes
                    .get(&cur)
                    .and_then(|n| n.parent.clone())
                    .map(NodeId::into_string);
            }
        }
        // The index against the node files (see `index`): repairable, by rebuilding it.
        let live_files: std::collections::BTreeMap<String, crate::Node> = files
            .iter()
            .filter(|(_, n)| n.deleted.is_none())
            .map(|(k, n)| (k.clone(), n.clone()))
            .collect();
        for p in self.index_problems(&live_files, &envs, exclusive)? {
            problem(p.path, p.message, true);
        }
        for env in &envs {
            let path = self.layout().env_state(&env.name);
            if !nodes.contains_key(env.head.as_str()) {
                problem(
                    path.clone(),
                    format!("HEAD {} does not exist", env.head),
                    false,
                );
            }
            for (tag, tid) in &env.tags {
                if !nodes.contains_key(tid) {
                    problem(
                        path.clone(),
                        format!("tag {tag:?} points at missing node {tid}"),
                        true,
                    );
                }
            }
        }
        for (name, rid) in self.refs()? {
            if !nodes.contains_key(&rid) {
                problem(
                    self.layout().refs().join(&name),
                    format!("points at missing node {rid}"),
                    true,
                );
            }
        }
        // Unreferenced layers are not a problem: retention and deletion leave them for GC.
        let (on_disk, live) = self.layer_sets()?;
        // A layer reported as a problem (half-made, or a record without data) is counted
        // there only: listing it again as unreferenced would count one layer twice.
        let mut reported: BTreeSet<&str> = leftovers
            .iter()
            .filter_map(|l| match l.kind {
                crate::leftovers::LeftoverKind::UnrecordedLayer => Some(l.id.as_str()),
                // `environment/layer`: the layer holds the environment's working files.
                crate::leftovers::LeftoverKind::InterruptedCommit => {
                    l.interrupted().map(|(_, lid)| lid)
                }
                _ => None,
            })
            .collect();
        if !exclusive {
            // Without the leftovers check, at least flag what no live operation produces
            // (a live commit may be between publishing a layer and writing its record).
            for lid in &on_disk {
                let dir = self.backend().layer_dir(lid);
                let rec = self.layout().layer_record(lid);
                if rec.exists() && !dir.exists() && !live.contains(lid) {
                    problem(dir, "layer record without data (gc frees it)".into(), true);
                    reported.insert(lid);
                }
            }
        }
        let unreferenced = on_disk
            .difference(&live)
            .filter(|l| !reported.contains(l.as_str()))
            .count();
        // Half-made data; interrupted deletions and unacknowledged commits are reported
        // above already.
        for l in &leftovers {
            if l.kind.is_problem()
                && !matches!(
                    l.kind,
                    crate::leftovers::LeftoverKind::InterruptedDeletion
                        | crate::leftovers::LeftoverKind::UnacknowledgedNode
                )
            {
                problems.push(Problem {
                    path: l.path.clone(),
                    message: if l.kind.is_given_back() {
                        format!("{}: `agentbox prune` gives them back", l.what)
                    } else {
                        format!(
                            "{} ({}); `agentbox prune` removes it",
                            l.what,
                            human_bytes(l.bytes)
                        )
                    },
                    repairable: true,
                    bytes: Some(l.bytes),
                });
            }
        }
        let unreferenced_bytes = leftovers
            .iter()
            .filter(|l| l.kind == crate::leftovers::LeftoverKind::UnreferencedLayer)
            .map(|l| l.bytes)
            .sum();
        if repair {
            let dangling: BTreeSet<String> = envs
                .iter()
                .flat_map(|e| e.tags.values().cloned())
                .chain(self.refs()?.into_values())
                .filter(|id| !nodes.contains_key(id))
                .collect();
            if !dangling.is_empty() {
                self.drop_refs_to(&dangling)?;
                repairs.push(format!(
                    "dropped tags/refs to {} missing nodes",
                    dangling.len()
                ));
            }
            for lid in on_disk.difference(&live) {
                self.free_layer(lid)?;
                repairs.push(format!("freed unreferenced layer {lid}"));
            }
            problems.retain(|p| !p.repairable);
        }
        Ok(FsckReport {
            nodes: nodes.len(),
            layers: on_disk.len(),
            environments: envs.len(),
            unreferenced_layers: if repair { 0 } else { unreferenced },
            unreferenced_bytes: if repair { 0 } else { unreferenced_bytes },
            problems,
            repairs,
            leftovers_checked: exclusive,
            leftovers: if repair { Vec::new() } else { leftovers },
        })
    }
}

/// A byte count for messages (`12.3 MiB`).
pub(crate) use agentbox_core::units::bytes as human_bytes;
