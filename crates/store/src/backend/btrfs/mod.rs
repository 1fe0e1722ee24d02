//! The btrfs backend: every layer is a complete, read-only subvolume.
//!
//! Layout under the store directory:
//!
//! * `layers/<id>`: layer `id`, a read-only subvolume holding the node's whole tree;
//! * `layers/.tmp-<id>`: a layer being made (see below);
//! * `envs/<name>/work/tree` (`WorkDirs::work/tree`): the environment's writable subvolume,
//!   a writable snapshot of the layer it was last reset to, bind-mounted at the mount point;
//! * `WorkDirs::work/.tmp-tree`: a working tree being made.
//!
//! Committing is O(1): a read-only snapshot of `work/tree`. Checking out is O(1): a writable
//! snapshot of the layer. Layers share every unchanged extent with each other and with the
//! working trees. A derived node's layer ([`crate::Store::derive`]) is a writable snapshot
//! of its source's layer, edited under its temporary name, then sealed; a flattened node
//! needs no new layer (every layer is complete) and shares its source's.
//!
//! A box's commit and a derived layer are snapshots of another layer with a known set of
//! paths changed: they get a listing of those paths over that layer (`layers/<id>.paths`,
//! see [`crate::listing`]), so a derive looks at what changed since the box's checkpoint,
//! not at the whole subvolume.
//!
//! # Crash safety
//!
//! A subvolume is only ever created under a temporary name (`.tmp-<id>`, `.tmp-tree`), made
//! complete (data copied, read-only flag set) and then renamed to its final name, and the
//! parent directory is fsynced. A crash at any point leaves either no layer named `<id>` or a
//! complete one; leftovers under a temporary name are deleted by the next operation that
//! would use that name. Likewise a reset replaces `work/tree` only once its successor is
//! complete (a crash in between leaves `work/tree` missing, which [`Backend::mount`]
//! repairs from HEAD's layer).

use std::ffi::OsStr;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use agentbox_sys::btrfs;

use super::layers::LayersBackend;
use super::{Backend, BackendKind, BoxLayers, LayerRecord, WorkDirs, WorkingView};
use crate::listing::Listing;
use crate::{Error, Result};

mod commit;
mod subvol;

pub(crate) use subvol::remove_any;
use subvol::{copy_root_meta, fsync_dir, make_subvolume, sys};

const TMP_PREFIX: &str = ".tmp-";
const TREE: &str = "tree";
const TMP_TREE: &str = ".tmp-tree";

/// Snapshot backend for stores on btrfs.
#[derive(Debug)]
pub struct BtrfsBackend {
    store_dir: PathBuf,
    /// Layers filled by writing files (not by a snapshot, which commits the transaction
    /// itself) need a flush before a node names them.
    durability: super::Durability,
}

/// Whether `store_dir` (or, when it does not exist yet, its nearest existing ancestor) is
/// on btrfs, i.e. whether [`BtrfsBackend`] can be used there.
pub fn probe(store_dir: &Path) -> bool {
    store_dir
        .ancestors()
        .find(|p| p.exists())
        .map(|p| btrfs::is_btrfs(p).unwrap_or(false))
        .unwrap_or(false)
}

impl BtrfsBackend {
    /// The backend of the store at `store_dir` (which must be on btrfs, see [`probe`]).
    pub fn new(store_dir: impl Into<PathBuf>) -> BtrfsBackend {
        BtrfsBackend {
            durability: super::Durability::default(),
            store_dir: store_dir.into(),
        }
    }

    pub fn store_dir(&self) -> &Path {
        &self.store_dir
    }

    fn layers(&self) -> PathBuf {
        self.store_dir.join("layers")
    }

    fn check_id(&self, id: &str) -> Result<()> {
        if id.is_empty() || id.starts_with('.') || id.contains('/') || id.contains('\0') {
            return Err(Error::InvalidName {
                name: id.to_owned(),
                reason: "a layer id is non-empty, has no `/` and does not start with `.`"
                    .to_owned(),
            });
        }
        Ok(())
    }

