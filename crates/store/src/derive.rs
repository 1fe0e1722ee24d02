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
    fn finish_detached(
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

/// Whether a layer made by a derive with cleanup `done` is clean for a derive with
/// `delete` and `truncate`: every pattern of theirs is one `done` applied (compared as
/// compiled patterns, so `/tmp/**` and `tmp/**` are one). A truncate pattern among `done`'s
/// delete patterns counts too: nothing matching it is left at all.
fn covers(done: &Cleanup, delete: &[PathPattern], truncate: &[PathPattern]) -> bool {
    let Ok((done_delete, done_truncate)) = done.compile() else {
        return false;
    };
    delete.iter().all(|p| done_delete.contains(p))
        && truncate
            .iter()
            .all(|p| done_truncate.contains(p) || done_delete.contains(p))
}

/// Add to `out` every path of `listing` that a pattern of `walk` matches. The listing is
/// walked with a stack of its current path's ancestors and their states, so an entry costs
/// one [`PatternWalk::step`] from its parent's state — a few byte comparisons where no
/// pattern part matches its name (listings put parents before children; any order is
/// correct, only slower) — and nothing below a directory where no pattern is alive is
/// stepped at all.
fn collect_matches(listing: &Listing, walk: &mut PatternWalk<'_>, out: &mut BTreeSet<PathBuf>) {
    let mut names: Vec<&[u8]> = Vec::new();
    let mut states: Vec<SetState> = Vec::new();
    let mut comps: Vec<&[u8]> = Vec::new();
    for raw in listing.paths() {
        comps.clear();
        comps.extend(raw.split(|&b| b == b'/').filter(|c| !c.is_empty()));
        let mut keep = 0;
        while keep < names.len() && keep < comps.len() && names[keep] == comps[keep] {
            keep += 1;
        }
        names.truncate(keep);
        states.truncate(keep);
        for &name in &comps[keep..] {
            let parent = states.last().copied().unwrap_or_else(|| walk.root());
            if !walk.alive(parent) {
                break;
            }
            states.push(walk.step(parent, name));
            names.push(name);
        }
        if !comps.is_empty()
            && names.len() == comps.len()
            && states.last().is_some_and(|&s| walk.accepts(s))
        {
            out.insert(crate::listing::as_path(raw).to_owned());
        }
    }
}

/// An entry of a merged tree as [`scan_chain`] reports it, with (for a directory) the
/// directories it merges, topmost first, cut at the first opaque one.
#[derive(Debug, Clone)]
struct Resolved {
    entry: Entry,
    merged: Vec<PathBuf>,
}

/// Looks single paths up in the merged tree of a chain, by the rules of [`scan_chain`]:
/// the first layer (top-down) holding a name decides it; a whiteout hides it; a
/// non-directory hides everything below; directories merge down to the first opaque one.
/// Lookups are cached, so the ancestors shared by many paths are read once.
struct Resolver<'a> {
    layers: &'a [PathBuf],
    /// The layers' opaque-directory attribute.
    opaque: &'a str,
    cache: HashMap<PathBuf, Option<Resolved>>,
}

