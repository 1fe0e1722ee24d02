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

/// A change check's look at the upper directory ([`LayersBackend::changed_in_upper`]),
/// taken by the commit that follows it on the same thread, so that an auto-capture (check,
/// then commit) looks at the upper directory once: that look is most of what a command
/// costs in a box that wrote tens of thousands of files.
///
/// Taking an older scan is sound as long as the marks it was compared with are still the
/// last commit's: what changed after the scan differs from the marks the commit records for
/// it (those of the scan), so the next commit takes it. It is taken only if the upper
/// directory is the same file as when it was made (every reset replaces it), the marks
/// are of the same version (every commit makes a new one), at most once, and within
/// [`ScanMemo::FRESH`].
struct ScanMemo {
    upper: (PathBuf, Option<FileId>),
    made: std::time::Instant,
    prev: Arc<marks::Loaded>,
    scan: Scan,
}

thread_local! {
    static LAST_SCAN: std::cell::RefCell<Option<ScanMemo>> = const { std::cell::RefCell::new(None) };
}

impl ScanMemo {
    /// A scan older than this is made again: a node shows the tree as the command left it.
    const FRESH: std::time::Duration = std::time::Duration::from_secs(1);

    /// Look at the whole upper directory, or with a hint made against the current marks,
    /// at the hinted paths only.
    fn make(dirs: &WorkDirs, hint: Option<&ChangeHint>) -> Result<ScanMemo> {
        let upper = LayersBackend::upper(dirs);
        // Identity first: a change after it makes the memo look older, never newer.
        let id = file_id(&upper);
        let prev = marks::load(dirs)?;
        let scan = match hint.filter(|h| h.since == prev.version()) {
            Some(h) => marks::partial_scan(&upper, &prev.captured.marks, &h.paths)?,
            None => Scan::Full(marks::scan_marks(&upper)?),
        };
        Ok(ScanMemo {
            upper: (upper, id),
            made: std::time::Instant::now(),
            prev,
            scan,
        })
    }

    /// Keep this scan for the next commit on this thread.
    fn keep(self) {
        LAST_SCAN.with(|m| *m.borrow_mut() = Some(self));
    }