    /// Check that layer `id` is free, create `layers/` if needed, and clear a leftover
    /// temporary subvolume. Returns `(layers dir, temporary name)`.
    fn prepare_layer(&self, id: &str) -> Result<(PathBuf, String)> {
        self.check_id(id)?;
        let layers = self.layers();
        fs_err::create_dir_all(&layers)?;
        let dst = layers.join(id);
        if fs_err::symlink_metadata(&dst).is_ok() {
            return Err(Error::Backend {
                path: dst,
                message: "layer already exists".to_owned(),
            });
        }
        let tmp_name = format!("{TMP_PREFIX}{id}");
        remove_any(&layers.join(&tmp_name))?;
        Ok((layers, tmp_name))
    }

    /// Seal the complete temporary subvolume `layers/<tmp_name>` as layer `id`.
    fn publish_layer(&self, layers: &Path, tmp_name: &str, id: &str) -> Result<LayerRecord> {
        let tmp = layers.join(tmp_name);
        if !btrfs::is_readonly(&tmp).map_err(sys)? {
            btrfs::set_readonly(&tmp, true).map_err(sys)?;
        }
        fs_err::rename(&tmp, layers.join(id))?;
        fsync_dir(layers)?;
        Ok(LayerRecord::new(id, None, 1))
    }

    fn top_layer(&self, chain: &[LayerRecord]) -> Result<PathBuf> {
        let Some(top) = chain.first() else {
            return Err(Error::Backend {
                path: self.layers(),
                message: "empty layer chain".to_owned(),
            });
        };
        self.check_id(&top.id)?;
        let dir = self.layer_dir(&top.id);
        if !btrfs::is_subvolume(&dir)? {
            return Err(Error::Corrupt {
                path: dir,
                message: "layer is missing or not a btrfs subvolume".to_owned(),
            });
        }
        Ok(dir)
    }

    /// The record of an environment's layer: a complete snapshot, parent of nothing.
    fn env_layer(id: &str) -> LayerRecord {
        LayerRecord::new(id, None, 1)
    }

    fn tree(dirs: &WorkDirs) -> PathBuf {
        dirs.work.join(TREE)
    }

    /// Whether the mount point currently shows the environment's working subvolume.
    fn is_mounted(dirs: &WorkDirs) -> Result<bool> {
        let tree = Self::tree(dirs);
        let Some(mountpoint) = &dirs.mountpoint else {
            return Ok(false);
        };
        let (Ok(mp), Ok(tr)) = (fs_err::metadata(mountpoint), fs_err::metadata(&tree)) else {
            return Ok(false);
        };
        Ok(mp.dev() == tr.dev() && mp.ino() == tr.ino())
    }

    /// Bind the working subvolume at the mount point (nothing to do for a box).
    fn bind(dirs: &WorkDirs) -> Result<()> {
        let Some(mountpoint) = &dirs.mountpoint else {
            return Ok(());
        };
        fs_err::create_dir_all(mountpoint)?;
        let tree = Self::tree(dirs);
        rustix::mount::mount_bind(&tree, mountpoint).map_err(|e| Error::Backend {
            path: mountpoint.clone(),
            message: format!("bind-mount {}: {}", tree.display(), std::io::Error::from(e)),
        })?;
        // See `crate::mounts::HOST_MOUNT_FLAGS`.
        rustix::mount::mount_remount(
            mountpoint,
            rustix::mount::MountFlags::BIND | crate::mounts::HOST_MOUNT_FLAGS,
            "",
        )
        .map_err(|e| Error::Backend {
            path: mountpoint.clone(),
            message: format!("making the mount nosuid,nodev: {}", std::io::Error::from(e)),
        })
    }
}

