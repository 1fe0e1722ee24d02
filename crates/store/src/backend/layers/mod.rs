//! The `layers` backend: snapshots on any filesystem, with overlayfs.
//!
//! * A layer (`layers/<id>/`) holds only what changed relative to its parent layer, in
//!   overlayfs form: a deleted path is a whiteout (char device 0/0), a directory that replaced
//!   a deleted one carries `trusted.overlay.opaque=y`. A complete layer has no parent.
//! * An environment's working tree is an overlay mounted at its mount point: the lower
//!   directories are HEAD's chain, the upper directory is `work/upper` (everything written
//!   since the last checkout), the overlay work directory is `work/ovl`.
//! * Commit captures only what changed in the upper directory since the last commit. The mark
//!   is the identity (`kind`, inode, ctime) of every upper entry at the last commit, kept
//!   in `work/captured.json` and `work/captured.log` (see `marks`). Entries whose identity changed are copied (reflinked where the filesystem
//!   can) into the new layer; entries that vanished from the upper directory become
//!   whiteouts. The mount is never touched, so processes may keep writing during a commit: a
//!   file changed while it was copied has a new ctime and is captured again next time.
//!   Cost: one `lstat` per upper entry plus the changed bytes — O(changes since checkout),
//!   never O(tree).
//! * When nothing holds the working tree open (the kernel accepts the unmount), a commit of
//!   an environment with a mount point hands the upper directory to the new layer instead
//!   (renamed to be it: no data copied, no directory made), then mounts a fresh, empty upper
//!   directory over the new chain: each file is kept once on disk, and the next commit
//!   looks only at what changed since this one. See `LayersBackend::try_handoff` for what happens when a
//!   process does hold something open (the copy above), and for crash safety.
//! * When a commit would make a chain deeper than `max_depth`, overlays must not stack
//!   further: the new layer folds several layers of the top of the chain and the commit's
//!   changes into one diff (compaction, files linked rather than copied, recorded as
//!   `compacted`). Normally those are the commits' own layers above the topmost compacted
//!   one, so a compaction costs what those commits changed; with `MAX_COMPACTED` compacted
//!   layers in the chain, every layer above the complete bottom one, if together they are
//!   small beside it (a quarter of its entries). Otherwise the new layer is a complete copy
//!   of the merged tree (flattening, its untouched files linked to the layers'). A box's
//!   chain (no mount point) is compacted the same way over its first layer, or else folded
//!   whole; its markers are kept either way.
//! * Checkout unmounts, discards the upper directory and mounts a fresh overlay.
//! * A derived node ([`crate::Store::derive`]) gets one small layer on top of its source's
//!   chain: a whiteout per removed path, an empty file per emptied one, and the directories
//!   leading to them with the merged tree's metadata (so overlayfs shows them unchanged).
//!   It is written as `layers/.tmp-<id>/` (with its templates in `layers/.tmp-<id>-scratch/`)
//!   and renamed into place, like a commit's layer.
//! * A flattened node ([`crate::Store::flatten`]) gets one complete layer: the chain's merged
//!   tree, or for a box the chain folded bottom-up with its overlay markers kept.
//! * Each layer made here from a tree in hand (a commit's captured changes, a derive's
//!   edits, a complete copy) gets a listing of its own entries over its parent
//!   (`layers/<id>.paths`, see [`crate::listing`]), for derives; others are walked once when
//!   a derive needs them.
//!
//! Mounting an overlay and creating whiteouts need root (CAP_SYS_ADMIN, CAP_MKNOD).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentbox_core::atomic::{read_json_opt, write_json_unsynced};
use agentbox_core::failpoint;
use rustix::mount::{MountFlags, UnmountFlags};
use serde::{Deserialize, Serialize};

use crate::backend::apply::Below;
use crate::backend::marks::{self, file_id, Captured, FileId, Mark, NewMarks, Scan};
use crate::backend::{Backend, BackendKind, BoxLayers, LayerRecord, WorkDirs, WorkingView};
use crate::backend::{ChangeHint, MarksVersion};
use crate::fsops::copy::{copy_tree, CopyOpts};
use crate::fsops::flusher::Flusher;
use crate::fsops::scan::{read_meta, scan_tree, strip_overlay_xattrs};
use crate::fsops::{Entry, Kind, Meta, Tree};
use crate::listing::Listing;
use crate::store::io_at;
use crate::{Error, Result};