    /// The kept scan, if it is of `dirs`'s upper directory as it is now named, against the
    /// marks now recorded, and fresh.
    fn take(dirs: &WorkDirs) -> Result<Option<ScanMemo>> {
        let Some(memo) = LAST_SCAN.with(|m| m.borrow_mut().take()) else {
            return Ok(None);
        };
        let same_upper = memo.upper.0 == LayersBackend::upper(dirs)
            && memo.upper.1.is_some()
            && file_id(&memo.upper.0) == memo.upper.1;
        let ok = same_upper
            && memo.made.elapsed() <= Self::FRESH
            && marks::load(dirs)?.version() == memo.prev.version();
        Ok(ok.then_some(memo))
    }
}

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

    pub(super) fn upper(dirs: &WorkDirs) -> PathBuf {
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

    /// Walk the upper directory: every entry's relative path and mark, with its metadata.
    fn scan_upper(dirs: &WorkDirs) -> Result<Tree> {
        scan_tree(&Self::upper(dirs))
    }

    fn mark(meta: &Meta) -> Mark {
        Mark {
            ino: meta.ino,
            ctime: (meta.ctime_sec, meta.ctime_nsec),
            btime: meta.btime,
            whiteout: meta.is_whiteout(),
            dir: meta.kind == Kind::Dir,
        }
    }

    /// Build the layer that brings HEAD's chain up to the current upper directory, in
    /// `self.tmp_layer(id)`. Returns the marks to record once the commit is durable.
    fn capture_changes(&self, dirs: &WorkDirs, id: &str) -> Result<(NewMarks, Vec<PathBuf>)> {
        let dst = self.tmp_layer(id);
        self.remove_tree(&dst)?;
        fs_err::create_dir_all(&dst)?;
        Self::capture_into(dirs, &dst, self.opaque)
    }

    /// Write into the empty directory `dst` the overlay-format layer of what changed in the
    /// upper directory since the last commit: changed entries as they are, whiteouts for
    /// what vanished, opaque markers for directories captured the first time after they
    /// replaced a lower one. Returns the marks to record once the commit is durable, and
    /// the path of every entry written to `dst` (its listing, see `crate::listing`).
    pub(super) fn capture_into(
        dirs: &WorkDirs,
        dst: &Path,
        opaque: &str,
    ) -> Result<(NewMarks, Vec<PathBuf>)> {
        let mut timer = agentbox_core::timing::Timer::start("capture");
        // Only `lstat` per upper entry; full metadata (xattrs) is read just for what changed.
        let upper_dir = Self::upper(dirs);
        let kept = ScanMemo::take(dirs)?;
        let reused = kept.is_some();
        let memo = match kept {
            Some(memo) => memo,
            None => ScanMemo::make(dirs, None)?,
        };
        timer.lap(if reused {
            "the change check's scan"
        } else {
            "load marks and scan upper"
        });
        let prev = &memo.prev.captured;
        // The entries looked at, and the marked ones known gone (for a whole scan: every
        // marked path it did not find).
        let (marks, gone): (&BTreeMap<PathBuf, Mark>, Vec<&String>) = match &memo.scan {
            Scan::Full(marks) => (
                marks,
                marks::not_found(&prev.marks, marks)
                    .into_iter()
                    .map(|(k, _)| k)
                    .collect(),
            ),
            Scan::Partial { present, gone } => (present, gone.iter().collect()),
        };
        let mut full: BTreeMap<PathBuf, Entry> = BTreeMap::new();
        // `None`: the entry vanished since the scan (the box keeps writing during a commit).
        let mut entry_of = |rel: &Path| -> Result<Option<Entry>> {
            if let Some(e) = full.get(rel) {
                return Ok(Some(e.clone()));
            }
            // Box-controlled: never through a directory it swapped for a symlink.
            let meta = match crate::fsops::read_meta_beneath(&upper_dir, rel) {
                Ok(m) => m,
                Err(crate::Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Ok(None)
                }
                Err(e) => return Err(e),
            };
            let e = Entry {
                rel: rel.to_owned(),
                meta,
                src: upper_dir.join(rel),
            };
            full.insert(rel.to_owned(), e.clone());
            Ok(Some(e))
        };
        let mut now = marks::Changes::default();
        let mut changed: BTreeSet<PathBuf> = BTreeSet::new();
        // Changed entries that hide everything below them in lower layers.
        let mut hiding: BTreeSet<PathBuf> = BTreeSet::new();
        let mut new_opaque: BTreeSet<PathBuf> = BTreeSet::new();
        for (rel, mark) in marks {
            if rel.as_os_str().is_empty() {
                continue;
            }
            let key = rel.to_str().map(str::to_owned);
            let before = key.as_ref().and_then(|k| prev.marks.get(k));
            if !before.is_some_and(|b| b.same(mark)) {
                changed.insert(rel.clone());
                // Opaque only the first time the directory is captured: later layers merge
                // with the layer that already hid the lower contents.
                let first_time = before.is_none_or(|b| b.replaced_by(mark));
                if mark.dir && first_time {
                    let Some(e) = entry_of(rel)? else {
                        continue;
                    };
                    if e.meta.xattrs.get(opaque).map(|v| v.as_slice()) == Some(b"y") {
                        new_opaque.insert(rel.clone());
                    }
                }
                if !mark.dir || new_opaque.contains(rel) {
                    hiding.insert(rel.clone());
                }
            }
            if let Some(k) = key.filter(|_| before != Some(mark)) {
                now.set.insert(k, *mark);
            }
        }
        // A changed file hard-linked to unchanged ones (the link was made before the last
        // commit, then one name moved or changed): its other names are taken too, so the
        // link lives inside this one layer. Left in an older layer, they would be separate
        // files after a checkout while the working tree shows one inode.
        // Only the changed files' inodes are looked for: the upper directory of a running
        // box holds everything it wrote, and a commit changes a few of them.
        let changed_inos: std::collections::HashSet<u64> = changed
            .iter()
            .filter_map(|rel| marks.get(rel).filter(|m| !m.dir && !m.whiteout))
            .map(|m| m.ino)
            .collect();
        let mut by_ino: std::collections::HashMap<u64, Vec<&PathBuf>> = Default::default();
        for (rel, mark) in marks {
            if !mark.dir
                && !mark.whiteout
                && changed_inos.contains(&mark.ino)
                && !rel.as_os_str().is_empty()
            {
                by_ino.entry(mark.ino).or_default().push(rel);
            }
        }
        let linked: Vec<PathBuf> = changed
            .iter()
            .filter_map(|rel| marks.get(rel).filter(|m| !m.dir && !m.whiteout))
            .filter_map(|m| by_ino.get(&m.ino).filter(|names| names.len() > 1))
            .flatten()
            .filter(|rel| !changed.contains(**rel))
            .map(|rel| (*rel).clone())
            .collect();
        for rel in linked {
            hiding.insert(rel.clone());
            changed.insert(rel);
        }
        let mut removed: Vec<PathBuf> = Vec::new();
        let mut removed_set: BTreeSet<PathBuf> = BTreeSet::new();
        for k in gone {
            now.del.push(k.clone());
            let p = PathBuf::from(k);
            let covered = p
                .ancestors()
                .skip(1)
                .any(|a| hiding.contains(a) || removed_set.contains(a));
            if !covered {
                removed_set.insert(p.clone());
                removed.push(p);
            }
        }

        // The layer's tree: the changed entries, the directories leading to them (with the
        // upper's metadata, which is the merged view's), and whiteouts for removed paths.
        let mut tree = Tree::default();
        // False when the entry (or a directory leading to it) vanished since the scan: it is
        // left out, and so is its mark, so the next commit sees it as it is then.
        let mut add_with_parents = |tree: &mut Tree, rel: &Path| -> Result<bool> {
            let mut chain = Vec::new();
            for a in rel.ancestors() {
                if tree.entries.contains_key(a) {
                    break;
                }
                if marks.contains_key(a) {
                    let Some(mut e) = entry_of(a)? else {
                        return Ok(false);
                    };
                    strip_overlay_xattrs(&mut e.meta);
                    chain.push(e);
                }
            }
            for e in chain {
                tree.entries.insert(e.rel.clone(), e);
            }
            Ok(true)
        };
        add_with_parents(&mut tree, Path::new(""))?;
        let mut vanished = Vec::new();
        for rel in &changed {
            if !add_with_parents(&mut tree, rel)? {
                vanished.push(rel);
                continue;
            }
            // The entry itself is taken as is (its parents were added without opaque marks).
            if new_opaque.contains(rel) {
                if let Some(e) = tree.entries.get_mut(rel) {
                    e.meta.xattrs.insert(opaque.into(), b"y".to_vec());
                }
            }
        }
        for rel in vanished {
            if let Some(k) = rel.to_str() {
                now.set.remove(k);
            }
        }
        let template = dirs.work.join("whiteout");
        for rel in &removed {
            if let Some(parent) = rel.parent() {
                if !add_with_parents(&mut tree, parent)? {
                    // Its directory went too: the next commit records both.
                    if let Some(k) = rel.to_str() {
                        now.del.retain(|d| d != k);
                    }
                    continue;
                }
            }
            ensure_whiteout_template(&template)?;
            let meta = read_meta(&template)?;
            tree.entries.insert(
                rel.clone(),
                Entry {
                    rel: rel.clone(),
                    src: template.clone(),
                    meta,
                },
            );
        }
        timer.lap("plan");
        let opts = CopyOpts {
            beneath: Some(upper_dir.clone()),
            ..copy_opts()
        };
        copy_tree(&tree, dst, &opts)?;
        timer.lap("copy");
        write_out(&tree, dst)?;
        timer.lap("write out");
        Ok((NewMarks::Changes(now), tree.entries.into_keys().collect()))
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
fn write_out(tree: &Tree, dst: &Path) -> Result<()> {
    let files: Vec<PathBuf> = tree
        .entries
        .values()
        .filter(|e| e.meta.kind == Kind::File)
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

impl Backend for LayersBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Layers
    }

    fn opaque_xattr(&self) -> &'static str {
        self.opaque
    }

    fn layer_dir(&self, id: &str) -> PathBuf {
        self.layers.join(id)
    }

    fn layer_from_dir(&self, src: &Path, id: &str) -> Result<LayerRecord> {
        self.durability.mark_unsynced();
        let tmp = self.tmp_layer(id);
        self.remove_tree(&tmp)?;
        fs_err::create_dir_all(&tmp)?;
        let tree = scan_tree(src)?;
        let flusher = Flusher::start(&tmp);
        copy_tree(&tree, &tmp, &copy_opts())?;
        drop(flusher);
        self.publish(id)?;
        Listing::new(None, tree.entries.keys().map(PathBuf::as_path)).write(&self.layers, id)?;
        Ok(LayerRecord::new(id, None, 1))
    }

    fn layer_from_staged(&self, staged: &Path, id: &str) -> Result<LayerRecord> {
        self.durability.mark_unsynced();
        fs_err::rename(staged, self.tmp_layer(id))?;
        self.publish(id)?;
        Ok(LayerRecord::new(id, None, 1))
    }

    fn layer_from_oci_diff(
        &self,
        staged: &Path,
        base: &[LayerRecord],
        id: &str,
    ) -> Result<LayerRecord> {
        let top = base.first().ok_or_else(|| Error::Backend {
            path: staged.to_owned(),
            message: "a layer diff needs a base layer".into(),
        })?;
        self.durability.mark_unsynced();
        // A layer that marks its root opaque hides the whole base, which overlayfs cannot
        // express (it reads no `opaque` attribute on a layer's root): it is applied like one
        // too deep to stack.
        let root_opaque = staged.join(crate::bundle::OPAQUE_MARKER).exists();
        if top.depth + 1 > self.max_depth || root_opaque {
            // Too deep to stack: store the applied result as a complete layer.
            let work = staged.with_extension("full");
            self.remove_tree(&work)?;
            fs_err::create_dir_all(&work)?;
            let dirs: Vec<PathBuf> = base.iter().map(|l| self.layer_dir(&l.id)).collect();
            let refs: Vec<&Path> = dirs.iter().map(|d| d.as_path()).collect();
            copy_tree(
                &crate::fsops::scan::scan_chain(&refs, self.opaque)?,
                &work,
                &copy_opts(),
            )?;
            crate::bundle::apply_layer(staged, &work)?;
            self.remove_tree(staged)?;
            return self.layer_from_staged(&work, id);
        }
        crate::bundle::to_overlay_layer(staged)?;
        fs_err::rename(staged, self.tmp_layer(id))?;
        self.publish(id)?;
        Ok(LayerRecord::new(id, Some(top.id.clone()), top.depth + 1))
    }

    fn empty_layer(&self, id: &str) -> Result<LayerRecord> {
        let tmp = self.tmp_layer(id);
        fs_err::create_dir_all(&tmp)?;
        self.publish(id)?;
        Ok(LayerRecord::new(id, None, 1))
    }

    fn reset_work(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<()> {
        let mut timer = agentbox_core::timing::Timer::start("reset work");
        self.unmount(dirs)?;
        timer.lap("unmount");
        failpoint::hit("checkout:after-unmount");
        // The box runs again without waiting for the removal of what it wrote.
        self.trash.discard(&dirs.work)?;
        timer.lap("set the old work area aside");
        fs_err::create_dir_all(Self::ovl(dirs))?;
        self.fresh_upper(dirs, chain)?;
        self.mount_overlay(dirs, chain)?;
        timer.lap("fresh upper and mount");
        Ok(())
    }

    fn commit(&self, dirs: &WorkDirs, chain: &[LayerRecord], id: &str) -> Result<LayerRecord> {
        let head = chain.first().ok_or_else(|| Error::Backend {
            path: dirs.work.clone(),
            message: "commit without a HEAD layer".into(),
        })?;
        if let Some(mountpoint) = &dirs.mountpoint {
            if !crate::mounts::is_our_overlay(mountpoint) {
                return Err(Error::Backend {
                    path: mountpoint.clone(),
                    message: "the working tree is not mounted (run `agentbox mount` first)".into(),
                });
            }
        }
        // What the new layer holds, for its listing (none for a folded box layer, which a
        // derive walks if it ever needs to).
        let mut listing = None;
        // The new layer's parent: HEAD's, but for a chain past the maximum depth.
        let mut parent = Some(head);
        let too_deep = head.depth + 1 > self.max_depth;
        // How many layers of the top of the chain a compaction folds into the new layer.
        let fold_top = if too_deep {
            let mut timer = agentbox_core::timing::Timer::start("compact");
            let plan = self.compaction(chain)?;
            timer.lap("plan");
            plan
        } else {
            None
        };
        let mut compacted = false;
        let now = if let Some(n) = fold_top {
            let (now, paths) = self.compact(dirs, chain, n, id)?;
            let below = chain.get(n);
            listing = Some(Listing::new(
                below.map(|b| b.id.clone()),
                paths.iter().map(PathBuf::as_path),
            ));
            parent = below;
            compacted = true;
            now
        } else if too_deep && dirs.mountpoint.is_none() {
            parent = None;
            self.flatten_box(dirs, chain, id)?
        } else if too_deep {
            parent = None;
            // Flatten: the new layer is the complete merged tree.
            self.durability.mark_unsynced();
            let tmp = self.tmp_layer(id);
            self.remove_tree(&tmp)?;
            fs_err::create_dir_all(&tmp)?;
            // The upper directory before the view: a file written in between shows new
            // metadata in the view and is copied from it.
            let upper = Self::scan_upper(dirs)?;
            let view = self.working_view(dirs, chain)?;
            let mut tree = scan_tree(&view.path)?;
            for e in tree.entries.values_mut() {
                strip_overlay_xattrs(&mut e.meta);
            }
            self.point_at_layers(&mut tree, chain, &upper)?;
            copy_tree(&tree, &tmp, &self.linking_opts())?;
            listing = Some(Listing::new(
                None,
                tree.entries.keys().map(PathBuf::as_path),
            ));
            let mut now = Captured::default();
            for (rel, e) in &upper.entries {
                if let Some(k) = rel.to_str().filter(|k| !k.is_empty()) {
                    now.marks.insert(k.to_owned(), Self::mark(&e.meta));
                }
            }
            NewMarks::Whole(now)
        } else if let Some((now, paths)) = self.try_handoff(dirs, chain, id)? {
            listing = Some(Listing::new(
                Some(head.id.clone()),
                paths.iter().map(PathBuf::as_path),
            ));
            now
        } else {
            let (now, paths) = self.capture_changes(dirs, id)?;
            listing = Some(Listing::new(
                Some(head.id.clone()),
                paths.iter().map(PathBuf::as_path),
            ));
            now
        };
        failpoint::hit("commit:after-copy");
        Self::stage_marks(dirs, now)?;
        self.publish(id)?;
        if let Some(l) = listing {
            l.write(&self.layers, id)?;
        }
        Ok(LayerRecord {
            compacted,
            ..LayerRecord::new(
                id,
                parent.map(|p| p.id.clone()),
                parent.map_or(1, |p| p.depth + 1),
            )
        })
    }

    fn make_durable(&self, files: &[PathBuf]) -> Result<()> {
        self.durability.make_durable(files)
    }

    fn unfinished_commit(&self, dirs: &WorkDirs) -> Result<Option<String>> {
        // Only while the working files are away from the upper directory; only ever a
        // layer id (the marker names a directory of the store to move).
        if Self::upper(dirs).exists() {
            return Ok(None);
        }
        Ok(Self::load_handoff(dirs)?
            .map(|h| h.layer)
            .filter(|l| agentbox_core::id::is_full_id(l)))
    }

    fn abandon(&self, dirs: &WorkDirs, id: &str) -> Result<()> {
        match Self::load_handoff(dirs)? {
            Some(h) if h.layer == id => self.give_back(dirs, id),
            _ => Ok(()),
        }
    }

    fn committed(&self, dirs: &WorkDirs, layer: &LayerRecord) -> Result<()> {
        Self::adopt_marks(dirs)?;
        if let Some(h) = Self::load_handoff(dirs)? {
            if h.layer == layer.id {
                return self.finish_handoff(dirs, &h);
            }
        }
        Ok(())
    }

    fn mount(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<()> {
        if dirs
            .mountpoint
            .as_deref()
            .is_some_and(crate::mounts::is_our_overlay)
        {
            return Ok(());
        }
        if let Some(h) = Self::load_handoff(dirs)? {
            if chain.first().is_some_and(|top| top.id == h.layer) {
                // The handoff's node is HEAD: its layer holds the upper directory's
                // entries (the same inodes), so the upper directory goes.
                return self.finish_handoff(dirs, &h);
            }
            // The commit never happened (the store's recovery gives an interrupted one's
            // files back before anything mounts; HEAD moving elsewhere discards the work
            // area, marker included): the working files are the upper directory, or still
            // under the unpublished layer's name.
            if !self.layer_dir(&h.layer).exists() {
                self.give_back(dirs, &h.layer)?;
            }
            self.adopt_strays(dirs, &h)?;
            let marker = Self::handoff_path(dirs);
            if marker.exists() {
                fs_err::remove_file(&marker)?;
            }
        }
        fs_err::create_dir_all(Self::upper(dirs))?;
        fs_err::create_dir_all(Self::ovl(dirs))?;
        self.mount_overlay(dirs, chain)
    }

    fn unmount(&self, dirs: &WorkDirs) -> Result<()> {
        // Only ever our own overlay: the user's directory may itself sit on another mount.
        let Some(mountpoint) = &dirs.mountpoint else {
            return Ok(());
        };
        while crate::mounts::is_our_overlay(mountpoint) {
            rustix::mount::unmount(mountpoint, UnmountFlags::DETACH)
                .map_err(|e| Error::Io(io_at(mountpoint, e.into())))?;
        }
        Ok(())
    }

    /// One `lstat` per entry of the upper directory, compared with the marks of the last
    /// commit: O(what changed since checkout), like a commit.
    fn box_layers(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<BoxLayers> {
        Self::box_layers_over(dirs, self.chain_dirs(chain))
    }

    /// The mount point, or (for a box) a read-only overlay of the upper directory over the
    /// chain, mounted for as long as the view lives. Whiteouts of the box's base are not
    /// part of that view: it shows the layer, not the box's whole root.
    fn working_view(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<WorkingView> {
        if let Some(mountpoint) = &dirs.mountpoint {
            return Ok(WorkingView::existing(mountpoint.clone()));
        }
        Self::box_view(dirs, self.chain_dirs(chain))
    }

    fn remove_work(&self, dirs: &WorkDirs) -> Result<()> {
        self.remove_tree(&dirs.work)
    }

    fn remove_layer(&self, id: &str) -> Result<()> {
        // Also the layer's temporary forms, as the btrfs backend does: a caller taking back
        // a failed import or derive removes whatever stage the layer reached.
        self.remove_tree(&self.tmp_layer(id))?;
        self.remove_tree(&self.scratch(id))?;
        crate::listing::remove(&self.layers, id)?;
        self.remove_tree(&self.layer_dir(id))
    }

    fn derive_layer(
        &self,
        chain: &[LayerRecord],
        plan: &crate::derive::CleanupPlan,
        id: &str,
        over_base: bool,
        base: Option<&crate::backend::BoxBase>,
    ) -> Result<LayerRecord> {
        let top = chain.first().ok_or_else(|| Error::Backend {
            path: self.layers.clone(),
            message: "derive from an empty chain".into(),
        })?;
        let tmp = self.tmp_layer(id);
        self.remove_tree(&tmp)?;
        if top.depth + 1 > self.max_depth {
            // Too deep to stack one more layer: a complete one, folded and edited in place.
            self.durability.mark_unsynced();
            // No listing: the layer is clean for this cleanup, and a derive with another one
            // walks it once if it ever needs it.
            self.fold_into(chain, &tmp, over_base, base)?;
            let whiteouts = crate::backend::apply::Whiteouts::of(over_base, base, self.opaque);
            crate::backend::apply::edit_in_place(&tmp, plan, whiteouts, &|p| self.remove_tree(p))?;
            failpoint::hit("derive:after-copy");
            self.publish(id)?;
            return Ok(LayerRecord::new(id, None, 1));
        }
        // The layer holds no file data (empty files, whiteouts, directories): like a
        // commit's layer, it is metadata made durable with the node that names it.
        let scratch = self.scratch(id);
        self.remove_tree(&scratch)?;
        fs_err::create_dir_all(&scratch)?;
        let written = self.write_edits(plan, &scratch, &tmp);
        self.remove_tree(&scratch)?;
        let paths = written?;
        failpoint::hit("derive:after-copy");
        self.publish(id)?;
        Listing::new(Some(top.id.clone()), paths.iter().map(PathBuf::as_path))
            .write(&self.layers, id)?;
        Ok(LayerRecord::new(id, Some(top.id.clone()), top.depth + 1))
    }

    fn flatten_layer(
        &self,
        chain: &[LayerRecord],
        id: &str,
        over_base: bool,
        base: Option<&crate::backend::BoxBase>,
    ) -> Result<LayerRecord> {
        self.durability.mark_unsynced();
        let tmp = self.tmp_layer(id);
        self.remove_tree(&tmp)?;
        let paths = self.fold_into(chain, &tmp, over_base, base)?;
        failpoint::hit("flatten:after-copy");
        self.publish(id)?;
        if let Some(paths) = paths {
            Listing::new(None, paths.iter().map(PathBuf::as_path)).write(&self.layers, id)?;
        }
        Ok(LayerRecord::new(id, None, 1))
    }
}

/// `work/handoff.json`: a commit is handing the upper directory to layer `layer` (renamed
/// to be it; earlier versions hard-linked its entries, so the two shared their inodes).
/// While it exists the working files may live under the layer's name, and the upper
/// directory must not be mounted as it is. [`LayersBackend::finish_handoff`] (after the
/// commit point, or at the next mount when HEAD is that layer) mounts a fresh upper
/// directory over `lowers`; [`LayersBackend::give_back`] (a commit that fails or was
/// interrupted before its commit point) moves the working files back.
#[derive(Debug, Serialize, Deserialize)]
struct Handoff {
    layer: String,
    /// The new chain's layer directories, top first.
    lowers: Vec<PathBuf>,
    /// Names in the directory under the mount point right after the unmount. Anything
    /// else found there at the remount was written through the mount point while it was
    /// unmounted: it is moved into the new working tree rather than left hidden under it.
    #[serde(default)]
    under: Vec<PathBuf>,
}

impl LayersBackend {
    fn handoff_path(dirs: &WorkDirs) -> PathBuf {
        dirs.work.join("handoff.json")
    }

    fn load_handoff(dirs: &WorkDirs) -> Result<Option<Handoff>> {
        Ok(read_json_opt(&Self::handoff_path(dirs))?)
    }

    /// Commit by handing the working files to the new layer instead of copying them, when
    /// nothing uses the working tree: the overlay is unmounted (which the kernel refuses,
    /// `EBUSY`, while any process has a file, a directory or a mapping open in it), the
    /// upper directory is renamed to be the new layer, and once the commit point has passed
    /// a fresh, empty upper directory is mounted over the new chain
    /// ([`Backend::committed`]). No byte of data is copied and no directory made, so each
    /// file is kept once on disk and the next commit looks only at what changed since this
    /// one.
    ///
    /// The unmount neither syncs the filesystem nor frees the overlay's cached inodes (10 ms
    /// and more once a large tree was walked): a detached clone of the mount taken just
    /// before keeps its superblock alive, and a background process lets go of it
    /// ([`agentbox_sys::release::close_in_background`]). The changed files' data is written
    /// out here instead, without a device flush of its own (see [`super::write_out`]).
    ///
    /// When a process holds anything open in the working tree, `None`: the caller copies
    /// the changes instead, as before, and the mount is left alone. Correctness rests on
    /// that refusal: an open file written after the commit must not change the committed
    /// layer, and with the overlay unmounted no such file exists (the clone is ours alone
    /// and is never used). For the few milliseconds between unmount and remount the mount
    /// point shows the directory under it: a process that starts using the mount point
    /// then sees it empty, and what it writes there is moved into the new working tree at
    /// the remount.
    ///
    /// Crash safety: the marker `work/handoff.json` is durable before the rename (see
    /// [`Handoff`]). Until the commit point the working files live under the layer's name:
    /// a commit that fails gives them back ([`Backend::abandon`]), and after a crash the
    /// store's recovery does ([`crate::Store::reconcile`], before it removes unfinished
    /// layers); after the commit point HEAD's layer holds them and the next mount just
    /// makes a fresh upper directory.
    fn try_handoff(
        &self,
        dirs: &WorkDirs,
        chain: &[LayerRecord],
        id: &str,
    ) -> Result<Option<(NewMarks, Vec<PathBuf>)>> {
        let Some(mountpoint) = &dirs.mountpoint else {
            return Ok(None);
        };
        let mut timer = agentbox_core::timing::Timer::start("handoff");
        // The unmount below is refused only while *this* mount is in use, but the same
        // overlay may be mounted elsewhere too (a container's volume of the directory, a
        // bind mount in another namespace): a write through such a mount after the
        // handoff would change the committed layer. Then the changes are copied instead,
        // and that mount keeps working on the live tree.
        let dev = std::os::unix::fs::MetadataExt::dev(&fs_err::metadata(mountpoint)?);
        if crate::mounts::mounted_elsewhere(mountpoint, dev) {
            return Ok(None);
        }
        timer.lap("other mounts");
        // Not having the clone (no permission, an old kernel) only makes the unmount slow.
        let held = rustix::mount::open_tree(
            rustix::fs::CWD,
            mountpoint,
            rustix::mount::OpenTreeFlags::OPEN_TREE_CLONE
                | rustix::mount::OpenTreeFlags::OPEN_TREE_CLOEXEC,
        )
        .ok();
        // The upper directories of earlier handoffs go meanwhile, on another thread.
        let trash = Self::trash_dirs(dirs)?;
        let unmounted = std::thread::scope(|s| {
            let removal = s.spawn(|| trash.iter().try_for_each(|t| self.remove_tree(t)));
            let unmounted = rustix::mount::unmount(mountpoint, UnmountFlags::empty());
            let removed = removal
                .join()
                .expect("removing a directory only returns errors, never panics");
            removed.map(|()| unmounted)
        })?;
        match unmounted {
            Ok(()) => {}
            // The clone goes with the mount still in place: its close is cheap.
            Err(rustix::io::Errno::BUSY) => return Ok(None),
            Err(e) => return Err(Error::Io(io_at(mountpoint, e.into()))),
        }
        if let Some(fd) = held {
            // A failed fork has closed it already, only slowly.
            let _ = agentbox_sys::release::close_in_background(fd);
        }
        if crate::mounts::is_our_overlay(mountpoint) {
            // Stacked overlays (left by an interrupted earlier run): put the one taken off
            // back and copy instead.
            self.mount_overlay(dirs, chain)?;
            return Ok(None);
        }
        timer.lap("unmount");
        failpoint::hit("commit:after-unmount");
        let handed = self.hand_over_upper(dirs, chain, id);
        timer.lap("hand over");
        let Err(e) = handed else {
            return handed.map(Some);
        };
        // Back to the state before the commit: the upper directory mounted as it was.
        let renamed = !Self::upper(dirs).exists();
        self.give_back(dirs, id)?;
        let marker = Self::handoff_path(dirs);
        if marker.exists() {
            fs_err::remove_file(&marker)?;
        }
        self.mount_overlay(dirs, chain)?;
        if renamed {
            Err(e)
        } else {
            // The upper directory could not become the layer (another filesystem, say):
            // the changes are copied instead.
            Ok(None)
        }
    }

    /// The handoff's layer: the upper directory renamed to `tmp_layer(id)`, its
    /// directories cleared of the overlay's bookkeeping attributes and its files' data
    /// written out (see [`Self::try_handoff`]).
    fn hand_over_upper(
        &self,
        dirs: &WorkDirs,
        chain: &[LayerRecord],
        id: &str,
    ) -> Result<(NewMarks, Vec<PathBuf>)> {
        let mut lowers = vec![self.layer_dir(id)];
        lowers.extend(self.chain_dirs(chain));
        let marker = Self::handoff_path(dirs);
        write_json_unsynced(
            &marker,
            &Handoff {
                layer: id.to_owned(),
                lowers,
                under: match &dirs.mountpoint {
                    Some(mp) => names_in(mp)?,
                    None => Vec::new(),
                },
            },
        )?;
        // Durable before the rename (on ext4/xfs by journal order).
        super::fsync_with_dirs(std::slice::from_ref(&marker))?;
        failpoint::hit("commit:after-handoff-marker");
        let dst = self.tmp_layer(id);
        self.remove_tree(&dst)?;
        fs_err::rename(Self::upper(dirs), &dst)?;
        failpoint::hit("commit:after-handover");
        let mut paths = Vec::new();
        let mut files = Vec::new();
        for entry in walkdir::WalkDir::new(&dst).follow_links(false) {
            let entry = entry.map_err(|e| {
                let path = e.path().unwrap_or(&dst).to_owned();
                Error::Io(io_at(&path, e.into()))
            })?;
            let rel = entry
                .path()
                .strip_prefix(&dst)
                .expect("walkdir yields paths below its root")
                .to_owned();
            let ft = entry.file_type();
            if ft.is_dir() && rel.as_os_str().is_empty() {
                // The root loses every overlay attribute: an opaque root would hide the
                // whole chain below it.
                strip_overlay_xattrs_at(entry.path())?;
            } else if ft.is_dir() {
                // Of the other directories' overlay attributes, a lower layer's are read
                // only for the opaque marker (which must stay); `origin` stays too. But
                // `impure` goes: overlayfs adds it after `origin`, and on ext4 the two no
                // longer fit in a 256-byte inode, so it holds a 4 KiB attribute block per
                // directory of every layer (6 MiB over 10 commits of 100 changes), which
                // its removal frees. One call, not a listing and one per attribute.
                match xattr::remove(entry.path(), IMPURE_XATTR) {
                    Ok(()) => {}
                    Err(e)
                        if e.raw_os_error() == Some(rustix::io::Errno::NODATA.raw_os_error()) => {}
                    Err(e) => return Err(Error::Io(io_at(entry.path(), e))),
                }
            } else if ft.is_file() {
                files.push(entry.path().to_owned());
            }
            if !rel.as_os_str().is_empty() {
                paths.push(rel);
            }
        }
        // Parents before children, siblings together (what a listing's readers like best).
        paths.sort();
        if super::journal_of(&dst) == super::Journal::Ordered {
            super::write_out(&files)?;
        } else {
            self.durability.mark_unsynced();
        }
        // The upper directory starts empty after the commit: nothing is captured yet.
        Ok((NewMarks::Whole(Captured::default()), paths))
    }

    /// Undo a handoff whose commit point was not reached: the working files go back from
    /// the layer's name (temporary or published) to the upper directory. Nothing to do
    /// when the upper directory is still there (the rename never happened, or the handoff
    /// was made by linking, as earlier versions did). The marker stays for the next mount,
    /// which moves in what was written at the mount point meanwhile and removes it.
    fn give_back(&self, dirs: &WorkDirs, id: &str) -> Result<()> {
        let upper = Self::upper(dirs);
        if !upper.exists() {
            for held in [self.tmp_layer(id), self.layer_dir(id)] {
                if held.exists() {
                    fs_err::rename(&held, &upper)?;
                    break;
                }
            }
        }
        Ok(())
    }

    /// After the handoff's commit point (or at the next mount): discard the upper
    /// directory, whose entries the handoff's layer holds, and mount a fresh one over the
    /// new chain.
    fn finish_handoff(&self, dirs: &WorkDirs, h: &Handoff) -> Result<()> {
        let mut timer = agentbox_core::timing::Timer::start("handoff");
        let upper = Self::upper(dirs);
        if upper.exists() {
            // Removed by the next handoff (or with the work area): only names of inodes
            // the layer keeps, and a commit need not wait for them.
            let trash = dirs
                .work
                .join(format!("{TRASH_PREFIX}{}", agentbox_core::id::new_id()));
            fs_err::rename(&upper, &trash)?;
        }
        self.remove_tree(&Self::ovl(dirs))?;
        fs_err::create_dir_all(Self::ovl(dirs))?;
        let top = h.lowers.first().ok_or_else(|| Error::Corrupt {
            path: Self::handoff_path(dirs),
            message: "a handoff without layers".into(),
        })?;
        Self::fresh_upper_from(dirs, top)?;
        self.adopt_strays(dirs, h)?;
        // Marks of the old upper directory mean nothing for the new one.
        let _ = marks::discard(dirs);
        fs_err::remove_file(Self::handoff_path(dirs))?;
        timer.lap("fresh upper");
        self.mount_lowers(dirs, &h.lowers)?;
        timer.lap("mount");
        Ok(())
    }

    /// Move into the upper directory what was written under the unmounted mount point
    /// during a handoff (see [`Handoff::under`]), so that the mount does not hide it.
    fn adopt_strays(&self, dirs: &WorkDirs, h: &Handoff) -> Result<()> {
        let Some(mp) = &dirs.mountpoint else {
            return Ok(());
        };
        let upper = Self::upper(dirs);
        for name in names_in(mp)? {
            if h.under.contains(&name) {
                continue;
            }
            let stray = mp.join(&name);
            let mut tree = scan_tree(&stray)?;
            // A plain directory: overlay attributes there mean nothing.
            for e in tree.entries.values_mut() {
                strip_overlay_xattrs(&mut e.meta);
            }
            let dst = upper.join(&name);
            self.remove_tree(&dst)?;
            copy_tree(&tree, &dst, &copy_opts())?;
            self.remove_tree(&stray)?;
        }
        Ok(())
    }

    /// Old upper directories left by [`Self::finish_handoff`].
    fn trash_dirs(dirs: &WorkDirs) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for entry in fs_err::read_dir(&dirs.work)? {
            let entry = entry?;
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(TRASH_PREFIX)
            {
                out.push(entry.path());
            }
        }
        Ok(out)
    }
}

impl LayersBackend {
    /// Where a derive keeps the templates its layer's entries are copied from. Named like a
    /// temporary layer so that `reconcile` and `prune` remove it after a crash.
    fn scratch(&self, id: &str) -> PathBuf {
        self.layers.join(format!(".tmp-{id}-scratch"))
    }

    /// Write at `dst` the overlay layer of `plan` over the tree it was computed from: the
    /// directories of `plan.dirs` (with the merged tree's metadata, without overlay
    /// markers, so they merge with the layers below), a whiteout per removed entry and an
    /// empty file (with the original's metadata; hard links kept) per emptied one.
    /// Returns the path of every entry written (the layer's listing).
    fn write_edits(
        &self,
        plan: &crate::derive::CleanupPlan,
        scratch: &Path,
        dst: &Path,
    ) -> Result<Vec<PathBuf>> {
        let mut tree = Tree::default();
        for (rel, e) in &plan.dirs {
            let mut e = e.clone();
            strip_overlay_xattrs(&mut e.meta);
            tree.entries.insert(rel.clone(), e);
        }
        if !plan.truncate.is_empty() {
            let empty = scratch.join("empty");
            fs_err::write(&empty, b"")?;
            for e in &plan.truncate {
                let mut meta = e.meta.clone();
                strip_overlay_xattrs(&mut meta);
                tree.entries.insert(
                    e.rel.clone(),
                    Entry {
                        rel: e.rel.clone(),
                        src: empty.clone(),
                        meta,
                    },
                );
            }
        }
        if !plan.delete.is_empty() {
            let template = scratch.join("whiteout");
            make_whiteout(&template)?;
            let meta = read_meta(&template)?;
            for e in &plan.delete {
                tree.entries.insert(
                    e.rel.clone(),
                    Entry {
                        rel: e.rel.clone(),
                        src: template.clone(),
                        meta: meta.clone(),
                    },
                );
            }
        }
        copy_tree(&tree, dst, &copy_opts())?;
        Ok(tree.entries.into_keys().collect())
    }
}

impl LayersBackend {
    /// Paths of the upper directory changed since the last commit's marks: all of them,
    /// or with a `hint` made against the current marks, those among the hinted ones.
    pub(super) fn changed_in_upper(
        dirs: &WorkDirs,
        hint: Option<&ChangeHint>,
    ) -> Result<Vec<(PathBuf, bool)>> {
        let mut timer = agentbox_core::timing::Timer::start("change check");
        let memo = ScanMemo::make(dirs, hint)?;
        timer.lap(match memo.scan {
            Scan::Full(_) => "load marks and scan the whole layer",
            Scan::Partial { .. } => "load marks and look at the hinted paths",
        });
        let prev = &memo.prev.captured.marks;
        let mut out = Vec::new();
        let (now, gone): (&BTreeMap<PathBuf, Mark>, Vec<(&String, &Mark)>) = match &memo.scan {
            Scan::Full(now) => (now, marks::not_found(prev, now)),
            Scan::Partial { present, gone } => (
                present,
                gone.iter().filter_map(|k| prev.get_key_value(k)).collect(),
            ),
        };
        for (rel, mark) in now {
            let Some(key) = rel.to_str().filter(|k| !k.is_empty()) else {
                continue;
            };
            if !prev.get(key).is_some_and(|b| b.same(mark)) {
                out.push((rel.clone(), mark.dir));
            }
        }
        for (key, mark) in gone {
            out.push((PathBuf::from(key), mark.dir));
        }
        // Only when a commit may follow: an idle check must not leave a scan of every
        // entry behind in a long-lived process.
        if !out.is_empty() {
            memo.keep();
        }
        Ok(out)
    }

    /// The version of the marks a change check would compare with now.
    pub(super) fn marks_version(dirs: &WorkDirs) -> Result<MarksVersion> {
        Ok(marks::load(dirs)?.version())
    }

    /// Write the tree of `chain` (top first) as one complete layer at `dst` (which must not
    /// exist). `over_base`: the chain is a box's, whose layers sit on its base (`base`, when
    /// known: only the whiteouts that hide something of it are kept), so their
    /// overlay markers must survive: the layers are folded bottom-up, each applied with its
    /// whiteouts and opaque directories kept as they are. Otherwise the merged tree is
    /// copied without markers. Data is reflinked where the filesystem can. Returns the
    /// paths written when they are known without a walk (the merged tree's).
    fn fold_into(
        &self,
        chain: &[LayerRecord],
        dst: &Path,
        over_base: bool,
        base: Option<&crate::backend::BoxBase>,
    ) -> Result<Option<Vec<PathBuf>>> {
        if !over_base {
            let dirs = self.chain_dirs(chain);
            let tree = crate::fsops::scan::scan_chain(
                &dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
                self.opaque,
            )?;
            copy_tree(&tree, dst, &self.linking_opts())?;
            return Ok(Some(tree.entries.into_keys().collect()));
        }
        let dirs = self.chain_dirs(chain);
        crate::backend::apply::fold_over_base(
            &dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
            dst,
            self.opaque,
            Some(&self.layers),
            base.map(|b| crate::backend::apply::Below::new(Vec::new(), Some(b.clone())))
                .as_ref(),
        )?;
        Ok(None)
    }

    /// How a commit of an environment or a box whose chain (`chain`, top first) is at the
    /// maximum depth folds it ([`Self::compact`]): the number of layers at the top of the
    /// chain to fold, with the commit's changes, into one layer over the layer below them;
    /// `None` for one layer of the whole chain instead (an environment's complete layer, a
    /// box's fold of all its layers). A box's bottom layer is its first one, over its base.
    ///
    /// * The commits' own layers above the topmost compacted layer, when there are at
    ///   least two of them and fewer than [`MAX_COMPACTED`] compacted layers: the cost is
    ///   what those commits changed, whatever the history below.
    /// * Otherwise every layer above the complete bottom one, when their paths, each
    ///   counted once, are at most a quarter of its entries (from the listings; a layer
    ///   without one is walked once, and keeps the result).
    /// * Otherwise none: folding most of a tree into a diff costs what a complete layer
    ///   costs, and would keep the bottom layer's replaced files on disk for as long as the
    ///   chain lives.
    fn compaction(&self, chain: &[LayerRecord]) -> Result<Option<usize>> {
        let Some((bottom, above)) = chain.split_last() else {
            return Ok(None);
        };
        if bottom.parent.is_some() || above.is_empty() {
            return Ok(None);
        }
        let commits = above.iter().take_while(|l| !l.compacted).count();
        if commits >= 2 && above.len() - commits < MAX_COMPACTED {
            return Ok(Some(commits));
        }
        let listing =
            |l: &LayerRecord| crate::listing::of_layer(&self.layers, &self.layer_dir(&l.id), l);
        // Every layer lists the directories leading to its changes, mostly the same ones.
        let mut listings = Vec::with_capacity(above.len());
        for l in above {
            match listing(l)? {
                Some(found) => listings.push(found),
                None => return Ok(None),
            }
        }
        let diff: std::collections::HashSet<&[u8]> =
            listings.iter().flat_map(Listing::paths).collect();
        Ok(listing(bottom)?
            .filter(|b| diff.len() * 4 <= b.count())
            .map(|_| above.len()))
    }

    /// The commit of an environment or a box whose chain is at the maximum depth, folding
    /// the top `n` layers of `chain` ([`Self::compaction`]): the new layer is those layers
    /// and the working changes folded into one diff over the layer below them, at a cost of
    /// what they changed, not of the whole tree; whiteouts that hide nothing of the layers
    /// below (and, for a box, of its base) are left out — all kept for a box whose base is
    /// not known. Returns the marks to record and the new layer's entries (its listing).
    fn compact(
        &self,
        dirs: &WorkDirs,
        chain: &[LayerRecord],
        n: usize,
        id: &str,
    ) -> Result<(NewMarks, Vec<PathBuf>)> {
        let (top, below) = chain.split_at(n.min(chain.len()));
        let under = self.chain_dirs(below);
        let under = match (&dirs.mountpoint, &dirs.base) {
            (Some(_), _) => Some(Below::new(under, None)),
            (None, Some(base)) => Some(Below::new(under, Some(base.clone()))),
            (None, None) => None,
        };
        let now = self.fold_with_changes(dirs, top, under, id)?;
        Ok((now, crate::listing::walk(&self.tmp_layer(id))?))
    }

    /// Flatten a box's chain plus its working changes into one layer `id`, its overlay
    /// markers kept (it sits on the box's base). With the base known (`dirs.base`), the
    /// whiteouts that hide nothing of it are left out (see `apply::idle_whiteout`).
    fn flatten_box(&self, dirs: &WorkDirs, chain: &[LayerRecord], id: &str) -> Result<NewMarks> {
        let base = dirs.base.clone().map(|b| Below::new(Vec::new(), Some(b)));
        self.fold_with_changes(dirs, chain, base, id)
    }

    /// Write `self.tmp_layer(id)`: the layers `layers` (top first) and the working changes
    /// since the last commit folded into one (`apply::fold_over_base`, over `base` when
    /// given). Files of the folded layers are linked, not copied; the working changes are
    /// captured into a scratch directory first (linked from there in turn). Returns the
    /// marks to record.
    fn fold_with_changes(
        &self,
        dirs: &WorkDirs,
        layers: &[LayerRecord],
        base: Option<Below>,
        id: &str,
    ) -> Result<NewMarks> {
        let mut timer = agentbox_core::timing::Timer::start("fold");
        self.durability.mark_unsynced();
        let tmp = self.tmp_layer(id);
        self.remove_tree(&tmp)?;
        let scratch = self.scratch(id);
        self.remove_tree(&scratch)?;
        fs_err::create_dir_all(&scratch)?;
        let folded = Self::capture_into(dirs, &scratch, self.opaque).and_then(|(now, _)| {
            timer.lap("capture");
            let mut all = vec![scratch.clone()];
            all.extend(self.chain_dirs(layers));
            crate::backend::apply::fold_over_base(
                &all.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
                &tmp,
                self.opaque,
                Some(&self.layers),
                base.as_ref(),
            )?;
            timer.lap("layers");
            Ok(now)
        });
        self.remove_tree(&scratch)?;
        folded
    }

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
