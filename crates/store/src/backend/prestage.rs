//! Copies of a box's files made while its command still runs ("prestaging"), which the
//! command's commit renames into its layer instead of copying the files then.
//!
//! Why: a command that installs thousands of files (`pip install`, `npm install`) waited
//! at its end for the commit to copy all of them into the new layer (0.5–0.8 s for the
//! ~5,000 files of `pip install django pytest`). Most of them stopped changing long before
//! the command ended: the box's supervisor copies those while the command runs, on the
//! core the command leaves idle, and the commit takes the copies that are still exact.
//!
//! On disk: `layers/.tmp-prestage-<nonce>/`, the *area*. On `layers` it is a directory
//! holding the copies, named `<n>`. On btrfs it is a writable snapshot of HEAD's layer
//! holding them in `.prestage-<nonce>/` at its root (a rename cannot cross subvolumes):
//! the commit renames the snapshot to be its temporary layer, moves the copies to their
//! places and removes that directory before it seals the layer. Under the `.tmp-` prefix
//! a crash leaves a temporary layer, which `fsck` reports and `prune` removes; while a
//! [`Prestage`] lives it holds the store lock shared (see [`crate::leftovers`]).
//!
//! Invariants (a node is exactly the box's tree when the command ended):
//! * a copy is made only of a regular file with one link, opened beneath the upper
//!   directory without following any symlink (the box controls that tree), whose change
//!   time is at least [`SETTLED`] old; it carries the metadata read (beneath, too) before
//!   the copy, and is dropped unless the metadata read after it is the same;
//! * a commit takes a copy only for an entry of its plan whose source is the same path of
//!   the same upper directory and whose metadata (inode, size, times to the nanosecond,
//!   owner, mode, xattrs) equals the copy's: the change time moves with every write and
//!   attribute change, and, the copy being [`SETTLED`] after the last one, a later one
//!   gets another. What metadata cannot tell (a write through a shared mapping), the
//!   caller rules out before it offers the copies ([`Prestage::offer`] with the paths
//!   whose copies are still valid for its watcher: no event on the path or its
//!   directories since the copy, not held open by the box);
//! * whatever is not taken is deleted when the offer ends.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fsops::copy::{copy_entry, CopyOpts};
use crate::fsops::scan::{read_meta_beneath, strip_overlay_xattrs};
use crate::fsops::{Entry, Kind, Meta};
use crate::inflight::StoreLock;
use crate::{Error, Result};

/// How old a file's change time must be before it is copied: any later write or
/// attribute change then gives the file another change time, whatever the clock's grain.
pub const SETTLED: Duration = Duration::from_millis(50);

/// Name prefix of an area in `layers/` (see the module documentation).
pub(crate) const AREA_PREFIX: &str = ".tmp-prestage-";

/// Where a backend keeps the copies of one prestage.
#[derive(Debug)]
pub struct Area {
    /// `layers/.tmp-prestage-<nonce>`.
    pub(crate) path: PathBuf,
    /// The directory of the copies: the area, or (btrfs) a directory at its root.
    pub(crate) files: PathBuf,
    /// btrfs: the layer the area is a writable snapshot of.
    pub(crate) snapshot_of: Option<String>,
}

/// What [`Prestage::stage`] did with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Staged {
    /// Copied: this many bytes.
    Copied(u64),
    /// Changed too recently: to be asked again later.
    TooNew,
    /// A directory: the caller may look at the files below it ([`Prestage::files_below`]).
    Directory,
    /// Not a candidate (not a regular file with one link, gone, changed while copied).
    Skipped,
}

struct Copy {
    /// The copy's name in the area's file directory.
    name: String,
    /// The source's metadata (overlay bookkeeping left out, as a commit's plan has it).
    meta: Meta,
    /// The caller's event number when the copy began.
    seq: u64,
    bytes: u64,
}

