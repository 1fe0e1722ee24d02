//! The store: opening, environments, commits, checkouts and the node files.
//!
//! This file holds the types, opening and locking; the rest of `impl Store` is split by
//! concern into `env`, `commit`, `refs`, `nodes` (reading and deleting) and `reconcile`.
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

mod commit;
mod env;
mod nodes;
mod reconcile;
mod refs;

pub use refs::head_steps;

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
    /// Set on an environment whose working tree a provider holds outside the store (a
    /// Docker box's container, see `crate::held`): the provider it names. Such an
    /// environment has no work area here, and its nodes' layers are held too: the store keeps
    /// its history (nodes, HEAD, tips, tags, refs) and never reads or writes its tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
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
}

/// Attach a path to a raw IO error.
pub(crate) fn io_at(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}