const OPAQUE_XATTR: &str = "trusted.overlay.opaque";
/// What overlayfs marks an upper directory with once it holds a copied-up entry.
const IMPURE_XATTR: &str = "trusted.overlay.impure";

/// Most compacted layers (see [`LayersBackend::compaction`]) a chain holds above its complete
/// bottom layer: at this many, the next compaction folds them all into one (or a complete
/// layer replaces the chain), so that a chain does not become a stack of them.
const MAX_COMPACTED: usize = 6;

/// Name prefix, inside the work area, of the upper directories handed to layers and not
/// yet removed (see `LayersBackend::finish_handoff`).
const TRASH_PREFIX: &str = "upper.old-";

mod capture;
mod fold;
mod handoff;
mod impl_backend;

/// The `layers` backend.
#[derive(Debug)]
pub struct LayersBackend {
    layers: PathBuf,
    max_depth: u32,
    durability: super::Durability,
    /// Name of the opaque-directory attribute in this store's layers.
    opaque: &'static str,
    /// Old work areas of checkouts, being removed (see [`super::trash`]).
    trash: super::trash::Trash,
}

impl LayersBackend {
    pub fn new(store_dir: &Path, max_depth: u32) -> LayersBackend {
        LayersBackend {
            layers: store_dir.join("layers"),
            max_depth: max_depth.max(2),
            durability: super::Durability::default(),
            opaque: OPAQUE_XATTR,
            trash: Default::default(),
        }
    }

    /// Use the overlay attributes of namespace `xattrs` (see `StoreConfig::overlay_xattrs`).
    pub fn with_xattrs(mut self, xattrs: crate::store::OverlayXattrs) -> LayersBackend {
        self.opaque = xattrs.opaque();
        self
    }

    fn tmp_layer(&self, id: &str) -> PathBuf {
        self.layers.join(format!(".tmp-{id}"))
    }

    /// Move a finished temporary layer into place; before this it has no valid name. The
    /// store syncs the filesystem before anything durable refers to the layer.
    fn publish(&self, id: &str) -> Result<PathBuf> {
        let dst = self.layer_dir(id);
        fs_err::rename(self.tmp_layer(id), &dst)?;
        Ok(dst)
    }

    pub(crate) fn upper(dirs: &WorkDirs) -> PathBuf {
        dirs.work.join("upper")
    }
    pub(super) fn ovl(dirs: &WorkDirs) -> PathBuf {
        dirs.work.join("ovl")
    }
    /// Record `now` as the marks to adopt once the commit is durable (see `committed`).
    pub(super) fn stage_marks(dirs: &WorkDirs, now: NewMarks) -> Result<()> {
        marks::stage(dirs, now)
    }

    /// The commit is durable: its marks become the reference for the next one.
    pub(super) fn adopt_marks(dirs: &WorkDirs) -> Result<()> {
        marks::adopt(dirs)
    }

    /// The overlay `lowerdir=` value for `dirs` (top first).
    fn lowerdir(dirs: &[PathBuf]) -> Result<String> {
        let mut lower = String::new();
        for (i, d) in dirs.iter().enumerate() {
            let s = d.to_str().ok_or_else(|| Error::Backend {
                path: d.clone(),
                message: "store paths must be UTF-8 to be used as overlay layers".into(),
            })?;
            if s.contains([',', ':', '\\']) {
                return Err(Error::Backend {
                    path: d.clone(),
                    message: "store paths must not contain ',', ':' or '\\' (overlayfs separators); choose another AGENTBOX_HOME".into(),
                });
            }
            if i > 0 {
                lower.push(':');
            }
            lower.push_str(s);
        }
        Ok(lower)
    }

    fn chain_dirs(&self, chain: &[LayerRecord]) -> Vec<PathBuf> {
        chain.iter().map(|l| self.layer_dir(&l.id)).collect()
    }