/// A box's copies in the making (see the module documentation). Dropped, it deletes them.
pub struct Prestage {
    upper: PathBuf,
    area: Option<Area>,
    copies: HashMap<PathBuf, Copy>,
    next: u64,
    bytes: u64,
    lock: Option<StoreLock>,
}

impl std::fmt::Debug for Prestage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prestage")
            .field("upper", &self.upper)
            .field("area", &self.area)
            .field("copies", &self.copies.len())
            .finish_non_exhaustive()
    }
}

/// Remove an area: a btrfs snapshot, or a directory.
fn remove_area(area: &Area) -> Result<()> {
    if area.snapshot_of.is_some() {
        crate::backend::btrfs::remove_any(&area.path)
    } else {
        match fs_err::remove_dir_all(&area.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

impl Prestage {
    pub(crate) fn new(upper: PathBuf, area: Area, lock: StoreLock) -> Prestage {
        Prestage {
            upper,
            area: Some(area),
            copies: HashMap::new(),
            next: 0,
            bytes: 0,
            lock: Some(lock),
        }
    }

    /// The upper directory the copies are made from.
    pub fn upper(&self) -> &Path {
        &self.upper
    }

    /// How many copies are held, and their bytes.
    pub fn size(&self) -> (usize, u64) {
        (self.copies.len(), self.bytes)
    }

    /// Whether the filesystem of the area has less than `floor` bytes free (or than a
    /// twentieth of its size, whichever is more): then nothing more should be staged.
    pub fn space_low(&self, floor: u64) -> bool {
        let Some(area) = &self.area else {
            return true;
        };
        match rustix::fs::statvfs(&area.path) {
            Ok(s) => {
                let free = s.f_bavail.saturating_mul(s.f_frsize);
                let total = s.f_blocks.saturating_mul(s.f_frsize);
                free < floor.max(total / 20)
            }
            Err(_) => true,
        }
    }

    /// Copy the upper directory's file `rel` into the area, recording `seq` (the caller's
    /// event number before this call: see the module documentation) with it. A copy made
    /// earlier of the same path is replaced.
    pub fn stage(&mut self, rel: &Path, seq: u64) -> Result<Staged> {
        let Some(area) = &self.area else {
            return Ok(Staged::Skipped);
        };
        if rel.as_os_str().is_empty() || rel.is_absolute() {
            return Ok(Staged::Skipped);
        }
        // Box-controlled: never through a directory it swapped for a symlink.
        let Ok(mut meta) = read_meta_beneath(&self.upper, rel) else {
            return Ok(Staged::Skipped);
        };
        if meta.kind == Kind::Dir {
            return Ok(Staged::Directory);
        }
        if meta.kind != Kind::File || meta.nlink != 1 {
            return Ok(Staged::Skipped);
        }
        if !settled(&meta) {
            return Ok(Staged::TooNew);
        }
        strip_overlay_xattrs(&mut meta);
        if let Some(old) = self.copies.remove(rel) {
            self.bytes -= old.bytes;
            let _ = fs_err::remove_file(area.files.join(&old.name));
        }
        let name = self.next.to_string();
        self.next += 1;
        let dst = area.files.join(&name);
        let entry = Entry {
            rel: rel.to_owned(),
            src: self.upper.join(rel),
            meta: meta.clone(),
        };
        // The options of a commit's copy (an owner that cannot be set is no copy at all).
        let opts = CopyOpts {
            reflink: true,
            beneath: Some(self.upper.clone()),
            ..CopyOpts::default()
        };
        if copy_entry(&entry, &dst, &opts).is_err() {
            let _ = fs_err::remove_file(&dst);
            return Ok(Staged::Skipped);
        }
        let same = read_meta_beneath(&self.upper, rel).is_ok_and(|mut after| {
            strip_overlay_xattrs(&mut after);
            after == meta
        });
        if !same {
            let _ = fs_err::remove_file(&dst);
            return Ok(Staged::Skipped);
        }
        let bytes = meta.size;
        self.bytes += bytes;
        self.copies.insert(
            rel.to_owned(),
            Copy {
                name,
                meta,
                seq,
                bytes,
            },
        );
        Ok(Staged::Copied(bytes))
    }

    /// The regular files below directory `rel` of the upper directory (relative to it),
    /// listed beneath it without following any symlink. A directory that cannot be read
    /// (gone, swapped for a symlink) lists nothing.
    pub fn files_below(&self, rel: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut todo = vec![rel.to_owned()];
        while let Some(dir) = todo.pop() {
            let Ok(fd) = crate::fsops::scan::open_dir_beneath(&self.upper, &dir) else {
                continue;
            };
            // `O_PATH` descriptors cannot be listed: reopen the directory itself.
            let Ok(fd) = rustix::fs::openat(
                &fd,
                ".",
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            ) else {
                continue;
            };
            let Ok(mut entries) = rustix::fs::Dir::read_from(&fd) else {
                continue;
            };
            while let Some(Ok(e)) = entries.next() {
                let name = e.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                let child =
                    dir.join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name));
                match e.file_type() {
                    rustix::fs::FileType::Directory => todo.push(child),
                    rustix::fs::FileType::RegularFile => out.push(child),
                    _ => {}
                }
            }
        }
        out
    }

    /// Whether a copy of `rel` is held.
    pub fn holds(&self, rel: &Path) -> bool {
        self.copies.contains_key(rel)
    }

    /// Every copy held: its path and the event number recorded with it.
    pub fn copies(&self) -> impl Iterator<Item = (&Path, u64)> {
        self.copies.iter().map(|(p, c)| (p.as_path(), c.seq))
    }

    /// Offer the copies for which `valid` (path, event number) holds to the commits made
    /// on this thread while the returned guard lives (see [`offered`]); the rest, and
    /// whatever no commit takes, are deleted with the guard.
    pub fn offer(mut self, valid: impl Fn(&Path, u64) -> bool) -> Offer {
        let copies: HashMap<PathBuf, (String, Meta)> = std::mem::take(&mut self.copies)
            .into_iter()
            .filter(|(p, c)| valid(p, c.seq))
            .map(|(p, c)| (p, (c.name, c.meta)))
            .collect();
        let offered = Arc::new(Prestaged {
            upper: self.upper.clone(),
            files: Mutex::new(self.area.as_ref().map(|a| a.files.clone())),
            area: Mutex::new(self.area.take()),
            copies: Mutex::new(copies),
            taken: AtomicU64::new(0),
            _lock: self.lock.take(),
        });
        OFFERED.with(|o| *o.borrow_mut() = Some(offered.clone()));
        Offer(offered)
    }
}

impl Drop for Prestage {
    fn drop(&mut self) {
        if let Some(area) = self.area.take() {
            let _ = remove_area(&area);
        }
    }
}

/// Whether `meta`'s change time is at least [`SETTLED`] old.
fn settled(meta: &Meta) -> bool {
    let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) else {
        return false;
    };
    let (Ok(sec), Ok(nsec)) = (
        u64::try_from(meta.ctime_sec),
        u32::try_from(meta.ctime_nsec),
    ) else {
        return false;
    };
    Duration::new(sec, nsec)
        .checked_add(SETTLED)
        .is_some_and(|ready| ready <= now)
}