impl<'a> Resolver<'a> {
    fn new(layers: &'a [PathBuf], opaque: &'a str) -> Resolver<'a> {
        Resolver {
            layers,
            opaque,
            cache: HashMap::new(),
        }
    }

    fn root(&self) -> Result<Resolved> {
        let top = self.layers.first().ok_or_else(|| Error::Backend {
            path: PathBuf::new(),
            message: "derive from an empty chain".into(),
        })?;
        let mut merged = Vec::new();
        let mut root_meta = None;
        for layer in self.layers {
            let meta = read_meta(layer)?;
            if !meta.is_dir() {
                return Err(Error::Backend {
                    path: layer.clone(),
                    message: "a layer root must be a directory".into(),
                });
            }
            // Every root merges: overlayfs reads no `opaque` attribute on a layer's root.
            merged.push(layer.clone());
            if root_meta.is_none() {
                root_meta = Some(meta);
            }
        }
        let mut meta = root_meta.ok_or_else(|| Error::Backend {
            path: top.clone(),
            message: "derive from an empty chain".into(),
        })?;
        strip_overlay_xattrs(&mut meta);
        Ok(Resolved {
            entry: Entry {
                rel: PathBuf::new(),
                src: top.clone(),
                meta,
            },
            merged,
        })
    }

    /// The entry at `rel` in the merged tree, `None` when the tree has none.
    fn get(&mut self, rel: &Path) -> Result<Option<Resolved>> {
        if let Some(r) = self.cache.get(rel) {
            return Ok(r.clone());
        }
        let found = match (rel.parent(), rel.file_name()) {
            (Some(parent), Some(name)) => match self.get(parent)? {
                Some(p) if p.entry.meta.is_dir() => self.child(&p, rel, name)?,
                _ => None,
            },
            _ => Some(self.root()?),
        };
        self.cache.insert(rel.to_owned(), found.clone());
        Ok(found)
    }

    /// Child `name` (at `rel`) of the merged directory `parent`.
    fn child(
        &self,
        parent: &Resolved,
        rel: &Path,
        name: &std::ffi::OsStr,
    ) -> Result<Option<Resolved>> {
        Ok(
            crate::fsops::scan::merged_child(&parent.merged, name, self.opaque)?.map(
                |(src, mut meta, merged)| {
                    strip_overlay_xattrs(&mut meta);
                    Resolved {
                        entry: Entry {
                            rel: rel.to_owned(),
                            src,
                            meta,
                        },
                        merged,
                    }
                },
            ),
        )
    }
}

impl Store {
    /// What `cleanup` does to the tree of `node`: the plan [`Store::derive`] applies, found
    /// from the layers' listings as `derive` does (falling back to a scan of the whole tree
    /// where it must). Always equal to `cleanup.plan(&scan_chain(chain))`.
    pub fn cleanup_plan(&self, node: &Node, cleanup: &Cleanup) -> Result<CleanupPlan> {
        let (delete, truncate) = cleanup.compile()?;
        let _store = self.lock_store(Mode::Shared, "plan a cleanup")?;
        let chain = self.chain(node)?;
        let dirs: Vec<PathBuf> = chain
            .iter()
            .map(|l| self.backend.layer_dir(&l.id))
            .collect();
        if let Some(plan) = self.plan_from_listings(&chain, &dirs, &delete, &truncate)? {
            return Ok(plan);
        }
        let tree = scan_chain(
            &dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
            self.backend.opaque_xattr(),
        )?;
        Ok(plan(&delete, &truncate, &tree))
    }