    /// Mount the working overlay at the mount point (nothing to do for a box, whose overlay
    /// lives in its own mount namespace).
    fn mount_overlay(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<()> {
        self.mount_lowers(dirs, &self.chain_dirs(chain))
    }

    /// [`Self::mount_overlay`] over the layer directories `lowers` (top first).
    fn mount_lowers(&self, dirs: &WorkDirs, lowers: &[PathBuf]) -> Result<()> {
        let Some(mountpoint) = &dirs.mountpoint else {
            return Ok(());
        };
        let lower = Self::lowerdir(lowers)?;
        let data = format!(
            "lowerdir={lower},upperdir={},workdir={},redirect_dir=off,index=off,metacopy=off,xino=off",
            Self::upper(dirs).display(),
            Self::ovl(dirs).display()
        );
        let data = std::ffi::CString::new(data).map_err(|_| Error::Backend {
            path: mountpoint.clone(),
            message: "overlay options contain a NUL byte".into(),
        })?;
        fs_err::create_dir_all(mountpoint)?;
        rustix::mount::mount(
            crate::mounts::OVERLAY_SOURCE,
            mountpoint,
            "overlay",
            crate::mounts::HOST_MOUNT_FLAGS,
            data.as_c_str(),
        )
        .map_err(|e| {
            if e == rustix::io::Errno::PERM || e == rustix::io::Errno::ACCESS {
                Error::NeedsRoot {
                    operation: format!("mounting the overlay at {}", mountpoint.display()),
                    reason: "the layers backend mounts an overlay filesystem; run as root (or keep the store on btrfs)".into(),
                }
            } else {
                Error::Backend {
                    path: mountpoint.clone(),
                    message: format!("mounting overlay failed: {e}"),
                }
            }
        })
    }

    /// Create an empty upper directory whose root carries the metadata of the chain's root.
    /// Overlayfs shows a merged directory with the upper directory's attributes, so without
    /// this the root's mode, owner and mtime would be those of the moment of checkout.
    fn fresh_upper(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<()> {
        let top = chain.first().ok_or_else(|| Error::Backend {
            path: dirs.work.clone(),
            message: "checkout of an empty chain".into(),
        })?;
        Self::fresh_upper_from(dirs, &self.layer_dir(&top.id))
    }

    /// [`Self::fresh_upper`] for a chain whose top layer is `top_dir`.
    pub(super) fn fresh_upper_from(dirs: &WorkDirs, top_dir: &Path) -> Result<()> {
        let upper = Self::upper(dirs);
        let top_dir = top_dir.to_owned();
        let mut meta = read_meta(&top_dir)?;
        strip_overlay_xattrs(&mut meta);
        let mut tree = Tree::default();
        tree.entries.insert(
            PathBuf::new(),
            Entry {
                rel: PathBuf::new(),
                src: top_dir,
                meta,
            },
        );
        copy_tree(&tree, &upper, &copy_opts())?;
        Ok(())
    }
}
impl LayersBackend {
    /// Discard an environment's working area (upper directory, overlay work directory, marks):
    /// moved aside first so a crash never leaves a half-deleted upper directory under the live
    /// name, then removed with `remove` (along with what an interrupted earlier reset left).
    pub(super) fn discard_work_dirs(
        dirs: &WorkDirs,
        remove: &dyn Fn(&Path) -> Result<()>,
    ) -> Result<()> {
        for old in super::trash::set_aside(&dirs.work)? {
            remove(&old)?;
        }
        Ok(())
    }
}

/// Make the data of the regular files of `tree` (copied to `dst`) reach the device, with no
/// device flush per file: the journal commit forced by the `fsync` of the node that names
/// the layer makes them durable with its inodes and directory entries (ext4 and xfs
/// journal all metadata in one ordered log, so one commit covers every earlier change).
/// The files renamed from prestaged copies whose data had reached the device already
/// (`written`) are left out.
fn write_out(tree: &Tree, dst: &Path, written: &dyn Fn(&Path) -> bool) -> Result<()> {
    let files: Vec<PathBuf> = tree
        .entries
        .values()
        .filter(|e| e.meta.kind == Kind::File && !written(&e.rel))
        .map(|e| dst.join(&e.rel))
        .collect();
    super::write_out(&files)
}

/// Remove the overlay's attributes (`*.overlay.*`) of the directory `path`.
fn strip_overlay_xattrs_at(path: &Path) -> Result<()> {
    let names = crate::fsops::scan::xattr_names(path)?;
    for name in names {
        if crate::fsops::scan::is_overlay_xattr(&name) {
            xattr::remove(path, &name).map_err(|e| Error::Io(io_at(path, e)))?;
        }
    }
    Ok(())
}

fn copy_opts() -> CopyOpts {
    CopyOpts {
        reflink: true,
        ..CopyOpts::default()
    }
}

impl LayersBackend {
    /// Point the regular files of `tree` (a scan of the mounted working overlay) that no
    /// write has touched at the layer file that provides them, so that a linking copy
    /// ([`Self::linking_opts`]) shares them instead of copying their data.
    ///
    /// A file is taken from a layer only when the upper directory (`upper`, scanned
    /// before the view) has nothing at its path: overlayfs then shows the lower file itself
    /// and reports that file's own inode number, so the name in the chain's layers with
    /// that inode number (the layers are one filesystem) is the very inode the view shows.
    /// A copied-up file, which overlayfs reports under its origin's inode number, is in
    /// the upper directory and is copied from the view as it shows it. Only directory
    /// entries are read (`d_ino`), not the layers' inodes.
    fn point_at_layers(&self, tree: &mut Tree, chain: &[LayerRecord], upper: &Tree) -> Result<()> {
        use walkdir::DirEntryExt as _;
        let mut by_ino: HashMap<u64, PathBuf> = HashMap::new();
        for dir in self.chain_dirs(chain) {
            for entry in walkdir::WalkDir::new(&dir)
                .follow_links(false)
                .same_file_system(true)
            {
                let entry = entry.map_err(|e| Error::Backend {
                    path: e.path().unwrap_or(&dir).to_owned(),
                    message: format!("reading a layer: {e}"),
                })?;
                if entry.file_type().is_file() {
                    by_ino
                        .entry(entry.ino())
                        .or_insert_with(|| entry.into_path());
                }
            }
        }
        for (rel, e) in tree.entries.iter_mut() {
            if e.meta.kind != Kind::File || upper.entries.contains_key(rel) {
                continue;
            }
            if let Some(src) = by_ino.get(&e.meta.ino) {
                e.src = src.clone();
            }
        }
        Ok(())
    }

    /// [`copy_opts`] for a copy out of published layers (a flatten): their files are
    /// linked, not copied, so a complete layer costs its directories and names, not a
    /// second copy of the tree's data (see [`CopyOpts::link_from`]).
    fn linking_opts(&self) -> CopyOpts {
        CopyOpts {
            link_from: Some(self.layers.clone()),
            ..copy_opts()
        }
    }
}

fn ensure_whiteout_template(path: &Path) -> Result<()> {
    if path.exists() {
        return Ok(());
    }
    make_whiteout(path)
}

/// Create an overlay whiteout (a 0/0 character device) at `path`, which must not exist.
pub(crate) fn make_whiteout(path: &Path) -> Result<()> {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::empty(),
        0,
    )
    .map_err(|e| {
        if e == rustix::io::Errno::PERM {
            Error::NeedsRoot {
                operation: "recording a deletion".into(),
                reason: "the layers backend records deletions as overlay whiteouts (device nodes)"
                    .into(),
            }
        } else {
            Error::Io(io_at(path, e.into()))
        }
    })
}
impl LayersBackend {
    /// A box's overlay layers: `lowers` (top first) under the working upper directory.
    pub(super) fn box_layers_over(dirs: &WorkDirs, lowers: Vec<PathBuf>) -> Result<BoxLayers> {
        fs_err::create_dir_all(Self::upper(dirs))?;
        fs_err::create_dir_all(Self::ovl(dirs))?;
        Ok(BoxLayers {
            lowers,
            upper: Self::upper(dirs),
            workdir: Self::ovl(dirs),
        })
    }

