//! The store's metadata index: what lets per-environment operations read only what they
//! are about, never every node of the store.
//!
//! Node files (`nodes/<id>.json`) stay the truth; the index is derived from them and can
//! always be rebuilt from them ([`Store::repair_index`], run by the full reconcile pass and
//! by `fsck --repair`). Two parts:
//!
//! * **Id fan-out** — `index/ids/<ab>/<id>`, an empty file per node, `<ab>` being the id's
//!   first two hex digits (256 shard directories, made when the index is built). A prefix
//!   (at least [`id::MIN_PREFIX`] hex digits) is resolved by reading one shard: about
//!   `nodes / 256` entries. Written before the node file, and made durable with it, so a
//!   node is never without its entry; removed after the node file. An entry without a node
//!   (a crash between the two) is harmless — every lookup checks the node file — and is a
//!   leftover `prune` removes.
//! * **Branch tips** — `tips` in each `env.json` ([`crate::EnvState::tips`]): the
//!   environment's own nodes (committed there, acknowledged) that have no child among its
//!   own nodes (a superset after a deletion: one that has an own child only repeats what
//!   another tip covers). The environment's history is then the ancestors of its tips, HEAD and tags:
//!   found by following parents from node file to node file, so reading it costs what it
//!   shows. The tips are written in the same `env.json` write that moves HEAD — the commit
//!   point — so they need no write and no crash protocol of their own. A deletion replaces a
//!   removed tip by the ancestor its children move to ([`Store::finish_tombstone`]).
//!
//! A store of format 1 (no index) is migrated when it is first opened with nobody else
//! using it: the index is built from the node files, then `store.json` is rewritten with
//! format 2 — the migration's commit point; until then every lookup falls back to reading
//! the node files (correct, only slower). An agentbox that reads format 1 only refuses a
//! migrated store instead of writing nodes the index would not know.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use agentbox_core::atomic;
use agentbox_core::id;

use crate::node::Node;
use crate::store::{EnvState, Store};
use crate::Result;

/// What [`Store::index_problems`] finds: the path concerned and what is wrong.
#[derive(Debug, Clone)]
pub(crate) struct IndexProblem {
    pub path: PathBuf,
    pub message: String,
}