thread_local! {
    static OFFERED: std::cell::RefCell<Option<Arc<Prestaged>>> = const { std::cell::RefCell::new(None) };
}

/// The copies offered to commits on this thread, if any (see [`Prestage::offer`]).
pub(crate) fn offered() -> Option<Arc<Prestaged>> {
    OFFERED.with(|o| o.borrow().clone())
}

/// Holds an offer of copies (see [`Prestage::offer`]) until dropped.
#[must_use = "the copies are offered while the guard lives"]
pub struct Offer(Arc<Prestaged>);

impl Offer {
    /// How many copies commits took so far.
    pub fn taken(&self) -> u64 {
        self.0.taken.load(Ordering::Relaxed)
    }

    /// How many copies are offered and not taken.
    pub fn left(&self) -> usize {
        lock(&self.0.copies).len()
    }
}

impl Drop for Offer {
    fn drop(&mut self) {
        OFFERED.with(|o| {
            let mut o = o.borrow_mut();
            if o.as_ref().is_some_and(|p| Arc::ptr_eq(p, &self.0)) {
                *o = None;
            }
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Copies offered to a commit (see [`Prestage::offer`]).
pub struct Prestaged {
    upper: PathBuf,
    /// The directory of the copies now (it moves with a btrfs area a commit took).
    files: Mutex<Option<PathBuf>>,
    /// The area while no commit took it as its layer.
    area: Mutex<Option<Area>>,
    copies: Mutex<HashMap<PathBuf, (String, Meta)>>,
    taken: AtomicU64,
    _lock: Option<StoreLock>,
}

impl std::fmt::Debug for Prestaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prestaged")
            .field("upper", &self.upper)
            .finish_non_exhaustive()
    }
}

impl Prestaged {
    /// The copy to rename to `entry`'s place instead of copying it: only when `entry` is a
    /// file of the upper directory the copies were made from, with exactly the copy's
    /// metadata. The copy is the caller's from then on.
    pub(crate) fn take(&self, entry: &Entry) -> Option<PathBuf> {
        if entry.meta.kind != Kind::File {
            return None;
        }
        let rel = entry.src.strip_prefix(&self.upper).ok()?;
        let name = {
            let mut copies = lock(&self.copies);
            if copies.get(rel)?.1 != entry.meta {
                return None;
            }
            copies.remove(rel)?.0
        };
        let files = lock(&self.files).clone()?;
        self.taken.fetch_add(1, Ordering::Relaxed);
        Some(files.join(name))
    }

    /// How many copies commits took so far.
    pub(crate) fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    /// Whether copies are held in a plain directory (`layers`), which any commit of the
    /// same filesystem can take from.
    pub(crate) fn plain(&self) -> bool {
        lock(&self.area)
            .as_ref()
            .is_some_and(|a| a.snapshot_of.is_none())
    }

    /// btrfs: when the area is a writable snapshot of layer `top`, rename it to `dst` (to be
    /// the commit's layer) and return the directory of the copies inside it, which the
    /// commit removes (see [`Prestaged::finish`]) before it seals the layer.
    pub(crate) fn take_snapshot(&self, top: &str, dst: &Path) -> Result<Option<PathBuf>> {
        let mut area = lock(&self.area);
        let Some(a) = area
            .as_ref()
            .filter(|a| a.snapshot_of.as_deref() == Some(top))
        else {
            return Ok(None);
        };
        let inner = a.files.strip_prefix(&a.path).map_err(|_| Error::Backend {
            path: a.files.clone(),
            message: "the copies are not inside the prestage snapshot".into(),
        })?;
        let inner = dst.join(inner);
        fs_err::rename(&a.path, dst)?;
        *area = None;
        *lock(&self.files) = Some(inner.clone());
        Ok(Some(inner))
    }

    /// btrfs: after the commit applied its tree to the snapshot it took, remove the
    /// directory of the copies (`inner`) and give the layer's root `root_mtime` back.
    pub(crate) fn finish(&self, inner: &Path, root_mtime: (i64, i64)) -> Result<()> {
        *lock(&self.files) = None;
        lock(&self.copies).clear();
        fs_err::remove_dir_all(inner)?;
        let root = inner.parent().unwrap_or(Path::new("/"));
        crate::bundle::fsutil::set_mtime(root, root_mtime.0, root_mtime.1)
            .map_err(|e| Error::Io(crate::store::io_at(root, e)))
    }
}

impl Drop for Prestaged {
    fn drop(&mut self) {
        if let Some(area) = lock(&self.area).take() {
            let _ = remove_area(&area);
        }
    }
}