    /// The plan of a cleanup on the merged tree of `chain` (whose layer directories are
    /// `dirs`), found without walking that tree, or `None` when it has to be walked.
    ///
    /// A path the cleanup edits is an entry of the merged tree, so it is an entry of the
    /// layer providing it, so (by the listing invariant, see [`crate::listing`]) it is in
    /// the listing of that layer or of one it descends from through listing bases — unless
    /// the lineage first reaches a layer some derive already cleaned with these patterns
    /// ([`covers`]), where what it could find is known clean: every such entry is that
    /// layer's own, which has no path a delete pattern matches and no non-empty file a
    /// truncate pattern matches. So the candidates are the paths of those listings that
    /// some pattern matches (found by matching names in memory, no filesystem access); each
    /// is then looked up in the merged tree by the rules of [`scan_chain`], and the plan is
    /// made from what is there exactly as [`Cleanup::plan`] makes it from a whole scan.
    ///
    /// `None` (the caller scans the whole tree): a pattern too long for a cursor, a lineage
    /// that cannot be followed (a base layer whose record or data is gone), or an emptied
    /// file with other names, which may be anywhere in the tree.
    fn plan_from_listings(
        &self,
        chain: &[LayerRecord],
        dirs: &[PathBuf],
        delete: &[PathPattern],
        truncate: &[PathPattern],
    ) -> Result<Option<CleanupPlan>> {
        let mut timer = agentbox_core::timing::Timer::start("derive");
        let patterns: Vec<&PathPattern> = delete.iter().chain(truncate).collect();
        if patterns.is_empty() {
            return Ok(Some(CleanupPlan::default()));
        }
        let Some(mut walk) = PatternWalk::new(patterns) else {
            return Ok(None);
        };
        let mut candidates = BTreeSet::new();
        let mut next = chain.first().cloned();
        let mut hops = 0usize;
        while let Some(layer) = next {
            if layer
                .cleaned
                .as_ref()
                .is_some_and(|done| covers(done, delete, truncate))
            {
                break;
            }
            let Some(listing) = self.listing_of(&layer)? else {
                return Ok(None);
            };
            collect_matches(&listing, &mut walk, &mut candidates);
            next = match &listing.base {
                None => None,
                Some(base) => {
                    match read_json_opt::<LayerRecord>(&self.layout.layer_record(base))? {
                        Some(record) => Some(record),
                        None => return Ok(None),
                    }
                }
            };
            hops += 1;
            if hops > 4096 {
                // A loop of bases cannot be made by this store; never trust one.
                return Ok(None);
            }
        }
        timer.lap("listings");
        let mut resolver = Resolver::new(dirs, self.backend.opaque_xattr());
        let mut deleted: Vec<Resolved> = Vec::new();
        let mut deleted_set: HashSet<PathBuf> = HashSet::new();
        let mut emptied: Vec<Entry> = Vec::new();
        // Parents come before their children (the set is sorted by path), so a removed
        // directory is seen before anything below it.
        for rel in &candidates {
            if rel.ancestors().skip(1).any(|a| deleted_set.contains(a)) {
                continue;
            }
            let Some(found) = resolver.get(rel)? else {
                continue;
            };
            let c = components(rel);
            if delete.iter().any(|p| p.matches(&c)) {
                deleted_set.insert(rel.clone());
                deleted.push(found);
                continue;
            }
            let meta = &found.entry.meta;
            if meta.kind == Kind::File && meta.size > 0 && truncate.iter().any(|p| p.matches(&c)) {
                if meta.nlink > 1 {
                    return Ok(None);
                }
                emptied.push(found.entry);
            }
        }
        let mut out = CleanupPlan::default();
        let mut counted: HashSet<(u64, u64)> = HashSet::new();
        let mut count = |e: &Entry| {
            if e.meta.kind == Kind::File && counted.insert((e.meta.dev, e.meta.ino)) {
                out.bytes += e.meta.size;
            }
        };
        for d in &deleted {
            count(&d.entry);
            if d.entry.meta.is_dir() {
                for e in scan_chain_below(&d.merged, &d.entry.rel, self.backend.opaque_xattr())?
                    .entries
                    .values()
                {
                    count(e);
                }
            }
        }
        for e in &emptied {
            count(e);
        }
        for rel in deleted
            .iter()
            .map(|d| d.entry.rel.as_path())
            .chain(emptied.iter().map(|e| e.rel.as_path()))
        {
            for a in rel.ancestors().skip(1) {
                if out.dirs.contains_key(a) {
                    break;
                }
                if let Some(found) = resolver.get(a)? {
                    out.dirs.insert(a.to_owned(), found.entry);
                }
            }
        }
        out.delete = deleted.into_iter().map(|d| d.entry).collect();
        out.truncate = emptied;
        timer.lap("lookups");
        Ok(Some(out))
    }

