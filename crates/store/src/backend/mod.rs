//! Snapshot backends: where layers live and how an environment's working tree is made.
//!
//! Both backends implement [`Backend`] and pass the same conformance suite
//! (`tests/it/conformance.rs`).
//!
//! Vocabulary:
//! * a **layer** is an immutable directory under `store/layers/<id>/` owned by the backend;
//! * a **chain** is the list of layers whose union is a node's tree, top (newest) first. On
//!   `btrfs` every chain has length 1 (a layer is a complete read-only subvolume); on `layers`
//!   it is the node's own diff layer followed by its ancestors' layers up to the nearest
//!   flattened (complete) layer;
//! * the **work area** of an environment (`store/envs/<name>/work/`) holds its writable state;
//!   the **mount point** is the user-visible directory (the overlay on `layers`, a bind mount
//!   of the writable subvolume on `btrfs`).

pub mod apply;
pub mod btrfs;
mod layer_record;
pub mod layers;
mod marks;
pub mod prestage;
mod trash;
pub use layer_record::LayerRecord;
pub use marks::{ChangeHint, MarksVersion};

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Result;

/// Which backend a store uses. Recorded in `store/store.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Btrfs,
    Layers,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Btrfs => "btrfs",
            BackendKind::Layers => "layers",
        })
    }
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "btrfs" => Ok(BackendKind::Btrfs),
            "layers" => Ok(BackendKind::Layers),
            other => Err(format!(
                "unknown backend {other:?} (expected btrfs or layers)"
            )),
        }
    }
}

/// Directories of one environment's working state.
#[derive(Debug, Clone)]
pub struct WorkDirs {
    /// `store/envs/<name>/work`: private to the backend.
    pub work: PathBuf,
    /// The user-visible directory; `None` for a box, whose working tree is mounted only
    /// inside the box's own mount namespace (see [`Backend::box_layers`]).
    pub mountpoint: Option<PathBuf>,
    /// For a box, the tree its layers are mounted over, when known
    /// ([`crate::EnvState::box_base`]).
    pub base: Option<BoxBase>,
    /// For a box: its supervisor stopped it for this commit (no process of the box is
    /// left, so nothing has its overlay mounted or writes to its upper directory until
    /// the box starts again). A backend may then hand the upper directory to the new
    /// layer instead of copying from it ([`crate::Store::commit_stopped_box`]).
    pub box_stopped: bool,
}

/// What a box's layers are mounted over, as the box sees it: the tree `root` (the host's
/// `/`, or an image's root) with the paths `hidden` made empty (a hidden directory is an
/// empty directory, a hidden file absent) and the paths `shown` below them shown again.
/// Paths are absolute, in the box's terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoxBase {
    pub root: PathBuf,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<PathBuf>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shown: Vec<PathBuf>,
}

/// The directories a box's root overlay is assembled from, above its base.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxLayers {
    /// Read-only layers, top first (HEAD's chain for `layers`; none for `btrfs`).
    pub lowers: Vec<PathBuf>,
    /// Where the box's writes go: the working tree.
    pub upper: PathBuf,
    /// The overlay work directory: empty, on the same filesystem as `upper`.
    pub workdir: PathBuf,
}

/// A read-only view of an environment's working tree; unmounted on drop when it had to be
/// mounted.
#[derive(Debug)]
pub struct WorkingView {
    pub path: PathBuf,
    mounted: bool,
}

impl WorkingView {
    pub fn existing(path: PathBuf) -> WorkingView {
        WorkingView {
            path,
            mounted: false,
        }
    }
    pub fn mounted(path: PathBuf) -> WorkingView {
        WorkingView {
            path,
            mounted: true,
        }
    }
}

