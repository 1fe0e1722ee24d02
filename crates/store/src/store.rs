//! The store: opening, environments, commits, checkouts and the node files.
//!
//! Locking (see `layout` for the files):
//! * `store.lock` is taken *shared* by every operation that adds data (create, commit,
//!   checkout, import) and *exclusive* by operations that remove data or rewrite nodes of
//!   several environments (delete, retain, gc, fsck --repair). Environments therefore never
//!   wait for each other, and GC never frees a layer a commit is still writing.
//! * `envs/<name>/lock` is taken exclusively (non-blocking) by whoever changes that
//!   environment; a second writer gets an error naming the holder.
//!
//! Commit protocol (each step durable before the next): layer data → layer record → node file
//! → `env.json` with the new HEAD and `next_seq + 1`. The last write is the commit point: a
//! node whose `seq` is not below its environment's `next_seq` was never acknowledged and is
//! removed by `reconcile`; a layer without record, or referenced by no node, is freed by GC.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use agentbox_core::atomic::{self, read_json_opt, write_json, write_json_unsynced};
use agentbox_core::failpoint;
use agentbox_core::id::{self, new_id, NodeId};
use agentbox_core::lock::{FileLock, Mode};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::backend::{self, Backend, BackendKind, LayerRecord, WorkDirs};
use crate::inflight::{self, StoreLock};
use crate::layout::Layout;
use crate::names;
use crate::node::{Node, Tombstone};
use crate::{Error, Result};

/// Version of the on-disk format written into `store.json`: 2 has the metadata index
/// (see [`crate::index`]).
pub const FORMAT: u32 = 2;

/// The format before the index, still opened (and migrated when first idle).
pub const FORMAT_UNINDEXED: u32 = 1;

/// Default number of layers a `layers` chain may reach before a commit flattens it.
pub const DEFAULT_MAX_DEPTH: u32 = 24;

/// `store.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoreConfig {
    pub format: u32,
    pub backend: BackendKind,
    /// How `backend` was chosen: "auto" (by the filesystem) or "override".
    pub chosen: String,
    pub max_depth: u32,
    pub created: DateTime<Utc>,
    /// The xattr namespace of overlay markers in layers: `trusted.overlay.*` for a store
    /// made by root (what a root overlay mount reads), `user.overlay.*` for one made by a
    /// normal user (what an overlay mounted in a user namespace with `userxattr` reads).
    #[serde(default)]
    pub overlay_xattrs: OverlayXattrs,
}

/// See [`StoreConfig::overlay_xattrs`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OverlayXattrs {
    #[default]
    Trusted,
    User,
}

impl OverlayXattrs {
    /// The opaque-directory attribute in this namespace.
    pub fn opaque(self) -> &'static str {
        match self {
            OverlayXattrs::Trusted => "trusted.overlay.opaque",
            OverlayXattrs::User => "user.overlay.opaque",
        }
    }
}

/// `envs/<name>/env.json`: the mutable state of one environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvState {
    pub name: String,
    pub created: DateTime<Utc>,
    /// The user-visible directory; `None` for a box, whose working tree is mounted only
    /// inside the box.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mountpoint: Option<PathBuf>,
    pub head: NodeId,
    /// Sequence number the next commit gets; strictly increasing.
    pub next_seq: u64,
    /// Branch tips: the environment's own acknowledged nodes without a child among them
    /// (see [`crate::index`]); its history is the ancestors of these, HEAD and its tags.
    /// Written with HEAD, in the same atomic write.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub tips: BTreeSet<String>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Set while a checkout rebuilds the working tree: the node it is moving to. A crash
    /// leaves it set and the next writer of the environment finishes the checkout, so the
    /// working tree and HEAD never disagree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkout_pending: Option<NodeId>,
    /// For a box: the tree its layers are mounted over (the host's `/`, or an image's root),
    /// as its runtime last reported it ([`Store::record_box_base`]). A box's layers keep a
    /// whiteout only in a directory this tree has (a whiteout anywhere else hides nothing,
    /// and overlayfs would list its name in a directory no lower layer merges with); with
    /// no base recorded (older boxes, until their next start), every whiteout is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub box_base: Option<crate::backend::BoxBase>,
    /// For a box: the disk limit of its work area ([`Store::set_disk_limit`]), applied
    /// again each time a checkout makes the work area anew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_limit: Option<crate::disk::DiskLimit>,
}

/// Where a new environment's first node comes from.
#[derive(Debug, Clone)]
pub enum Source {
    Empty,
    /// An exact copy of a directory.
    Dir(PathBuf),
    /// A layer already staged inside the store's `tmp/` (imports); moved, not copied, when the
    /// backend allows.
    Staged(PathBuf),
}

/// Options of a commit.
#[derive(Debug, Clone, Default)]
pub struct CommitOpts {
    pub message: String,
    pub command: Option<String>,
    pub metadata: BTreeMap<String, serde_json::Value>,
}

/// An open store.
#[derive(Debug)]
pub struct Store {
    pub(crate) layout: Layout,
    pub(crate) config: StoreConfig,
    pub(crate) backend: Box<dyn Backend>,
    /// Whether the metadata index is built (format 2); set by a migration.
    pub(crate) index_ready: std::sync::atomic::AtomicBool,
}

/// Locks held by a writer of one environment; released on drop.
pub(crate) struct EnvGuard {
    _env: FileLock,
    store: StoreLock,
}

impl EnvGuard {
    /// Make the store marker durable before the holder makes anything else durable.
    fn settle(&mut self) -> Result<()> {
        self.store.settle()
    }

    /// The holder's first durable step, a commit of the filesystem's whole transaction,
    /// has carried the marker to disk.
    fn carried(&mut self) {
        self.store.carried()
    }
}

impl Store {
    /// Open the store at `root`, creating it when missing. `backend` overrides the automatic
    /// choice (btrfs when `root` is on btrfs, else layers) when the store is created; for an
    /// existing store it must match what is recorded.
    pub fn open_or_init(root: &Path, backend: Option<BackendKind>) -> Result<Store> {
        if root.join("store.json").exists() {
            let store = Store::open(root)?;
            if let Some(kind) = backend {
                if kind != store.config.backend {
                    return Err(Error::Backend {
                        path: root.to_owned(),
                        message: format!(
                            "the store already uses the {} backend; a store has one backend (use another AGENTBOX_HOME for {kind})",
                            store.config.backend
                        ),
                    });
                }
            }
            return Ok(store);
        }
        Store::init(root, backend)
    }