impl Backend for BtrfsBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Btrfs
    }

    fn layer_dir(&self, id: &str) -> PathBuf {
        self.layers().join(id)
    }

    fn layer_from_dir(&self, src: &Path, id: &str) -> Result<LayerRecord> {
        if !fs_err::metadata(src)?.is_dir() {
            return Err(Error::Backend {
                path: src.to_owned(),
                message: "not a directory".to_owned(),
            });
        }
        let (layers, tmp_name) = self.prepare_layer(id)?;
        let tmp = btrfs::create_subvolume(&layers, OsStr::new(&tmp_name)).map_err(sys)?;
        self.durability.mark_unsynced();
        crate::fsops::copy::copy_dir(src, &tmp, &Default::default())?;
        copy_root_meta(src, &tmp)?;
        self.publish_layer(&layers, &tmp_name, id)
    }

    fn empty_layer(&self, id: &str) -> Result<LayerRecord> {
        let (layers, tmp_name) = self.prepare_layer(id)?;
        btrfs::create_subvolume(&layers, OsStr::new(&tmp_name)).map_err(sys)?;
        self.publish_layer(&layers, &tmp_name, id)
    }

    fn reset_work(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<()> {
        let top = self.top_layer(chain)?;
        if dirs.mountpoint.is_none() {
            // A box: HEAD's layer is the overlay's read-only lower; the working state is an
            // empty upper directory. O(1), and nothing to snapshot. The work area is a
            // subvolume of its own, so that a disk limit (a qgroup, see `crate::disk`) can
            // bound exactly what the box writes.
            LayersBackend::discard_work_dirs(dirs, &|p| remove_any(p))?;
            if let (Some(env_dir), Some(name)) = (dirs.work.parent(), dirs.work.file_name()) {
                fs_err::create_dir_all(env_dir)?;
                btrfs::create_subvolume(env_dir, name).map_err(sys)?;
            }
            fs_err::create_dir_all(LayersBackend::ovl(dirs))?;
            return LayersBackend::fresh_upper_from(dirs, &top);
        }
        self.unmount(dirs)?;
        fs_err::create_dir_all(&dirs.work)?;
        let tmp = dirs.work.join(TMP_TREE);
        remove_any(&tmp)?;
        btrfs::snapshot(&top, &dirs.work, OsStr::new(TMP_TREE), false).map_err(sys)?;
        let tree = Self::tree(dirs);
        remove_any(&tree)?;
        fs_err::rename(&tmp, &tree)?;
        fsync_dir(&dirs.work)?;
        Self::bind(dirs)
    }

    /// An environment's commit is one snapshot, and creating a snapshot commits the
    /// filesystem's transaction: whatever the store wrote (and wrote out) before is durable
    /// with it.
    fn record_ahead(
        &self,
        dirs: &WorkDirs,
        _chain: &[LayerRecord],
        id: &str,
    ) -> Option<LayerRecord> {
        dirs.mountpoint.as_ref().map(|_| Self::env_layer(id))
    }

    fn commit(&self, dirs: &WorkDirs, chain: &[LayerRecord], id: &str) -> Result<LayerRecord> {
        if dirs.mountpoint.is_none() {
            return self.commit_box(dirs, chain, id);
        }
        let tree = Self::tree(dirs);
        if !btrfs::is_subvolume(&tree)? {
            return Err(Error::Corrupt {
                path: tree,
                message: "working tree is missing or not a btrfs subvolume".to_owned(),
            });
        }
        let (layers, _) = self.prepare_layer(id)?;
        // One atomic read-only snapshot, made under its final name: it holds the tree as it
        // was at one instant, whatever other processes keep writing, and it exists whole or
        // not at all (a crash leaves at most a layer without a record, which reconcile
        // frees). Creating it commits the btrfs transaction, so it is already durable; a
        // temporary name plus rename would force a second transaction commit.
        btrfs::snapshot(&tree, &layers, OsStr::new(id), true).map_err(sys)?;
        Ok(Self::env_layer(id))
    }

    fn mount(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<()> {
        if dirs.mountpoint.is_none() {
            if !LayersBackend::upper(dirs).is_dir() {
                return self.reset_work(dirs, chain);
            }
            return Ok(());
        }
        if !btrfs::is_subvolume(&Self::tree(dirs)).unwrap_or(false) {
            // Lost (a crash during a reset): rebuild it from HEAD's layer.
            return self.reset_work(dirs, chain);
        }
        if Self::is_mounted(dirs)? {
            return Ok(());
        }
        Self::bind(dirs)
    }

    fn unmount(&self, dirs: &WorkDirs) -> Result<()> {
        // Only ever our own bind mounts: a btrfs mount of the store's device at the mount
        // point. The user's directory may itself sit on some other mount. Stacked mounts
        // (from an interrupted earlier run) are all removed.
        let Some(mountpoint) = &dirs.mountpoint else {
            return Ok(());
        };
        let store_source = crate::mounts::mount_containing(&self.store_dir).map(|m| m.source);
        let ours = || {
            crate::mounts::top_mount(mountpoint)
                .is_some_and(|m| m.fstype == "btrfs" && Some(&m.source) == store_source.as_ref())
        };
        for _ in 0..16 {
            if !ours() {
                return Ok(());
            }
            match rustix::mount::unmount(mountpoint, rustix::mount::UnmountFlags::DETACH) {
                Ok(()) => continue,
                Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => return Ok(()),
                Err(e) => {
                    return Err(Error::Backend {
                        path: mountpoint.clone(),
                        message: format!("unmount: {}", std::io::Error::from(e)),
                    })
                }
            }
        }
        Err(Error::Backend {
            path: mountpoint.clone(),
            message: "still mounted after 16 unmounts".to_owned(),
        })
    }

    fn box_layers(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<BoxLayers> {
        LayersBackend::box_layers_over(dirs, vec![self.top_layer(chain)?])
    }

    fn working_view(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<WorkingView> {
        if dirs.mountpoint.is_none() {
            return LayersBackend::box_view(dirs, vec![self.top_layer(chain)?]);
        }
        Ok(WorkingView::existing(Self::tree(dirs)))
    }

    fn committed(&self, dirs: &WorkDirs, _layer: &LayerRecord) -> Result<()> {
        if dirs.mountpoint.is_none() {
            return LayersBackend::adopt_marks(dirs);
        }
        Ok(())
    }

    fn remove_work(&self, dirs: &WorkDirs) -> Result<()> {
        self.unmount(dirs)?;
        remove_any(&dirs.work.join(TMP_TREE))?;
        remove_any(&Self::tree(dirs))?;
        remove_any(&dirs.work)
    }

    /// Creating a snapshot commits the btrfs transaction, so a layer is durable once its
    /// ioctl returns; only the small metadata files need syncing, which btrfs does through
    /// its log tree — much cheaper than the transaction commit a `syncfs` would force.
    fn make_durable(&self, files: &[PathBuf]) -> Result<()> {
        self.durability.make_durable(files)
    }

    /// A writable snapshot of HEAD's layer, which holds the copies in place: the commit
    /// takes the snapshot as its layer (see `crate::backend::prestage`).
    fn prestage_area(
        &self,
        chain: &[LayerRecord],
        nonce: &str,
    ) -> Result<crate::backend::prestage::Area> {
        let top = self.top_layer(chain)?;
        let name = format!("{}{nonce}", crate::backend::prestage::AREA_PREFIX);
        let path = btrfs::snapshot(&top, &self.layers(), OsStr::new(&name), false).map_err(sys)?;
        Ok(crate::backend::prestage::Area {
            path,
            snapshot_of: chain.first().map(|l| l.id.clone()),
        })
    }

    fn staging_dir_maker(&self) -> Option<fn(&Path) -> std::io::Result<()>> {
        Some(make_subvolume)
    }

    /// A staged subvolume (see `staging_dir_maker`) is sealed and renamed into place: no
    /// copy. Anything else is copied into a new subvolume.
    fn layer_from_staged(&self, staged: &Path, id: &str) -> Result<LayerRecord> {
        if !btrfs::is_subvolume(staged).unwrap_or(false) {
            let record = self.layer_from_dir(staged, id)?;
            remove_any(staged)?;
            return Ok(record);
        }
        let (layers, tmp_name) = self.prepare_layer(id)?;
        self.durability.mark_unsynced();
        fs_err::rename(staged, layers.join(&tmp_name))?;
        self.publish_layer(&layers, &tmp_name, id)
    }

    fn remove_tree(&self, path: &Path) -> Result<()> {
        remove_any(path)
    }

    /// Snapshot the base (O(1)), apply the staged layer in place, seal it read-only.
    fn layer_from_oci_diff(
        &self,
        staged: &Path,
        base: &[LayerRecord],
        id: &str,
    ) -> Result<LayerRecord> {
        let top = self.top_layer(base)?;
        let (layers, tmp_name) = self.prepare_layer(id)?;
        let tmp = btrfs::snapshot(&top, &layers, OsStr::new(&tmp_name), false).map_err(sys)?;
        self.durability.mark_unsynced();
        crate::bundle::apply_layer(staged, &tmp)?;
        remove_any(staged)?;
        self.publish_layer(&layers, &tmp_name, id)
    }

    fn remove_layer(&self, id: &str) -> Result<()> {
        self.check_id(id)?;
        let layers = self.layers();
        remove_any(&layers.join(format!("{TMP_PREFIX}{id}")))?;
        crate::listing::remove(&layers, id)?;
        remove_any(&layers.join(id))
    }

    /// A writable snapshot of the top layer (O(1)), edited in place, sealed read-only.
    fn derive_layer(
        &self,
        chain: &[LayerRecord],
        plan: &crate::derive::CleanupPlan,
        id: &str,
        over_base: bool,
        base: Option<&crate::backend::BoxBase>,
    ) -> Result<LayerRecord> {
        let mut timer = agentbox_core::timing::Timer::start("btrfs commit");
        let top = self.top_layer(chain)?;
        let (layers, tmp_name) = self.prepare_layer(id)?;
        let tmp = btrfs::snapshot(&top, &layers, OsStr::new(&tmp_name), false).map_err(sys)?;
        timer.lap("snapshot");
        // The edits are ordinary writes: they need the store's sync.
        self.durability.mark_unsynced();
        // The layer is the box's whole tree: whiteouts only where they hide something.
        let whiteouts = crate::backend::apply::Whiteouts::of(over_base, base, self.opaque_xattr());
        crate::backend::apply::edit_in_place(&tmp, plan, whiteouts, &|p| remove_any(p))?;
        agentbox_core::failpoint::hit("derive:after-copy");
        let record = self.publish_layer(&layers, &tmp_name, id)?;
        // The source's layer with only the edited paths changed (the directories holding
        // them get their mtimes back).
        let edited = plan
            .delete
            .iter()
            .chain(&plan.truncate)
            .map(|e| e.rel.as_path())
            .chain(plan.dirs.keys().map(PathBuf::as_path));
        let base = chain.first().map(|l| l.id.clone());
        Listing::new(base, edited).write(&layers, id)?;
        Ok(record)
    }

    /// Every btrfs layer is already complete: a read-only snapshot of the top layer under
    /// the new id (O(1)), sharing every extent. (The store does not even call this for a
    /// chain of one layer: the flattened node shares the layer itself.)
    fn flatten_layer(
        &self,
        chain: &[LayerRecord],
        id: &str,
        _over_base: bool,
        _base: Option<&crate::backend::BoxBase>,
    ) -> Result<LayerRecord> {
        let top = self.top_layer(chain)?;
        let (layers, tmp_name) = self.prepare_layer(id)?;
        btrfs::snapshot(&top, &layers, OsStr::new(&tmp_name), true).map_err(sys)?;
        agentbox_core::failpoint::hit("flatten:after-copy");
        self.publish_layer(&layers, &tmp_name, id)
    }
}