impl Drop for WorkingView {
    fn drop(&mut self) {
        if self.mounted {
            let _ = rustix::mount::unmount(&self.path, rustix::mount::UnmountFlags::DETACH);
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}

/// A snapshot backend.
pub trait Backend: Send + Sync + fmt::Debug {
    fn kind(&self) -> BackendKind;

    /// Directory of layer `id`.
    fn layer_dir(&self, id: &str) -> PathBuf;

    /// The attribute that marks an opaque directory in this backend's layers (see
    /// `fsops::scan::is_opaque`). A chain of one layer (every btrfs node) merges nothing,
    /// so only the layers backend's choice matters.
    fn opaque_xattr(&self) -> &'static str {
        crate::store::OverlayXattrs::Trusted.opaque()
    }

    /// Create layer `id` as an exact copy of the tree at `src` (complete layer).
    fn layer_from_dir(&self, src: &Path, id: &str) -> Result<LayerRecord>;

    /// Create layer `id` holding an empty tree.
    fn empty_layer(&self, id: &str) -> Result<LayerRecord>;

    /// Make the working area of an environment hold the tree of `chain` (top first), replacing
    /// whatever it held, and mount it at the mount point. Used by create and checkout.
    fn reset_work(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<()>;

    /// Freeze the current working tree as layer `id`. `chain` is the chain the working area
    /// was last reset to or committed as (HEAD's chain). Must be safe while other processes
    /// write to the mount point: the layer is a consistent-per-file copy.
    fn commit(&self, dirs: &WorkDirs, chain: &[LayerRecord], id: &str) -> Result<LayerRecord>;

    /// (Re)mount the mount point after a reboot, for HEAD's chain.
    fn mount(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<()>;

    /// Unmount the mount point (no error when not mounted).
    fn unmount(&self, dirs: &WorkDirs) -> Result<()>;

    /// The directories a box's root overlay is built from (environments without a mount
    /// point). The working area must have been prepared by `reset_work` or `mount`.
    fn box_layers(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<BoxLayers>;

    /// Paths of the working tree changed since HEAD (relative, with whether each is a
    /// directory). Cheap enough to run after every command of a box.
    /// With a `hint` made against the current marks ([`MarksVersion`]), only the hinted
    /// paths (and what they imply) are looked at: the caller vouches that nothing else
    /// changed since those marks.
    ///
    /// Both backends keep a box's (and an environment's) working changes in an upper
    /// directory with marks of the last commit, so this is theirs alike.
    fn changed_paths(
        &self,
        dirs: &WorkDirs,
        hint: Option<&ChangeHint>,
    ) -> Result<Vec<(PathBuf, bool)>> {
        layers::LayersBackend::changed_in_upper(dirs, hint)
    }

    /// The version of the marks [`Backend::changed_paths`] compares with.
    fn marks_version(&self, dirs: &WorkDirs) -> Result<Option<MarksVersion>> {
        layers::LayersBackend::marks_version(dirs).map(Some)
    }

    /// A read-only view of the working tree: the mount point when there is one.
    fn working_view(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<WorkingView>;

    /// Remove an environment's working area (after unmount).
    fn remove_work(&self, dirs: &WorkDirs) -> Result<()>;

    /// Remove a layer's data. The caller guarantees nothing references it.
    fn remove_layer(&self, id: &str) -> Result<()>;

    /// Create layer `id` holding the tree of `chain` (top first) edited by `plan`, which was
    /// computed from a scan of that tree: the `delete` entries gone (as whiteouts when
    /// `over_base`: the chain is a box's, above a base whose files at those paths must stay
    /// hidden), the `truncate` files empty, everything else exactly as it was, metadata
    /// included (the directories in `plan.dirs` keep their mtime; an emptied file its mode,
    /// owner, xattrs and mtime). The chain's layers and every working area are left alone.
    /// `base`: the box's base when known ([`crate::EnvState::box_base`]); where the new layer is
    /// the box's whole tree, it keeps only the whiteouts that hide something of it.
    fn derive_layer(
        &self,
        chain: &[LayerRecord],
        plan: &crate::derive::CleanupPlan,
        id: &str,
        over_base: bool,
        base: Option<&BoxBase>,
    ) -> Result<LayerRecord>;

    /// Create layer `id` as one complete layer (no parent) holding the tree of `chain` (top
    /// first). `over_base`: the chain is a box's, whose overlay markers (whiteouts and
    /// opaque directories hiding the base) are kept — with `base` known, only the
    /// whiteouts that hide something of it; otherwise the result is the plain merged tree.
    fn flatten_layer(
        &self,
        chain: &[LayerRecord],
        id: &str,
        over_base: bool,
        base: Option<&BoxBase>,
    ) -> Result<LayerRecord>;

    /// Create layer `id` from a complete tree staged inside the store (an import). The staged
    /// directory is consumed. Backends that can adopt it in place (a rename) override this.
    fn layer_from_staged(&self, staged: &Path, id: &str) -> Result<LayerRecord> {
        let record = self.layer_from_dir(staged, id)?;
        self.remove_tree(staged)?;
        Ok(record)
    }

    /// Create layer `id` from an OCI-style layer staged by an import (`.wh.` markers for
    /// deletions) that applies on top of the tree of `base` (top first). The staged
    /// directory is consumed. The default materialises the base tree, applies the layer and
    /// stores the result as a complete layer; backends override it with something cheaper.
    fn layer_from_oci_diff(
        &self,
        staged: &Path,
        base: &[LayerRecord],
        id: &str,
    ) -> Result<LayerRecord> {
        let work = staged.with_extension("full");
        self.remove_tree(&work)?;
        fs_err::create_dir_all(&work)?;
        let dirs: Vec<PathBuf> = base.iter().map(|l| self.layer_dir(&l.id)).collect();
        let refs: Vec<&Path> = dirs.iter().map(|d| d.as_path()).collect();
        let tree = crate::fsops::scan::scan_chain(&refs, self.opaque_xattr())?;
        crate::fsops::copy::copy_tree(&tree, &work, &crate::fsops::copy::CopyOpts::default())?;
        crate::bundle::apply_layer(staged, &work)?;
        self.remove_tree(staged)?;
        self.layer_from_staged(&work, id)
    }

    /// Make durable the layers written since the last call and the metadata `files` (layer
    /// records, nodes) that name them, before anything durable refers to them: by the time
    /// this returns, or, on a filesystem whose journal commits metadata in order (ext4,
    /// xfs), with the caller's next `fsync`, which cannot make a change naming them durable
    /// without them (see `fsync_with_dirs`). The default flushes the whole filesystem once
    /// (cheaper than syncing every copied file).
    fn make_durable(&self, files: &[PathBuf]) -> Result<()> {
        match files.first().and_then(|f| f.parent()) {
            Some(dir) => Ok(agentbox_core::atomic::syncfs(dir)?),
            None => Ok(()),
        }
    }

    /// A new area for a box's prestaged copies (see [`prestage`]) named by `nonce`, for a
    /// box on HEAD's `chain`: a plain directory in `layers/`, which any commit on the same
    /// filesystem can rename from.
    fn prestage_area(&self, _chain: &[LayerRecord], nonce: &str) -> Result<prestage::Area> {
        let path = self
            .layer_dir("")
            .join(format!("{}{nonce}", prestage::AREA_PREFIX));
        fs_err::create_dir_all(path.parent().unwrap_or(Path::new("/")))?;
        fs_err::create_dir(&path)?;
        Ok(prestage::Area {
            path,
            snapshot_of: None,
        })
    }

    /// How imports should create staged layer directories so that [`Backend::layer_from_staged`]
    /// can adopt them without copying; `None` for plain directories.
    fn staging_dir_maker(&self) -> Option<fn(&Path) -> std::io::Result<()>> {
        None
    }

    /// The record [`Backend::commit`] of `dirs` will return, when that commit makes its
    /// layer durable by a step that also makes every file written before it on the same
    /// filesystem durable (once its data was written out): the store then writes its own
    /// files for the commit first and spares their flush (see `Store::commit_ahead`).
    fn record_ahead(
        &self,
        _dirs: &WorkDirs,
        _chain: &[LayerRecord],
        _id: &str,
    ) -> Option<LayerRecord> {
        None
    }

    /// A commit of layer `id` into `dirs` will not reach its commit point (it failed after
    /// [`Backend::commit`] returned, or was interrupted by a crash): give the working tree
    /// back what the commit took from it. Mounting again is the caller's business.
    fn abandon(&self, _dirs: &WorkDirs, _id: &str) -> Result<()> {
        Ok(())
    }

    /// The layer a commit of `dirs` had in flight and left unfinished (a crash between
    /// [`Backend::commit`] and [`Backend::committed`]) when it still holds part of the
    /// working tree: the store's recovery calls [`Backend::abandon`] for it unless the
    /// commit point was reached.
    fn unfinished_commit(&self, _dirs: &WorkDirs) -> Result<Option<String>> {
        Ok(None)
    }

    /// Called once the node of a committed layer is durable (the commit point passed), so a
    /// backend that tracks "changed since the last commit" can advance its mark.
    fn committed(&self, _dirs: &WorkDirs, _layer: &LayerRecord) -> Result<()> {
        Ok(())
    }

    /// Remove a directory tree the backend may have created (staging, work areas), including
    /// any subvolumes inside it.
    fn remove_tree(&self, path: &Path) -> Result<()> {
        // Directories without write permission (an overlay's `work/work`, made mode 000 by
        // the kernel) are opened up first when removal needs it.
        crate::bundle::fsutil::remove_any(path)
            .map_err(|e| crate::Error::Io(crate::store::io_at(path, e)))
    }
}

/// Which layers still need their data flushed before a node may name them.
///
/// Layers made by a btrfs snapshot, or by a `layers` commit (which writes out what it copied
/// itself), are durable once made; layers filled by bulk copies (a new environment, an
/// import) are not, and the next [`Durability::make_durable`] flushes the filesystem once
/// instead of syncing thousands of files one by one.
#[derive(Debug, Default)]
pub(crate) struct Durability {
    unsynced: std::sync::atomic::AtomicBool,
}

impl Durability {
    /// A layer was written whose data is not yet durable.
    pub(crate) fn mark_unsynced(&self) {
        self.unsynced
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Make layer data (when needed) and the metadata `files` durable.
    pub(crate) fn make_durable(&self, files: &[PathBuf]) -> Result<()> {
        if self
            .unsynced
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            if let Some(dir) = files.first().and_then(|f| f.parent()) {
                return Ok(agentbox_core::atomic::syncfs(dir)?);
            }
        }
        fsync_with_dirs(files)
    }
}

/// How a filesystem makes metadata durable, which decides the cheapest correct way to make
/// a few new files durable (see [`fsync_with_dirs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Journal {
    /// ext4, xfs: all metadata goes through one journal whose transactions commit in
    /// order, so a metadata change never becomes durable before an earlier one.
    Ordered,
    /// btrfs: `fsync` of an inode created in the running transaction also logs the
    /// directory entries that name it.
    Btrfs,
    /// Anything else: each file and each directory is synced.
    Other,
}

/// Whether metadata changes under `path` become durable in the order they were made (see
/// [`Journal::Ordered`]): then a new empty file needs no flush of its own to be on disk
/// before anything changed after it.
pub(crate) fn journal_orders_metadata(path: &Path) -> bool {
    journal_of(path) == Journal::Ordered
}

fn journal_of(path: &Path) -> Journal {
    const EXT4: i64 = 0xEF53;
    const XFS: i64 = 0x5846_5342;
    const BTRFS: i64 = 0x9123_683E;
    // `f_type` is an i64 here but narrower on other targets.
    #[allow(clippy::unnecessary_cast)]
    let kind = rustix::fs::statfs(path).map(|s| s.f_type as i64);
    match kind {
        Ok(XFS) => Journal::Ordered,
        Ok(EXT4) if ext4_commits_in_order(path) => Journal::Ordered,
        Ok(BTRFS) => Journal::Btrfs,
        _ => Journal::Other,
    }
}

/// Whether the ext4 filesystem holding `path` commits every `fsync` through its one ordered
/// journal: not when it has the `fast_commit` feature (a fast commit makes the synced
/// inode durable without the rest of the running transaction). Read from the superblock of
/// the device in `/proc/self/mountinfo`; `false` whenever that cannot be read (no access
/// to the device, as for a rootless user): every file is then synced. Cached per device.
fn ext4_commits_in_order(path: &Path) -> bool {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static SEEN: OnceLock<Mutex<HashMap<u64, bool>>> = OnceLock::new();
    let Ok(st) = rustix::fs::stat(path) else {
        return false;
    };
    let seen = SEEN.get_or_init(|| Mutex::new(HashMap::new()));
    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    *seen.entry(st.st_dev).or_insert_with(|| {
        let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
        ext4_source(major, minor).is_some_and(|dev| !has_fast_commit(&dev).unwrap_or(true))
    })
}

/// The device mounted as `major:minor` (an ext4 filesystem), from `/proc/self/mountinfo`.
fn ext4_source(major: u32, minor: u32) -> Option<PathBuf> {
    let want = format!("{major}:{minor}");
    crate::mounts::mounts()
        .into_iter()
        .find(|m| m.dev == want && m.fstype == "ext4")
        .map(|m| PathBuf::from(m.source))
}

/// Whether the ext4 superblock on `dev` has `COMPAT_FAST_COMMIT` (`s_feature_compat` at
/// byte 0x5c of the superblock, which starts at byte 1024).
fn has_fast_commit(dev: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    const COMPAT_FAST_COMMIT: u32 = 0x400;
    let mut b = [0u8; 4];
    std::fs::File::open(dev)?.read_exact_at(&mut b, 1024 + 0x5c)?;
    Ok(u32::from_le_bytes(b) & COMPAT_FAST_COMMIT != 0)
}

/// Atomically and durably replace the small JSON file `path` with `value`, as
/// `agentbox_core::atomic::write_json` does, with one flush instead of two where the
/// filesystem allows. In both cases the temporary file's data is first written out and
/// waited for (no flush; on btrfs until its extent is recorded), so whichever commit makes
/// the rename durable comes after the data:
///
/// * [`Journal::Ordered`]: renamed over `path`, then one `fsync` of the directory commits
///   the rename and the new inode together, its journal commit flushing the device.
/// * [`Journal::Btrfs`]: renamed over `path`, then one `fsync` of the file: btrfs logs the
///   new name of an inode it syncs (and the removal of the entry it replaced) in the same
///   log commit, so no `fsync` of the directory is needed.
///
/// Elsewhere: `write_json` (the file synced, then its directory).
pub(crate) fn write_json_durable<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    match journal_of(dir) {
        Journal::Ordered => {
            let settle = |f: &std::fs::File| agentbox_sys::writeback::wait(f);
            agentbox_core::atomic::write_json_settled(path, value, &settle)
        }
        Journal::Btrfs => {
            // Waits for the ordered extent too: the file's extent and size are in the
            // running transaction before the rename is.
            let settle = |f: &std::fs::File| agentbox_sys::fiemap::settle(f);
            agentbox_core::atomic::write_json_renamed_then_synced(path, value, &settle)
        }
        Journal::Other => agentbox_core::atomic::write_json(path, value),
    }
    .map_err(Into::into)
}

/// Write the data of the files `files` out to the device and wait for it, without a cache
/// flush: durable once a later journal or transaction commit flushes it. Writeback of every
/// file (in batches, to bound the open descriptors) is started before waiting for any, so
/// the writes overlap.
pub(crate) fn write_out(files: &[PathBuf]) -> Result<()> {
    let io = |path: &Path, e| crate::Error::Io(crate::store::io_at(path, e));
    for batch in files.chunks(256) {
        let mut open = Vec::with_capacity(batch.len());
        for path in batch {
            let f = fs_err::File::open(path)?;
            agentbox_sys::writeback::start(&f).map_err(|e| io(path, e))?;
            open.push((path, f));
        }
        for (path, f) in &open {
            agentbox_sys::writeback::wait(f).map_err(|e| io(path, e))?;
        }
    }
    Ok(())
}

/// Make the new files `files` durable, their directory entries included, before anything
/// that names them can become durable, with as few device cache flushes as the
/// filesystem allows:
///
/// * ext4, xfs: the data of each file is written out and waited for, and nothing is
///   flushed here. Their inodes and directory entries are metadata in the running journal
///   transaction, and the journal commits transactions in order, each after a cache flush
///   of the data written before it: whatever later change names these files (the
///   environment's HEAD, written with `fsync` by the store) cannot reach the disk without
///   them. So the caller's own next `fsync` makes them durable too, and a commit pays one
///   journal commit less. The same property already makes a `layers` commit's copied
///   entries durable (see `layers::write_out`).
/// * btrfs: one `fsync` per file; each logs the file's new directory entry with it.
/// * other filesystems: `fsync` of each file, then of each distinct parent directory.
pub(crate) fn fsync_with_dirs(files: &[PathBuf]) -> Result<()> {
    let journal = files
        .first()
        .and_then(|f| f.parent())
        .map_or(Journal::Other, journal_of);
    if journal == Journal::Ordered {
        return write_out(files);
    }
    let mut dirs: Vec<&Path> = Vec::new();
    for f in files {
        fs_err::File::open(f)?.sync_all()?;
        if let Some(d) = f.parent() {
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    if journal == Journal::Other {
        for d in dirs {
            agentbox_core::atomic::sync_dir(d)?;
        }
    }
    Ok(())
}

/// The backend of a store of kind `kind` rooted at `store_dir`.
pub fn open(
    kind: BackendKind,
    store_dir: &Path,
    max_depth: u32,
    xattrs: crate::store::OverlayXattrs,
) -> Box<dyn Backend> {
    match kind {
        BackendKind::Btrfs => Box::new(btrfs::BtrfsBackend::new(store_dir)),
        BackendKind::Layers => {
            Box::new(layers::LayersBackend::new(store_dir, max_depth).with_xattrs(xattrs))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ext4_with_fast_commit_syncs_every_file() {
        let Some(plain) = agentbox_testkit::loopfs::LoopFs::ext4(256 << 20) else {
            return;
        };
        assert_eq!(journal_of(plain.path()), Journal::Ordered);
        let Some(fast) = agentbox_testkit::loopfs::LoopFs::ext4(256 << 20) else {
            return;
        };
        let tuned = std::process::Command::new("tune2fs")
            .args(["-O", "fast_commit", fast.device()])
            .output()
            .expect("run tune2fs");
        assert!(tuned.status.success(), "{tuned:?}");
        assert_eq!(
            journal_of(fast.path()),
            Journal::Other,
            "a fast commit need not carry the rest of the journal"
        );
    }
}