    /// Create a new store at `root`.
    pub fn init(root: &Path, backend: Option<BackendKind>) -> Result<Store> {
        let layout = Layout::new(root);
        for dir in [
            layout.root().to_owned(),
            layout.nodes(),
            layout.layers(),
            layout.envs(),
            layout.refs(),
            layout.tmp(),
            layout.inflight(),
        ] {
            fs_err::create_dir_all(&dir)?;
        }
        for shard in 0..=255u8 {
            fs_err::create_dir_all(layout.index_ids().join(format!("{shard:02x}")))?;
        }
        // Private: the store holds every box's files (a box's setuid file must not be
        // runnable, nor its data readable, by the host's other users); so does the home.
        use std::os::unix::fs::PermissionsExt;
        fs_err::set_permissions(root, std::fs::Permissions::from_mode(0o700))?;
        if let Some(home) = root.parent().filter(|_| root.ends_with("store")) {
            fs_err::set_permissions(home, std::fs::Permissions::from_mode(0o700))?;
        }
        let auto = if backend::btrfs::probe(root) {
            BackendKind::Btrfs
        } else {
            BackendKind::Layers
        };
        let config = StoreConfig {
            format: FORMAT,
            backend: backend.unwrap_or(auto),
            chosen: if backend.is_some_and(|b| b != auto) {
                "override".into()
            } else {
                "auto".into()
            },
            max_depth: DEFAULT_MAX_DEPTH,
            created: Utc::now(),
            overlay_xattrs: if rustix::process::geteuid().is_root() {
                OverlayXattrs::Trusted
            } else {
                OverlayXattrs::User
            },
        };
        if config.backend == BackendKind::Btrfs && auto != BackendKind::Btrfs {
            return Err(Error::Backend {
                path: root.to_owned(),
                message: "the btrfs backend needs the store on a btrfs filesystem (run `agentbox setup --btrfs SIZE` to make one)".into(),
            });
        }
        write_json(&layout.config(), &config)?;
        Store::open(root)
    }

    /// Open an existing store and finish whatever a crash left half-done.
    pub fn open(root: &Path) -> Result<Store> {
        let store = Store::open_unreconciled(root)?;
        store.reconcile_if_idle()?;
        Ok(store)
    }

    /// Open an existing store as it is, without reconciling: for `fsck` and `prune`, which
    /// report what a crash left (see [`crate::leftovers`]) and remove it themselves under
    /// the store lock. Every other command uses [`Store::open`].
    pub fn open_unreconciled(root: &Path) -> Result<Store> {
        let layout = Layout::new(root);
        let config: StoreConfig = read_json_opt(&layout.config())?.ok_or(Error::NoStore {
            path: root.to_owned(),
        })?;
        if config.format != FORMAT && config.format != FORMAT_UNINDEXED {
            return Err(Error::Corrupt {
                path: layout.config(),
                message: format!(
                    "store format {} is not supported (this agentbox reads formats {FORMAT_UNINDEXED} and {FORMAT})",
                    config.format
                ),
            });
        }
        let index_ready = std::sync::atomic::AtomicBool::new(config.format == FORMAT);
        let backend = backend::open(
            config.backend,
            root,
            config.max_depth,
            config.overlay_xattrs,
        );
        Ok(Store {
            layout,
            config,
            backend,
            index_ready,
        })
    }