impl Store {
    /// Whether the index is built (format 2). Until it is, lookups read the node files.
    pub(crate) fn index_ready(&self) -> bool {
        self.index_ready.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Add `id`'s fan-out entry; returns its path, to be made durable together with the
    /// node file, or `None` while the index is not built (the migration adds it then).
    pub(crate) fn index_id(&self, id: &str) -> Result<Option<PathBuf>> {
        if !self.index_ready() {
            return Ok(None);
        }
        let path = self.layout.id_entry(id);
        match std::fs::File::create(&path) {
            Ok(_) => Ok(Some(path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A shard removed by hand: make it again (and durable, like the entry).
                // This may reach the disk before the caller's store marker does (a btrfs
                // commit settles it with its snapshot): harmless, an empty shard is no
                // half-made state.
                let shard = self.layout.id_shard(id);
                fs_err::create_dir_all(&shard)?;
                atomic::sync_dir(&self.layout.index_ids())?;
                fs_err::File::create(&path)?;
                Ok(Some(path))
            }
            Err(e) => Err(crate::Error::Io(crate::store::io_at(&path, e))),
        }
    }

    /// Remove node file `id` and then its fan-out entry (store lock held). Not made
    /// durable here: callers sync `nodes/` as their protocol needs.
    pub(crate) fn remove_node_file(&self, id: &str) -> Result<()> {
        fs_err::remove_file(self.layout.node(id))?;
        self.unindex_id(id)
    }

    /// Remove `id`'s fan-out entry, if any.
    pub(crate) fn unindex_id(&self, id: &str) -> Result<()> {
        let path = self.layout.id_entry(id);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(crate::Error::Io(crate::store::io_at(&path, e))),
        }
    }

    /// Full ids of the live nodes starting with `prefix` (hex, at least two digits),
    /// sorted. Reads one shard of the fan-out (the node files while there is no index).
    pub fn ids_with_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        if !id::is_hex(prefix) {
            return Ok(Vec::new());
        }
        if !self.index_ready() || prefix.len() < 2 {
            return Ok(self
                .nodes()?
                .into_keys()
                .filter(|i| i.starts_with(prefix))
                .collect());
        }
        let shard = self.layout.id_shard(prefix);
        let mut out = Vec::new();
        let entries = match std::fs::read_dir(&shard) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(crate::Error::Io(crate::store::io_at(&shard, e))),
        };
        for entry in entries {
            let entry = entry.map_err(|e| crate::store::io_at(&shard, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if id::is_full_id(&name) && name.starts_with(prefix) {
                // An entry whose node is gone or being deleted names nothing.
                if matches!(self.read_node_file(&name)?, Some(n) if n.deleted.is_none()) {
                    out.push(name);
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Refuse a new name (of a `kind`: environment, box) that equals a prefix of an
    /// existing node's id (see [`crate::names::check_not_id_prefix`]); one shard read.
    pub fn check_not_id_prefix(&self, kind: &str, name: &str) -> Result<()> {
        if name.len() < id::MIN_PREFIX || !id::is_hex(name) {
            return Ok(());
        }
        crate::names::check_not_id_prefix(kind, name, self.ids_with_prefix(name)?)
    }

    /// The live node `id`, or the one a pending deletion of it re-parents onto (following
    /// tombstones, as [`Store::nodes`] does); `None` when there is none.
    pub(crate) fn node_following(&self, id: &str) -> Result<Option<Node>> {
        let mut next = Some(id.to_owned());
        // A deletion re-parents onto a surviving ancestor, so tombstones never loop; the
        // bound only stops a corrupt store from spinning.
        for _ in 0..4096 {
            let Some(cur) = next else { return Ok(None) };
            match self.read_node_file(&cur)? {
                None => return Ok(None),
                Some(n) if n.deleted.is_none() => return Ok(Some(n)),
                Some(n) => {
                    next = n
                        .deleted
                        .and_then(|t| t.reparent_to)
                        .map(|p| p.into_string())
                }
            }
        }
        Ok(None)
    }

    /// Make the index agree with the node files (exclusive store lock held): add missing
    /// fan-out entries, drop stale ones, recompute every environment's tips, and complete
    /// a migration from format 1. Returns a description of each repair.
    pub(crate) fn repair_index(&self) -> Result<Vec<String>> {
        let mut repairs = Vec::new();
        let files = self.all_node_files()?;
        let ids = self.layout.index_ids();
        fs_err::create_dir_all(&ids)?;
        for shard in 0..=255u8 {
            let dir = ids.join(format!("{shard:02x}"));
            if !dir.is_dir() {
                fs_err::create_dir(&dir)?;
            }
        }
        let indexed = self.indexed_ids()?;
        let mut made = 0;
        for id in files.keys().filter(|i| !indexed.contains(*i)) {
            fs_err::File::create(self.layout.id_entry(id))?;
            made += 1;
        }
        if made > 0 && self.index_ready() {
            repairs.push(format!("added {made} node(s) missing from the id index"));
        }
        let mut stale = 0;
        for id in indexed.iter().filter(|i| !files.contains_key(*i)) {
            self.unindex_id(id)?;
            stale += 1;
        }
        if stale > 0 {
            repairs.push(format!("removed {stale} id index entries naming no node"));
        }
        for mut state in self.envs()? {
            let tips = own_tips(&files, &state);
            if tips != state.tips {
                // A deleted tip's parent takes its place even when it has other children
                // (finding them would read every node): such a redundant tip is normalised
                // away here, not reported. A missing tip, or one naming no live node, is.
                let damaged = tips.iter().any(|t| !state.tips.contains(t))
                    || state
                        .tips
                        .iter()
                        .any(|t| files.get(t.as_str()).is_none_or(|n| n.deleted.is_some()));
                if damaged && self.index_ready() {
                    repairs.push(format!("recomputed the branch tips of {:?}", state.name));
                }
                state.tips = tips;
                self.write_env(&state)?;
            }
        }
        // Everything above durable before the format says the index can be trusted.
        atomic::syncfs(self.layout.root())?;
        if !self.index_ready() {
            let mut config = self.config.clone();
            config.format = crate::store::FORMAT;
            atomic::write_json(&self.layout.config(), &config)?;
            self.index_ready
                .store(true, std::sync::atomic::Ordering::SeqCst);
            repairs.push(format!(
                "built the metadata index of {} node(s) (store format 1 → {})",
                files.len(),
                crate::store::FORMAT
            ));
        }
        Ok(repairs)
    }

    /// Every id with a fan-out entry.
    fn indexed_ids(&self) -> Result<BTreeSet<String>> {
        let mut out = BTreeSet::new();
        let ids = self.layout.index_ids();
        if !ids.is_dir() {
            return Ok(out);
        }
        for shard in fs_err::read_dir(&ids)? {
            let shard = shard?;
            if !shard.file_type()?.is_dir() {
                continue;
            }
            for entry in fs_err::read_dir(shard.path())? {
                let name = entry?.file_name().to_string_lossy().into_owned();
                if id::is_full_id(&name) {
                    out.insert(name);
                }
            }
        }
        Ok(out)
    }

    /// Where the index and the node files disagree. `files` is every live node file. With
    /// `exclusive` false another operation may be running, so only what no live operation
    /// leaves is judged: a node without its entry (a commit writes the entry first), not
    /// the tips (a commit may move them between the reading of `files` and of `envs`).
    pub(crate) fn index_problems(
        &self,
        files: &BTreeMap<String, Node>,
        envs: &[EnvState],
        exclusive: bool,
    ) -> Result<Vec<IndexProblem>> {
        let mut out = Vec::new();
        if !self.index_ready() {
            out.push(IndexProblem {
                path: self.layout.index(),
                message: "the metadata index is not built yet (store format 1): the next command, or `fsck --repair`, builds it".into(),
            });
            return Ok(out);
        }
        let indexed = self.indexed_ids()?;
        for id in files.keys().filter(|i| !indexed.contains(*i)) {
            out.push(IndexProblem {
                path: self.layout.id_entry(id),
                message: format!(
                    "node {id} is missing from the id index (lookups by prefix miss it)"
                ),
            });
        }
        for state in envs.iter().filter(|_| exclusive) {
            let want = own_tips(files, state);
            let path = self.layout.env_state(&state.name);
            for t in want.difference(&state.tips) {
                out.push(IndexProblem {
                    path: path.clone(),
                    message: format!("branch tip {t} is missing from the environment's tips (its history would not show it)"),
                });
            }
            // A tip that has since got a child of its own (a deletion hands a tip's place
            // to its parent) only repeats what another tip covers: not a problem. One that
            // names no node is.
            for t in state.tips.iter().filter(|t| !files.contains_key(*t)) {
                out.push(IndexProblem {
                    path: path.clone(),
                    message: format!("tip {t} names no node"),
                });
            }
        }
        Ok(out)
    }

    /// Fan-out entries naming no node (exclusive store lock held: none is a live
    /// commit's).
    pub(crate) fn stale_index_entries(
        &self,
        files: &BTreeMap<String, Node>,
    ) -> Result<Vec<String>> {
        if !self.index_ready() {
            return Ok(Vec::new());
        }
        Ok(self
            .indexed_ids()?
            .into_iter()
            .filter(|i| !files.contains_key(i))
            .collect())
    }
}

/// The tips of `state` computed from every node file: its own acknowledged nodes (made
/// there since it was created, not detached, `seq` below `next_seq`) without a child among
/// them. What commits maintain one at a time.
pub(crate) fn own_tips(files: &BTreeMap<String, Node>, state: &EnvState) -> BTreeSet<String> {
    let own: BTreeMap<&str, &Node> = files
        .iter()
        .filter(|(_, n)| {
            n.deleted.is_none()
                && n.in_history_of(&state.name)
                && n.created >= state.created
                && n.seq < state.next_seq
        })
        .map(|(k, n)| (k.as_str(), n))
        .collect();
    let parents: BTreeSet<&str> = own.values().filter_map(|n| n.parent.as_deref()).collect();
    own.keys()
        .filter(|k| !parents.contains(*k))
        .map(|k| (*k).to_owned())
        .collect()
}