    /// The listing of `layer` (see [`crate::listing::of_layer`]).
    fn listing_of(&self, layer: &LayerRecord) -> Result<Option<Listing>> {
        crate::listing::of_layer(
            &self.layout.layers(),
            &self.backend.layer_dir(&layer.id),
            layer,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsops::Meta;

    fn tree(entries: &[(&str, Kind, u64, u64)]) -> Tree {
        let mut t = Tree::default();
        let meta = |kind, ino, size| Meta {
            kind,
            perm: 0o644,
            uid: 0,
            gid: 0,
            size,
            mtime_sec: 0,
            mtime_nsec: 0,
            ctime_sec: 0,
            ctime_nsec: 0,
            btime: None,
            dev: 1,
            ino,
            nlink: 1,
            rdev: 0,
            target: None,
            xattrs: BTreeMap::new(),
        };
        t.entries.insert(
            PathBuf::new(),
            Entry {
                rel: PathBuf::new(),
                src: PathBuf::from("/r"),
                meta: meta(Kind::Dir, 1, 0),
            },
        );
        for (i, (rel, kind, size, ino)) in entries.iter().enumerate() {
            let ino = if *ino == 0 { 100 + i as u64 } else { *ino };
            t.entries.insert(
                PathBuf::from(rel),
                Entry {
                    rel: PathBuf::from(rel),
                    src: Path::new("/r").join(rel),
                    meta: meta(*kind, ino, *size),
                },
            );
        }
        // Hard links: names sharing an inode.
        let mut count: BTreeMap<u64, u64> = BTreeMap::new();
        for e in t.entries.values() {
            *count.entry(e.meta.ino).or_default() += 1;
        }
        for e in t.entries.values_mut() {
            e.meta.nlink = count[&e.meta.ino];
        }
        t
    }

    fn rels(entries: &[Entry]) -> Vec<String> {
        entries
            .iter()
            .map(|e| e.rel.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn plans_take_the_topmost_removals_and_only_regular_files_to_empty() {
        let t = tree(&[
            ("home", Kind::Dir, 0, 0),
            ("home/u", Kind::Dir, 0, 0),
            ("home/u/.bash_history", Kind::File, 10, 0),
            ("home/u/.zsh_history", Kind::Symlink, 0, 0),
            ("tmp", Kind::Dir, 0, 0),
            ("tmp/a", Kind::Dir, 0, 0),
            ("tmp/a/b.log", Kind::File, 5, 0),
            ("tmp/c", Kind::File, 7, 0),
            ("var", Kind::Dir, 0, 0),
            ("var/log", Kind::Dir, 0, 0),
            ("var/log/x.log", Kind::File, 3, 0),
            ("var/log/dir.log", Kind::Dir, 0, 0),
            ("var/log/empty.log", Kind::File, 0, 0),
        ]);
        let cleanup = Cleanup {
            delete: vec!["/tmp/**".into()],
            truncate: vec![
                "**/.bash_history".into(),
                "**/.zsh_history".into(),
                "*.log".into(),
            ],
        };
        let p = cleanup.plan(&t).expect("plan");
        assert_eq!(rels(&p.delete), ["tmp/a", "tmp/c"]);
        assert_eq!(
            rels(&p.truncate),
            ["home/u/.bash_history", "var/log/x.log"],
            "an empty file needs no edit"
        );
        assert_eq!(p.bytes, 5 + 7 + 10 + 3);
        let dirs: Vec<&Path> = p.dirs.keys().map(PathBuf::as_path).collect();
        assert_eq!(
            dirs,
            ["", "home", "home/u", "tmp", "var", "var/log"]
                .map(Path::new)
                .to_vec()
        );
        assert!(!p.is_empty());
    }

    #[test]
    fn every_name_of_an_emptied_file_is_emptied_unless_removed() {
        let t = tree(&[
            ("a.log", Kind::File, 4, 7),
            ("keep", Kind::File, 4, 7),
            ("tmp", Kind::Dir, 0, 0),
            ("tmp/third", Kind::File, 4, 7),
        ]);
        let cleanup = Cleanup {
            delete: vec!["tmp/**".into()],
            truncate: vec!["*.log".into()],
        };
        let p = cleanup.plan(&t).expect("plan");
        assert_eq!(rels(&p.truncate), ["a.log", "keep"]);
        assert_eq!(rels(&p.delete), ["tmp/third"]);
        assert_eq!(p.bytes, 4, "one inode, counted once");
    }

    #[test]
    fn patterns_naming_only_the_root_are_refused() {
        let cleanup = Cleanup {
            delete: vec!["/".into()],
            truncate: Vec::new(),
        };
        let err = cleanup.plan(&Tree::default()).expect_err("refused");
        assert!(matches!(err, Error::InvalidPattern { .. }), "{err}");
        assert!(Cleanup::default()
            .plan(&tree(&[("x", Kind::File, 1, 0)]))
            .expect("plan")
            .is_empty());
    }
}