    pub fn root(&self) -> &Path {
        self.layout.root()
    }
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }
    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }
    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    // ---- locks -------------------------------------------------------------------------

    /// The store lock, with this holder's intent marker (see [`crate::inflight`]).
    pub(crate) fn lock_store(&self, mode: Mode, doing: &str) -> Result<StoreLock> {
        let mut held = self.lock_store_unsettled(mode, doing)?;
        held.settle()?;
        Ok(held)
    }

    /// [`Store::lock_store`] with the marker not yet durable (see
    /// [`StoreLock::marked`] for what the holder must do).
    fn lock_store_unsettled(&self, mode: Mode, doing: &str) -> Result<StoreLock> {
        let lock = FileLock::acquire(&self.layout.lock(), mode, "the store", doing)?;
        StoreLock::marked(&self.layout, lock)
    }

    /// Hold the store lock shared while staging data for a later `create_env`: a staged
    /// directory in `tmp/` is otherwise fair game for another process's reconcile (which
    /// clears `tmp/` whenever no operation holds the lock).
    pub fn hold(&self, doing: &str) -> Result<StoreLock> {
        self.lock_store(Mode::Shared, doing)
    }

    /// Take the single-writer lock of `env` (plus the shared store lock).
    pub(crate) fn lock_env(&self, env: &str, doing: &str) -> Result<EnvGuard> {
        let mut guard = self.lock_env_unsettled(env, doing)?;
        guard.settle()?;
        Ok(guard)
    }

    /// [`Store::lock_env`] with the store marker perhaps not durable yet: the holder settles
    /// it ([`EnvGuard::settle`]) before it makes anything durable, or makes a commit of the
    /// filesystem's transaction its first durable step ([`EnvGuard::carried`]).
    fn lock_env_unsettled(&self, env: &str, doing: &str) -> Result<EnvGuard> {
        let (store, lock) = self.lock_env_with(Mode::Shared, env, doing)?;
        let mut guard = EnvGuard { _env: lock, store };
        let state = self.env(env)?;
        if let Some(target) = state.checkout_pending.clone() {
            guard.settle()?;
            self.finish_checkout(state, &self.node(&target)?)?;
        }
        Ok(guard)
    }

    /// Rebuild the working tree for `node` and move HEAD there (env lock held). The intent
    /// is recorded first so an interruption is finished by the next writer.
    fn finish_checkout(&self, mut state: EnvState, node: &Node) -> Result<EnvState> {
        if state.checkout_pending.as_deref() != Some(node.id.as_str()) {
            state.checkout_pending = Some(node.id.clone());
            self.write_env(&state)?;
        }
        let chain = self.chain(node)?;
        let dirs = self.work_dirs(&state);
        self.backend.reset_work(&dirs, &chain)?;
        // The work area is new: its limit goes on before the box can write to it.
        if let Some(limit) = &state.disk_limit {
            crate::disk::apply(self.backend.kind(), &dirs.work, limit)?;
        }
        failpoint::hit("checkout:after-reset");
        state.head = node.id.clone();
        state.checkout_pending = None;
        self.write_env(&state)?;
        Ok(state)
    }

    /// Exclusive store lock plus the writer lock of `env` (delete, retain).
    pub(crate) fn lock_env_exclusive(
        &self,
        env: &str,
        doing: &str,
    ) -> Result<(StoreLock, FileLock)> {
        let (mut store, lock) = self.lock_env_with(Mode::Exclusive, env, doing)?;
        store.settle()?;
        Ok((store, lock))
    }

    /// The store lock in `store_mode` (its marker not yet settled), then the environment's
    /// single-writer lock (never waiting: a second writer is told who holds it).
    fn lock_env_with(
        &self,
        store_mode: Mode,
        env: &str,
        doing: &str,
    ) -> Result<(StoreLock, FileLock)> {
        let store = self.lock_store_unsettled(store_mode, doing)?;
        if !self.layout.env_state(env).exists() {
            return Err(Error::UnknownEnv { name: env.into() });
        }
        let lock = FileLock::acquire(
            &self.layout.env_lock(env),
            Mode::TryExclusive,
            &format!("environment {env:?}"),
            doing,
        )?;
        Ok((store, lock))
    }

    // ---- nodes and layers --------------------------------------------------------------

    /// Read one node file (tombstones included).
    pub(crate) fn read_node_file(&self, id: &str) -> Result<Option<Node>> {
        Ok(read_json_opt(&self.layout.node(id))?)
    }

    /// A live node by full id.
    pub fn node(&self, id: &str) -> Result<Node> {
        match self.read_node_file(id)? {
            Some(n) if n.deleted.is_none() => Ok(n),
            _ => Err(Error::UnknownRef {
                reference: id.into(),
            }),
        }
    }

    /// Every node file, tombstones included, keyed by id.
    pub(crate) fn all_node_files(&self) -> Result<BTreeMap<String, Node>> {
        let mut out = BTreeMap::new();
        for entry in fs_err::read_dir(self.layout.nodes())? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            if !id::is_full_id(id) {
                continue;
            }
            // A node deleted between read_dir and read is simply gone.
            if let Some(node) = self.read_node_file(id)? {
                out.insert(id.to_owned(), node);
            }
        }
        Ok(out)
    }

    /// Every live node, keyed by id, with parents resolved through pending tombstones.
    pub fn nodes(&self) -> Result<BTreeMap<String, Node>> {
        let files = self.all_node_files()?;
        let mut live: BTreeMap<String, Node> = files
            .iter()
            .filter(|(_, n)| n.deleted.is_none())
            .map(|(k, n)| (k.clone(), n.clone()))
            .collect();
        for node in live.values_mut() {
            let mut parent = node.parent.clone();
            // Follow tombstones a concurrent or interrupted deletion left.
            let mut hops = 0;
            while let Some(p) = parent.clone() {
                match files.get(p.as_str()) {
                    Some(n) if n.deleted.is_some() && hops < files.len() => {
                        parent = n.deleted.as_ref().and_then(|t| t.reparent_to.clone());
                        hops += 1;
                    }
                    _ => break,
                }
            }
            node.parent = parent;
        }
        Ok(live)
    }

    pub(crate) fn layer_record(&self, id: &str) -> Result<LayerRecord> {
        read_json_opt(&self.layout.layer_record(id))?.ok_or_else(|| Error::Corrupt {
            path: self.layout.layer_record(id),
            message: "layer record missing (run `agentbox fsck`)".into(),
        })
    }

    /// The chain of layers (top first) whose union is `node`'s tree.
    pub fn chain(&self, node: &Node) -> Result<Vec<LayerRecord>> {
        let mut chain = Vec::new();
        let mut next = Some(node.layer.clone());
        while let Some(id) = next {
            let rec = self.layer_record(&id)?;
            next = rec.parent.clone();
            chain.push(rec);
            if chain.len() > 4096 {
                return Err(Error::Corrupt {
                    path: self.layout.layer_record(&id),
                    message: "layer chain loops".into(),
                });
            }
        }
        Ok(chain)
    }

    /// Directories of a node's chain, top first (what an overlay stacks).
    pub fn chain_dirs(&self, node: &Node) -> Result<Vec<PathBuf>> {
        Ok(self
            .chain(node)?
            .iter()
            .map(|l| self.backend.layer_dir(&l.id))
            .collect())
    }

    // ---- environments ------------------------------------------------------------------

    pub fn env(&self, name: &str) -> Result<EnvState> {
        read_json_opt(&self.layout.env_state(name))?.ok_or_else(|| Error::UnknownEnv {
            name: name.to_owned(),
        })
    }

    pub fn envs(&self) -> Result<Vec<EnvState>> {
        let mut out = Vec::new();
        for entry in fs_err::read_dir(self.layout.envs())? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(state) = read_json_opt::<EnvState>(&self.layout.env_state(&name))? {
                out.push(state);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The environment whose mount point contains `path`, if any.
    pub fn env_for_path(&self, path: &Path) -> Result<Option<EnvState>> {
        let path = fs_err::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        Ok(self
            .envs()?
            .into_iter()
            .filter(|e| e.mountpoint.as_ref().is_some_and(|m| path.starts_with(m)))
            .max_by_key(|e| e.mountpoint.as_ref().map_or(0, |m| m.as_os_str().len())))
    }

    /// Claim environment name `name` by creating its directory: exactly one creator wins,
    /// the others get [`Error::EnvExists`].
    pub(crate) fn claim_env_dir(&self, name: &str) -> Result<PathBuf> {
        let env_dir = self.layout.env_dir(name);
        fs_err::create_dir_all(self.layout.envs())?;
        match std::fs::create_dir(&env_dir) {
            Ok(()) => Ok(env_dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(Error::EnvExists { name: name.into() })
            }
            Err(e) => Err(Error::Io(io_at(&env_dir, e))),
        }
    }

    pub(crate) fn write_env(&self, state: &EnvState) -> Result<()> {
        // The commit point of every commit and checkout: one journal commit where the
        // filesystem allows (see `backend::write_json_durable`).
        backend::write_json_durable(&self.layout.env_state(&state.name), state)
    }

    pub(crate) fn work_dirs(&self, state: &EnvState) -> WorkDirs {
        WorkDirs {
            base: state.box_base.clone(),
            ..self
                .layout
                .work_dirs(&state.name, state.mountpoint.as_deref())
        }
    }

    /// Check the name of a new environment: valid (see [`names::validate_env`]) and, when
    /// all hex, not a prefix of an existing node's id.
    pub fn check_new_env_name(&self, name: &str) -> Result<()> {
        names::validate_env("environment", name)?;
        self.check_not_id_prefix("environment", name)?;
        Ok(())
    }

    /// Create environment `name` whose working tree is mounted at `mountpoint` (none for a
    /// box), with a first node holding `source`.
    pub fn create_env(
        &self,
        name: &str,
        mountpoint: Option<&Path>,
        source: Source,
        message: &str,
    ) -> Result<EnvState> {
        self.check_new_env_name(name)?;
        let _store = self.lock_store(Mode::Shared, "create")?;
        let env_dir = self.claim_env_dir(name)?;
        let _lock = FileLock::acquire(
            &self.layout.env_lock(name),
            Mode::TryExclusive,
            &format!("environment {name:?}"),
            "create",
        )?;
        let result = self.create_env_locked(name, mountpoint, source, message);
        if result.is_err() {
            // Nothing half-made stays behind: the first node was never acknowledged.
            let dirs = self.layout.work_dirs(name, mountpoint);
            let _ = self.backend.unmount(&dirs);
            let _ = self.backend.remove_work(&dirs);
            let _ = fs_err::remove_dir_all(&env_dir);
        }
        result
    }

    fn create_env_locked(
        &self,
        name: &str,
        mountpoint: Option<&Path>,
        source: Source,
        message: &str,
    ) -> Result<EnvState> {
        let mountpoint = self.claim_mountpoint(mountpoint)?;
        let layer_id = new_id();
        let record = match source {
            Source::Empty => self.backend.empty_layer(&layer_id)?,
            Source::Dir(dir) => self.backend.layer_from_dir(&dir, &layer_id)?,
            Source::Staged(dir) => self.backend.layer_from_staged(&dir, &layer_id)?,
        };
        write_json_unsynced(&self.layout.layer_record(&layer_id), &record)?;
        failpoint::hit("create:after-layer");
        let node = Node {
            id: NodeId::from_trusted(layer_id.as_str()),
            parent: None,
            env: name.to_owned(),
            seq: 0,
            layer: layer_id.clone(),
            message: message.to_owned(),
            command: None,
            created: Utc::now(),
            metadata: BTreeMap::new(),
            deleted: None,
            detached: None,
        };
        let entry = self.index_id(&node.id)?;
        write_json_unsynced(&self.layout.node(&node.id), &node)?;
        let mut durable = vec![
            self.layout.layer_record(&layer_id),
            self.layout.node(&node.id),
        ];
        durable.extend(entry);
        self.backend.make_durable(&durable)?;
        let state = EnvState {
            name: name.to_owned(),
            created: node.created,
            mountpoint,
            head: node.id.clone(),
            next_seq: 1,
            tips: BTreeSet::from([node.id.as_str().to_owned()]),
            tags: BTreeMap::new(),
            checkout_pending: None,
            box_base: None,
            disk_limit: None,
        };
        let dirs = self.work_dirs(&state);
        self.backend.reset_work(&dirs, &[record])?;
        self.write_env(&state)?;
        Ok(state)
    }

    /// Limit the disk a box's work area may use to `bytes` (see [`crate::disk`]): recorded
    /// in its state and applied now and after every checkout. Refused, with what the
    /// filesystem lacks, where it cannot be enforced; refused for an environment with a
    /// mount point (only boxes have one work area that is all theirs).
    pub fn set_disk_limit(&self, env: &str, bytes: u64) -> Result<crate::disk::DiskLimit> {
        crate::disk::check(self.backend.kind(), self.layout.root())?;
        let _g = self.lock_env(env, "limit the disk of")?;
        let mut state = self.env(env)?;
        if state.mountpoint.is_some() {
            return Err(Error::Refused {
                action: "limit the disk of",
                id: env.to_owned(),
                reason: "only a box's work area can be limited".to_owned(),
            });
        }
        let project = match self.backend.kind() {
            crate::BackendKind::Btrfs => 0,
            crate::BackendKind::Layers => {
                let taken: Vec<u32> = self
                    .envs()?
                    .iter()
                    .filter(|e| e.name != env)
                    .filter_map(|e| e.disk_limit.map(|l| l.project))
                    .collect();
                crate::disk::project_for(self.layout.root(), env, &taken)
            }
        };
        let limit = crate::disk::DiskLimit { bytes, project };
        crate::disk::apply(self.backend.kind(), &self.work_dirs(&state).work, &limit)?;
        state.disk_limit = Some(limit);
        self.write_env(&state)?;
        Ok(limit)
    }

    /// Whether disk limits can be set on this store (see [`Store::set_disk_limit`]); the
    /// error says what the filesystem lacks.
    pub fn check_disk_limit(&self) -> Result<()> {
        crate::disk::check(self.backend.kind(), self.layout.root())
    }

    /// The disk used by box `env`'s work area against its limit; `None` without a limit.
    pub fn disk_usage(&self, env: &str) -> Result<Option<crate::disk::DiskUsage>> {
        let state = self.env(env)?;
        let Some(limit) = &state.disk_limit else {
            return Ok(None);
        };
        let dirs = self.work_dirs(&state);
        crate::disk::usage(self.backend.kind(), &dirs.work, limit).map(Some)
    }

    /// Canonical form of a new environment's mount point, refused when another environment
    /// is mounted there.
    fn claim_mountpoint(&self, mountpoint: Option<&Path>) -> Result<Option<PathBuf>> {
        let Some(mountpoint) = mountpoint else {
            return Ok(None);
        };
        fs_err::create_dir_all(mountpoint)?;
        let mountpoint = fs_err::canonicalize(mountpoint)?;
        if let Some(other) = self
            .envs()?
            .into_iter()
            .find(|e| e.mountpoint.as_ref() == Some(&mountpoint))
        {
            return Err(Error::Refused {
                action: "create an environment at",
                id: mountpoint.display().to_string(),
                reason: format!("environment {:?} is already mounted there", other.name),
            });
        }
        Ok(Some(mountpoint))
    }

    /// Fork: a new environment whose HEAD is an existing node (no data is copied).
    /// `reference` is resolved in `from_env` (see [`Store::resolve`]).
    pub fn fork_env(
        &self,
        from_env: &str,
        reference: &str,
        name: &str,
        mountpoint: Option<&Path>,
    ) -> Result<EnvState> {
        let _store = self.lock_store(Mode::Shared, "fork")?;
        let id = self.resolve(from_env, reference)?;
        self.fork_locked(&id, name, mountpoint)
    }

    /// Fork from any node of the store, named by a store ref, an id or an id prefix (see
    /// [`Store::resolve_node`]), whatever environment made it and whether or not that
    /// environment still exists: a checkpoint (`checkpoints/<project>/<name>`) or any other
    /// detached node. O(1) in the size of the tree (an overlay over the node's chain on
    /// `layers`, a writable snapshot on `btrfs`); the new environment's history starts at
    /// the node (with the node's ancestors, when it has any).
    pub fn fork_node(
        &self,
        reference: &str,
        name: &str,
        mountpoint: Option<&Path>,
    ) -> Result<EnvState> {
        let _store = self.lock_store(Mode::Shared, "fork")?;
        let id = self.resolve_node(reference)?;
        self.fork_locked(&id, name, mountpoint)
    }

    /// A new environment `name` whose HEAD is node `id` (store lock held shared, so the node
    /// cannot be deleted in between).
    fn fork_locked(&self, id: &str, name: &str, mountpoint: Option<&Path>) -> Result<EnvState> {
        self.check_new_env_name(name)?;
        let node = self.node(id)?;
        let env_dir = self.claim_env_dir(name)?;
        let result = (|| {
            let state = EnvState {
                name: name.to_owned(),
                created: Utc::now(),
                mountpoint: self.claim_mountpoint(mountpoint)?,
                head: node.id.clone(),
                next_seq: 1,
                // The fork's history is the node's ancestors until it commits.
                tips: BTreeSet::new(),
                tags: BTreeMap::new(),
                checkout_pending: None,
                box_base: None,
                disk_limit: None,
            };
            self.backend
                .reset_work(&self.work_dirs(&state), &self.chain(&node)?)?;
            self.write_env(&state)?;
            Ok(state)
        })();
        if result.is_err() {
            let _ = fs_err::remove_dir_all(&env_dir);
        }
        result
    }

    /// Remove an environment: unmount, drop its working area and state. Its nodes stay until
    /// GC finds them unreferenced. The working files are deleted before this returns (see
    /// [`Store::discard_env`] for a removal that does not wait for them).
    pub fn remove_env(&self, name: &str) -> Result<()> {
        if let Some(d) = self.discard_env(name)? {
            self.remove_discarded(d.entry())?;
        }
        Ok(())
    }

    /// Mount an environment's working tree again (after a reboot).
    pub fn mount_env(&self, name: &str) -> Result<EnvState> {
        let state = self.env(name)?;
        let _g = self.lock_env(name, "mount")?;
        let head = self.node(&state.head)?;
        let dirs = self.work_dirs(&state);
        self.backend.mount(&dirs, &self.chain(&head)?)?;
        // A box's work area lost in a crash is made anew by the mount: limit it again
        // (idempotent when it was there all along).
        if let Some(limit) = &state.disk_limit {
            crate::disk::apply(self.backend.kind(), &dirs.work, limit)?;
        }
        Ok(state)
    }

    pub fn unmount_env(&self, name: &str) -> Result<EnvState> {
        let state = self.env(name)?;
        let _g = self.lock_env(name, "unmount")?;
        self.backend.unmount(&self.work_dirs(&state))?;
        Ok(state)
    }

    // ---- commit and checkout -----------------------------------------------------------

    /// Paths changed in `env`'s working tree since its last commit or checkout (relative,
    /// with whether each is a directory).
    pub fn changed_paths(&self, env: &str) -> Result<Vec<(PathBuf, bool)>> {
        self.changed_paths_hinted(env, None)
    }

    /// [`Store::changed_paths`] looking only at the paths of `hint` (and what they imply),
    /// when the hint was made against the marks the last commit left
    /// ([`Store::marks_version`]); otherwise at the whole working layer. The caller vouches
    /// that no other path changed since those marks (a box's supervisor knows it from its
    /// watcher of the layer).
    pub fn changed_paths_hinted(
        &self,
        env: &str,
        hint: Option<&crate::backend::ChangeHint>,
    ) -> Result<Vec<(PathBuf, bool)>> {
        let state = self.env(env)?;
        self.backend.changed_paths(&self.work_dirs(&state), hint)
    }

    /// The version of the marks `env`'s next change check compares with: a hint made
    /// against it is used while no commit or reset came in between.
    pub fn marks_version(&self, env: &str) -> Result<Option<crate::backend::MarksVersion>> {
        let state = self.env(env)?;
        self.backend.marks_version(&self.work_dirs(&state))
    }

    /// A read-only view of `env`'s working tree on the host (for a box, its layer: HEAD's
    /// chain with the working changes over it), mounted while the view lives.
    pub fn working_view(&self, env: &str) -> Result<crate::backend::WorkingView> {
        let state = self.env(env)?;
        let head = self.node(&state.head)?;
        self.backend
            .working_view(&self.work_dirs(&state), &self.chain(&head)?)
    }

    /// Record `base` as the tree box `env`'s layers are mounted over ([`EnvState::box_base`]),
    /// when it is not recorded already. Called by the box's runtime before it mounts them.
    pub fn record_box_base(&self, env: &str, base: &crate::backend::BoxBase) -> Result<()> {
        if self.env(env)?.box_base.as_ref() == Some(base) {
            return Ok(());
        }
        let _g = self.lock_env(env, "record the box's base")?;
        let mut state = self.env(env)?;
        state.box_base = Some(base.clone());
        self.write_env(&state)
    }

    /// The overlay layers a box runs on (HEAD's chain and the working directories).
    pub fn box_layers(&self, env: &str) -> Result<crate::backend::BoxLayers> {
        let state = self.env(env)?;
        let head = self.node(&state.head)?;
        self.backend
            .box_layers(&self.work_dirs(&state), &self.chain(&head)?)
    }

    /// Freeze the working tree of `env` as a child of HEAD and move HEAD to it.
    pub fn commit(&self, env: &str, opts: CommitOpts) -> Result<Node> {
        let mut timer = agentbox_core::timing::Timer::start("commit");
        let mut guard = self.lock_env_unsettled(env, "commit")?;
        let mut state = self.env(env)?;
        let head = self.node(&state.head)?;
        let chain = self.chain(&head)?;
        let id = NodeId::new();
        timer.lap("prepare");
        let dirs = self.work_dirs(&state);
        if let Some(record) = self.backend.record_ahead(&dirs, &chain, &id) {
            return self.commit_ahead(
                &mut guard, state, &head, &chain, &dirs, &id, &record, opts, &mut timer,
            );
        }
        guard.settle()?;
        let record = self.backend.commit(&dirs, &chain, &id)?;
        timer.lap("backend");
        let node = match self.commit_point(&mut state, &head, &id, &record, opts, &mut timer) {
            Ok(node) => node,
            Err(e) => {
                // Unless HEAD moved after all (an error after the rename of env.json), the
                // working tree gets back what the backend took for the layer, which no HEAD
                // names (garbage for GC). The commit's own error is what to report.
                let passed = self.env(env).is_ok_and(|s| s.head == id);
                if !passed && self.backend.abandon(&dirs, &id).is_ok() && dirs.mountpoint.is_some()
                {
                    let _ = self.backend.mount(&dirs, &chain);
                }
                return Err(e);
            }
        };
        failpoint::hit("commit:after-head");
        self.backend.committed(&dirs, &record)?;
        timer.lap("head");
        Ok(node)
    }

    /// The store's half of a commit, after the backend made layer `record`: its record,
    /// the node and its index entry made durable, then HEAD moved (the commit point).
    fn commit_point(
        &self,
        state: &mut EnvState,
        head: &Node,
        id: &NodeId,
        record: &LayerRecord,
        opts: CommitOpts,
        timer: &mut agentbox_core::timing::Timer,
    ) -> Result<Node> {
        failpoint::hit("commit:after-layer");
        let (node, durable) = self.stage_node(state, head, id, record, opts)?;
        timer.lap("metadata");
        self.backend.make_durable(&durable)?;
        timer.lap("durable");
        failpoint::hit("commit:after-node");
        self.move_head(state, head, &node)?;
        Ok(node)
    }

    /// A commit whose backend makes its layer durable by a step that also makes every
    /// file written before it durable (a btrfs snapshot commits the filesystem's
    /// transaction; see [`Backend::record_ahead`]): the layer's record, the node and its
    /// index entry are written first, their data written out without a device flush, and
    /// the layer's creation makes them durable with it — one flush fewer per commit. A crash
    /// before HEAD moves leaves an unacknowledged node (and perhaps a record without its
    /// layer), which recovery removes as it does for the other order. The same step makes
    /// the store marker durable, so it costs no flush of its own either (`guard` is still
    /// unsettled: nothing was made durable since the marker was created).
    #[allow(clippy::too_many_arguments)]
    fn commit_ahead(
        &self,
        guard: &mut EnvGuard,
        mut state: EnvState,
        head: &Node,
        chain: &[LayerRecord],
        dirs: &WorkDirs,
        id: &NodeId,
        record: &LayerRecord,
        opts: CommitOpts,
        timer: &mut agentbox_core::timing::Timer,
    ) -> Result<Node> {
        let (node, staged) = self.stage_node(&state, head, id, record, opts)?;
        timer.lap("metadata");
        let made = backend::write_out(&staged).and_then(|()| self.backend.commit(dirs, chain, id));
        if let Err(e) = made {
            // Nothing names the staged files yet: they go, and the commit's error is the
            // one to report.
            for f in &staged {
                let _ = fs_err::remove_file(f);
            }
            return Err(e);
        }
        guard.carried();
        timer.lap("backend");
        failpoint::hit("commit:after-layer");
        self.move_head(&mut state, head, &node)?;
        failpoint::hit("commit:after-head");
        self.backend.committed(dirs, record)?;
        timer.lap("head");
        Ok(node)
    }

    /// Write layer `record`'s record, the index entry and the file of the node that names
    /// it as a child of `head` (none durable yet); returns the node and the files written.
    fn stage_node(
        &self,
        state: &EnvState,
        head: &Node,
        id: &NodeId,
        record: &LayerRecord,
        opts: CommitOpts,
    ) -> Result<(Node, Vec<PathBuf>)> {
        write_json_unsynced(&self.layout.layer_record(id), record)?;
        failpoint::hit("commit:after-record");
        let node = Node {
            id: id.clone(),
            parent: Some(head.id.clone()),
            env: state.name.clone(),
            seq: state.next_seq,
            layer: id.as_str().to_owned(),
            message: opts.message,
            command: opts.command,
            created: Utc::now(),
            metadata: opts.metadata,
            deleted: None,
            detached: None,
        };
        // The id's index entry before the node file: a node is never without it.
        let entry = self.index_id(&node.id)?;
        failpoint::hit("commit:after-index");
        write_json_unsynced(&self.layout.node(&node.id), &node)?;
        let mut files = vec![
            self.layout.layer_record(&node.layer),
            self.layout.node(&node.id),
        ];
        files.extend(entry);
        Ok((node, files))
    }

    /// The commit point: HEAD, the tips and the next sequence number move together.
    fn move_head(&self, state: &mut EnvState, head: &Node, node: &Node) -> Result<()> {
        state.tips.remove(head.id.as_str());
        state.tips.insert(node.id.as_str().to_owned());
        state.head = node.id.clone();
        state.next_seq += 1;
        self.write_env(state)
    }

    /// Make `env`'s working tree hold the tree of `reference` and move HEAD there. Resolution
    /// and action happen under the environment's lock, so the ref cannot move in between.
    pub fn checkout(&self, env: &str, reference: &str) -> Result<Node> {
        let _g = self.lock_env(env, "checkout")?;
        let state = self.env(env)?;
        let node = self.node(&self.resolve_in(&state, reference)?)?;
        self.finish_checkout(state, &node)?;
        Ok(node)
    }

    // ---- refs --------------------------------------------------------------------------

    /// Resolve a reference in the context of `env`: `HEAD`, `HEAD~N`, a tag of the
    /// environment, a store-wide ref `ns/name`, a full id, or a unique id prefix (≥ 4 hex).
    pub fn resolve(&self, env: &str, reference: &str) -> Result<NodeId> {
        let state = self.env(env)?;
        self.resolve_in(&state, reference)
    }

    pub(crate) fn resolve_in(&self, state: &EnvState, reference: &str) -> Result<NodeId> {
        let unknown = || Error::UnknownRef {
            reference: reference.to_owned(),
        };
        if reference == "HEAD" {
            return Ok(state.head.clone());
        }
        if let Some(n) = head_steps(reference) {
            let n = n.ok_or_else(unknown)?;
            // Parent by parent: costs N node reads, whatever the size of the store.
            let mut id = state.head.clone();
            for _ in 0..n {
                id = self
                    .node_following(id.as_str())?
                    .and_then(|node| node.parent)
                    .ok_or_else(unknown)?;
            }
            // The last parent may itself be mid-deletion: name what it moves to.
            return self
                .node_following(id.as_str())?
                .map(|n| n.id)
                .ok_or_else(unknown);
        }
        if let Some(id) = state.tags.get(reference) {
            return Ok(NodeId::from_trusted(id.as_str()));
        }
        self.resolve_node(reference)
    }

    /// Resolve a reference outside any environment: a store-wide ref `ns/…/name`, a full
    /// id, or a unique id prefix (≥ 4 hex).
    pub fn resolve_node(&self, reference: &str) -> Result<NodeId> {
        let unknown = || Error::UnknownRef {
            reference: reference.to_owned(),
        };
        if reference.contains('/') {
            if let Some(id) = self.get_ref(reference)? {
                return Ok(id);
            }
            return Err(unknown());
        }
        if id::is_full_id(reference) {
            return match self.read_node_file(reference)? {
                Some(n) if n.deleted.is_none() => Ok(n.id),
                _ => Err(unknown()),
            };
        }
        if id::is_hex(reference) && reference.len() >= id::MIN_PREFIX {
            let matches = self.ids_with_prefix(reference)?;
            return match matches.len() {
                0 => Err(unknown()),
                1 => Ok(NodeId::from_trusted(
                    matches.into_iter().next().expect("one match"),
                )),
                _ => Err(Error::AmbiguousRef {
                    reference: reference.to_owned(),
                    candidates: matches,
                }),
            };
        }
        Err(unknown())
    }

    /// Set or move tag `name` of `env` to `reference`.
    pub fn set_tag(&self, env: &str, name: &str, reference: &str) -> Result<NodeId> {
        names::validate("tag", name)?;
        let _g = self.lock_env(env, "tag")?;
        let mut state = self.env(env)?;
        let id = self.resolve_in(&state, reference)?;
        state.tags.insert(name.to_owned(), id.as_str().to_owned());
        self.write_env(&state)?;
        Ok(id)
    }

    /// Delete tag `name` of `env`; returns the node it pointed at.
    pub fn delete_tag(&self, env: &str, name: &str) -> Result<NodeId> {
        let _g = self.lock_env(env, "tag")?;
        let mut state = self.env(env)?;
        let id = state.tags.remove(name).ok_or_else(|| Error::UnknownRef {
            reference: name.to_owned(),
        })?;
        self.write_env(&state)?;
        Ok(NodeId::from_trusted(id))
    }

    /// Store-wide named ref `ns/name` or `ns/dir/…/name` (checkpoints:
    /// `checkpoints/<project key>/<name>`, see [`names::validate_ref`]), `None` when unset.
    pub fn get_ref(&self, full: &str) -> Result<Option<NodeId>> {
        let path = self.ref_path(full)?;
        match std::fs::read_to_string(&path) {
            Ok(s) => Ok(Some(NodeId::from_trusted(s.trim()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::Io(io_at(&path, e))),
        }
    }

    /// Point store-wide ref `full` at node `id` (or remove it with `None`). A ref is a
    /// root for GC and retention: the node it names, with its ancestors and its whole
    /// layer chain, stays until the ref goes.
    pub fn set_ref(&self, full: &str, id: Option<&str>) -> Result<()> {
        let path = self.ref_path(full)?;
        let _store = self.lock_store(Mode::Shared, "set ref")?;
        match id {
            Some(id) => {
                self.node(id)?;
                self.write_ref_locked(&path, id)?;
            }
            None => match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::Io(io_at(&path, e))),
            },
        }
        Ok(())
    }

    /// Write ref file `path` (from [`Store::ref_path`]) naming `id`, durably (store lock
    /// held, the node checked to exist and durable).
    pub(crate) fn write_ref_locked(&self, path: &Path, id: &str) -> Result<()> {
        // Directories made for the ref are made durable too: a ref that survives a crash
        // must be reachable by its path.
        let root = self.layout.refs();
        let mut missing: Vec<&Path> = path
            .ancestors()
            .skip(1)
            .take_while(|a| a.starts_with(&root) && *a != root.as_path())
            .filter(|a| !a.is_dir())
            .collect();
        missing.reverse();
        for dir in missing {
            match std::fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::Io(io_at(dir, e))),
            }
            if let Some(parent) = dir.parent() {
                atomic::sync_dir(parent)?;
            }
        }
        atomic::write_atomic(path, format!("{id}\n").as_bytes())?;
        Ok(())
    }

    /// Every store-wide ref, `ns/…/name` → node id. Files under `refs/` whose path is not
    /// a valid ref name (see [`names::validate_ref`]) are not refs and are skipped.
    pub fn refs(&self) -> Result<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        let root = self.layout.refs();
        if !root.exists() {
            return Ok(out);
        }
        // (directory, its ref-name prefix); refs are at most 8 components deep.
        let mut dirs = vec![(root, String::new())];
        while let Some((dir, prefix)) = dirs.pop() {
            for entry in fs_err::read_dir(&dir)? {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if atomic::is_tmp_name(&name) {
                    continue;
                }
                let full = if prefix.is_empty() {
                    name
                } else {
                    format!("{prefix}/{name}")
                };
                if entry.file_type()?.is_dir() {
                    if full.split('/').count() < 8 {
                        dirs.push((entry.path(), full));
                    }
                    continue;
                }
                if names::validate_ref(&full).is_err() {
                    continue;
                }
                if let Some(id) = self.get_ref(&full)? {
                    out.insert(full, id.into_string());
                }
            }
        }
        Ok(out)
    }

    pub(crate) fn ref_path(&self, full: &str) -> Result<PathBuf> {
        let mut path = self.layout.refs();
        path.extend(names::validate_ref(full)?);
        Ok(path)
    }

    // ---- deletion ----------------------------------------------------------------------

    /// Delete a node from the history; its children are re-parented to its parent. Refuses
    /// the HEAD of any environment and the last node of the store.
    pub fn delete_node(&self, env: &str, reference: &str) -> Result<Node> {
        let (_store, _env) = self.lock_env_exclusive(env, "delete")?;
        let state = self.env(env)?;
        let id = self.resolve_in(&state, reference)?;
        let node = self.node(&id)?;
        for other in self.envs()? {
            if other.head == id {
                return Err(Error::Refused {
                    action: "delete",
                    id: id.into_string(),
                    reason: format!(
                        "it is the HEAD of environment {:?} (check out another node first)",
                        other.name
                    ),
                });
            }
        }
        let nodes = self.nodes()?;
        if nodes.len() <= 1 {
            return Err(Error::Refused {
                action: "delete",
                id: id.into_string(),
                reason: "it is the last node".into(),
            });
        }
        self.remove_nodes_locked(&nodes, &[id.into_string()])?;
        // Tags and store refs pointing at a deleted node would dangle: drop them.
        self.drop_refs_to(&BTreeSet::from([node.id.as_str().to_owned()]))?;
        Ok(node)
    }

    /// Remove `ids` from the history (store lock held exclusively by the caller). Each is
    /// tombstoned, its children re-parented to its nearest surviving ancestor, then removed.
    pub(crate) fn remove_nodes_locked(
        &self,
        nodes: &BTreeMap<String, Node>,
        ids: &[String],
    ) -> Result<()> {
        let doomed: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
        let survivor = |mut p: Option<NodeId>| {
            while let Some(id) = p.clone() {
                if !doomed.contains(id.as_str()) {
                    break;
                }
                p = nodes.get(id.as_str()).and_then(|n| n.parent.clone());
            }
            p
        };
        for id in ids {
            let Some(node) = nodes.get(id) else { continue };
            let mut tomb = node.clone();
            tomb.deleted = Some(Tombstone {
                reparent_to: survivor(node.parent.clone()),
            });
            write_json(&self.layout.node(id), &tomb)?;
        }
        failpoint::hit("delete:after-tombstone");
        for id in ids {
            self.finish_tombstone(id)?;
        }
        Ok(())
    }

    /// Complete a deletion whose tombstone is on disk: re-parent children, remove the file.
    pub(crate) fn finish_tombstone(&self, id: &str) -> Result<()> {
        let Some(tomb) = self.read_node_file(id)? else {
            return Ok(());
        };
        let Some(t) = tomb.deleted.clone() else {
            return Ok(());
        };
        for (cid, mut child) in self.all_node_files()? {
            if child.parent.as_deref() == Some(id) {
                child.parent = t.reparent_to.clone();
                write_json(&self.layout.node(&cid), &child)?;
            }
        }
        failpoint::hit("delete:after-reparent");
        // A branch tip that goes hands its place to the ancestor its children move to,
        // when that one is the environment's own: else that ancestor's history would no
        // longer be found from any tip.
        let heir = match &t.reparent_to {
            Some(p) => self.node_following(p.as_str())?,
            None => None,
        };
        for mut state in self.envs()? {
            if state.tips.remove(id) {
                if let Some(h) = &heir {
                    if h.in_history_of(&state.name)
                        && h.created >= state.created
                        && h.seq < state.next_seq
                    {
                        state.tips.insert(h.id.as_str().to_owned());
                    }
                }
                self.write_env(&state)?;
            }
        }
        failpoint::hit("delete:after-tips");
        self.remove_node_file(id)?;
        atomic::sync_dir(&self.layout.nodes())?;
        Ok(())
    }

    /// Drop tags and store refs that point at removed nodes.
    pub(crate) fn drop_refs_to(&self, removed: &BTreeSet<String>) -> Result<()> {
        for mut state in self.envs()? {
            let before = state.tags.len();
            state.tags.retain(|_, id| !removed.contains(id));
            if state.tags.len() != before {
                self.write_env(&state)?;
            }
        }
        for (full, id) in self.refs()? {
            if removed.contains(&id) {
                fs_err::remove_file(self.ref_path(&full)?)?;
            }
        }
        Ok(())
    }

    // ---- crash recovery ----------------------------------------------------------------

    /// Run [`Store::reconcile`] when it has something to do — an operation left its intent
    /// marker (see [`crate::inflight`]) or the store is still of format 1 — and no other
    /// process is using the store. The common case reads one small directory: opening
    /// costs the same whatever the number of nodes and environments.
    fn reconcile_if_idle(&self) -> Result<()> {
        // Without the lock: a marker that appears after this look is a live operation's,
        // none of our business; one a dead operation left stays until someone acts on it.
        if self.index_ready() && inflight::left(&self.layout)?.is_empty() {
            return Ok(());
        }
        match FileLock::acquire(
            &self.layout.lock(),
            Mode::TryExclusive,
            "the store",
            "reconcile",
        ) {
            Ok(lock) => {
                let _lock = StoreLock::unmarked(lock);
                self.reconcile().map(|_| ())
            }
            Err(agentbox_core::Error::Locked { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Environments whose commit stopped before its commit point while the backend held
    /// part of the working tree under the new layer's name (see
    /// [`Backend::unfinished_commit`]): `(environment, layer)`. Caller holds the store lock
    /// exclusively.
    pub(crate) fn interrupted_commits(&self) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for state in self.envs()? {
            let Some(layer) = self.backend.unfinished_commit(&self.work_dirs(&state))? else {
                continue;
            };
            let acknowledged = state.head.as_str() == layer
                || self
                    .read_node_file(&layer)?
                    .is_some_and(|n| n.env == state.name && n.seq < state.next_seq);
            if !acknowledged {
                out.push((state.name.clone(), layer));
            }
        }
        Ok(out)
    }

    /// Give `env` back the working files its interrupted commit of `layer` held (see
    /// [`Store::interrupted_commits`]); the layer's record and listing go with its data.
    pub(crate) fn give_back_interrupted(&self, env: &str, layer: &str) -> Result<()> {
        let state = self.env(env)?;
        self.backend.abandon(&self.work_dirs(&state), layer)?;
        let record = self.layout.layer_record(layer);
        if record.exists() {
            fs_err::remove_file(&record)?;
        }
        crate::listing::remove(&self.layout.layers(), layer)
    }

    /// Finish or undo what an interrupted operation left (caller holds the store lock
    /// exclusively): complete tombstoned deletions, remove unacknowledged commits and
    /// temporary files. Returns a description of each repair.
    pub(crate) fn reconcile(&self) -> Result<Vec<String>> {
        // Markers of operations that are over (the caller's lock is exclusive); cleared
        // once the whole pass is done, so a pass that dies runs again.
        let markers = inflight::left(&self.layout)?;
        let mut repairs = Vec::new();
        for dir in [self.layout.nodes(), self.layout.layers(), self.layout.tmp()] {
            fs_err::create_dir_all(&dir)?;
        }
        // Temporary files of interrupted atomic writes and staging areas.
        for dir in [self.layout.nodes(), self.layout.layers()] {
            for entry in fs_err::read_dir(&dir)? {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if atomic::is_tmp_name(&name) && entry.file_type()?.is_file() {
                    fs_err::remove_file(entry.path())?;
                    repairs.push(format!("removed temporary file {}", entry.path().display()));
                }
            }
        }
        // Working files an interrupted commit moved under its layer's name (a `layers`
        // handoff): given back before that layer, named by no HEAD, counts as unfinished.
        for (env, layer) in self.interrupted_commits()? {
            self.give_back_interrupted(&env, &layer)?;
            repairs.push(format!(
                "gave the working files of {env:?} back from its interrupted commit"
            ));
        }
        // Layer data without a record: a commit or import that never reached its record, or
        // a GC interrupted between removing the record and the data. Nobody else is writing
        // (the store lock is exclusive), so these are garbage.
        for entry in fs_err::read_dir(self.layout.layers())? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let half_made = name.starts_with(".tmp-")
                || (id::is_full_id(&name) && !self.layout.layer_record(&name).exists());
            if half_made && entry.file_type()?.is_dir() {
                self.backend.remove_tree(&entry.path())?;
                repairs.push(format!(
                    "removed unfinished layer {}",
                    entry.path().display()
                ));
            }
            // The listing of such a layer (written before its record).
            if let Some(lid) = crate::listing::id_of(&name) {
                if id::is_full_id(lid) && !self.layout.layer_record(lid).exists() {
                    crate::listing::remove(&self.layout.layers(), lid)?;
                }
            }
        }
        for entry in fs_err::read_dir(self.layout.tmp())? {
            let entry = entry?;
            self.backend.remove_tree(&entry.path())?;
            repairs.push(format!("removed staging {}", entry.path().display()));
        }
        let files = self.all_node_files()?;
        for (id, node) in &files {
            if node.deleted.is_some() {
                self.finish_tombstone(id)?;
                repairs.push(format!("finished deleting node {id}"));
            }
        }
        // Unacknowledged commits: seq not below the environment's next_seq.
        let envs: BTreeMap<String, EnvState> = self
            .envs()?
            .into_iter()
            .map(|e| (e.name.clone(), e))
            .collect();
        let files = self.all_node_files()?;
        let referenced: BTreeSet<&str> =
            files.values().filter_map(|n| n.parent.as_deref()).collect();
        for (id, node) in &files {
            if node.detached.is_some() {
                // No history, no sequence number. One no ref names (a derive or flatten
                // stopped before its ref, or the ref was removed since: the two look the
                // same) is not half-made data but garbage like any unreachable node: GC
                // frees it.
                continue;
            }
            let Some(env) = envs.get(&node.env) else {
                continue;
            };
            if node.seq >= env.next_seq && env.head != *id && !referenced.contains(id.as_str()) {
                self.remove_node_file(id)?;
                repairs.push(format!(
                    "removed node {id}: its commit to {:?} was interrupted",
                    node.env
                ));
            }
        }
        // Environments whose creation never completed have a directory but no env.json.
        for entry in fs_err::read_dir(self.layout.envs())? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !self.layout.env_state(&name).exists() {
                // Held lock means the creation is still running in another process.
                if FileLock::acquire(
                    &self.layout.env_lock(&name),
                    Mode::TryExclusive,
                    "env",
                    "reconcile",
                )
                .is_ok()
                {
                    let work = self.layout.env_dir(&name).join("work");
                    if work.exists() {
                        self.backend.remove_tree(&work)?;
                    }
                    fs_err::remove_dir_all(entry.path())?;
                    repairs.push(format!("removed half-created environment {name:?}"));
                }
            }
        }
        repairs.extend(self.repair_index()?);
        inflight::clear(&markers)?;
        Ok(repairs)
    }
}