    /// A read-only overlay of a box's upper directory over `lowers`, mounted while the view
    /// lives.
    pub(super) fn box_view(dirs: &WorkDirs, lowers: Vec<PathBuf>) -> Result<WorkingView> {
        let mut all = vec![Self::upper(dirs)];
        // A chain is never empty, so this is at least the two lowers overlayfs needs.
        all.extend(lowers);
        let view = dirs.work.join(format!(
            "view-{}-{}",
            std::process::id(),
            agentbox_core::id::new_id()
        ));
        fs_err::create_dir_all(&view)?;
        let data = format!(
            "lowerdir={},redirect_dir=off,index=off,metacopy=off,xino=off",
            Self::lowerdir(&all)?
        );
        let data = std::ffi::CString::new(data).map_err(|_| Error::Backend {
            path: view.clone(),
            message: "overlay options contain a NUL byte".into(),
        })?;
        rustix::mount::mount(
            crate::mounts::OVERLAY_SOURCE,
            &view,
            "overlay",
            MountFlags::RDONLY,
            data.as_c_str(),
        )
        .map_err(|e| Error::Backend {
            path: view.clone(),
            message: format!("mounting a view of the working tree failed: {e}"),
        })?;
        Ok(WorkingView::mounted(view))
    }
}

/// The names in directory `dir`.
fn names_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in fs_err::read_dir(dir)? {
        out.push(PathBuf::from(entry?.file_name()));
    }
    Ok(out)
}