impl Store {
    /// Detached nodes (see [`crate::node`]) that nothing names: no store ref, no
    /// environment's HEAD, tag or pending checkout, no child (nor a deletion about to
    /// re-parent one onto it). `files` is every node file, tombstones included.
    pub(crate) fn unnamed_detached(
        &self,
        files: &BTreeMap<String, Node>,
        envs: &[EnvState],
    ) -> Result<BTreeSet<String>> {
        let mut named: BTreeSet<String> = self.refs()?.into_values().collect();
        for e in envs {
            named.insert(e.head.as_str().to_owned());
            named.extend(e.tags.values().cloned());
            named.extend(e.checkout_pending.as_deref().map(str::to_owned));
        }
        for n in files.values() {
            named.extend(n.parent.as_deref().map(str::to_owned));
            named.extend(
                n.deleted
                    .as_ref()
                    .and_then(|t| t.reparent_to.as_deref())
                    .map(str::to_owned),
            );
        }
        Ok(files
            .iter()
            .filter(|(id, n)| n.detached.is_some() && n.deleted.is_none() && !named.contains(*id))
            .map(|(id, _)| id.clone())
            .collect())
    }
}

/// Attach a path to a raw IO error.
pub(crate) fn io_at(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// How many parents back from HEAD `reference` names: `HEAD~`/`HEAD^` one, `HEAD~N`/`HEAD^N`
/// N; `Some(None)` for a malformed count, `None` for a reference of another form (`HEAD`
/// itself included). One parser for the store and for whoever resolves on its behalf.
pub fn head_steps(reference: &str) -> Option<Option<usize>> {
    let rest = reference
        .strip_prefix("HEAD~")
        .or_else(|| reference.strip_prefix("HEAD^"))?;
    Some(if rest.is_empty() {
        Some(1)
    } else {
        rest.parse().ok()
    })
}
