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
//! holding the copies, named `<n>`: the commit renames each copy it takes into its layer.
//! On btrfs (a rename cannot cross subvolumes, and one costs about what a reflink does) it
//! is a writable snapshot of HEAD's layer holding each copy *in place*, at its own path,
//! in the directories it needs (made as they are needed): the commit renames the snapshot
//! to be its layer, removes the copies it does not take and the directories made for
//! them only, gives the directories they touched their times back, and applies the rest
//! of its plan over the copies it keeps. A file of HEAD's layer at a copy's path is set
//! aside (in `.prestage-<nonce>/` at the snapshot's root) and put back unless the plan
//! replaces it; a directory of that layer at a file's path is left to the commit. Under the `.tmp-` prefix a crash leaves a temporary
//! layer, which the next open of the store or `prune` removes (`fsck` reports it); while
//! a [`Prestage`] lives it holds the store lock shared (see [`crate::leftovers`]).
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
    /// btrfs: the layer the area is a writable snapshot of (the copies are in place).
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
    /// The copy's path in the area: `<n>`, or in place its own path.
    name: PathBuf,
    /// The source's metadata (overlay bookkeeping left out, as a commit's plan has it).
    meta: Meta,
    /// The caller's event number when the copy began.
    seq: u64,
    bytes: u64,
    /// Whether the copy's data reached the device ([`Prestage::write_out`]).
    written: bool,
}

/// A box's copies in the making (see the module documentation). Dropped, it deletes them.
pub struct Prestage {
    upper: PathBuf,
    area: Option<Area>,
    copies: HashMap<PathBuf, Copy>,
    /// Copies whose data is not known to have reached the device yet.
    unwritten: Vec<PathBuf>,
    /// In place: the directories made for copies, parents first.
    made: Vec<PathBuf>,
    /// In place: the times (mtime) of the directories of HEAD's layer that got an entry,
    /// from before they did.
    touched: HashMap<PathBuf, (i64, i64)>,
    /// In place: the entries of HEAD's layer set aside for copies (path → where, in the
    /// area), and the name of their directory at the area's root.
    aside: HashMap<PathBuf, PathBuf>,
    aside_dir: String,
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
    pub(crate) fn new(upper: PathBuf, area: Area, lock: StoreLock, nonce: &str) -> Prestage {
        Prestage {
            upper,
            area: Some(area),
            copies: HashMap::new(),
            unwritten: Vec::new(),
            made: Vec::new(),
            touched: HashMap::new(),
            aside: HashMap::new(),
            aside_dir: format!(".prestage-{nonce}"),
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
            let _ = remove_beneath(&area.path, &old.name, false);
        }
        let in_place = area.snapshot_of.is_some();
        // In place: the copy is created through its directory's descriptor, opened beneath
        // the area without following any symlink (HEAD's layer holds the box's symlinks).
        let mut parent_fd = None;
        let (name, dst) = if in_place {
            let area_path = area.path.clone();
            let Some(parent) =
                self.dir_in_place(&area_path, rel.parent().unwrap_or(Path::new("")))?
            else {
                return Ok(Staged::Skipped);
            };
            let Some(file) = rel.file_name() else {
                return Ok(Staged::Skipped);
            };
            match rustix::fs::statat(&parent, file, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                Err(rustix::io::Errno::NOENT) => {}
                // A directory of HEAD's layer: left to the commit.
                Ok(st)
                    if rustix::fs::FileType::from_raw_mode(st.st_mode)
                        == rustix::fs::FileType::Directory =>
                {
                    return Ok(Staged::Skipped)
                }
                // Another entry of HEAD's layer: set aside, to be put back if the commit
                // does not replace it.
                Ok(_) => {
                    if !self.set_aside(&area_path, rel, &parent, file)? {
                        return Ok(Staged::Skipped);
                    }
                }
                Err(_) => return Ok(Staged::Skipped),
            }
            let dst = Path::new("/proc/self/fd")
                .join(rustix::fd::AsRawFd::as_raw_fd(&parent).to_string())
                .join(file);
            parent_fd = Some(parent);
            (rel.to_owned(), dst)
        } else {
            let name = PathBuf::from(self.next.to_string());
            self.next += 1;
            let dst = area.path.join(&name);
            (name, dst)
        };
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
        // A plain area's copies go into a layer that the commit writes out (a snapshot's
        // are made durable by the transaction that seals it): started now, waited for
        // later ([`Prestage::write_out`]), so the commit finds them on the device.
        if !in_place
            && fs_err::File::open(&dst).is_ok_and(|f| agentbox_sys::writeback::start(&f).is_ok())
        {
            self.unwritten.push(rel.to_owned());
        }
        drop(parent_fd);
        self.copies.insert(
            rel.to_owned(),
            Copy {
                name,
                meta,
                seq,
                bytes,
                written: false,
            },
        );
        Ok(Staged::Copied(bytes))
    }

    /// Wait until the data of the copies made so far reached the device (their writeback
    /// was started when they were made): a commit then need not write them out. Returns
    /// how many were waited for.
    pub fn write_out(&mut self) -> usize {
        let Some(area) = &self.area else {
            return 0;
        };
        let mut done = 0;
        for rel in std::mem::take(&mut self.unwritten) {
            let Some(copy) = self.copies.get_mut(&rel) else {
                continue;
            };
            let path = area.path.join(&copy.name);
            if fs_err::File::open(&path).is_ok_and(|f| agentbox_sys::writeback::wait(&f).is_ok()) {
                copy.written = true;
                done += 1;
            }
        }
        done
    }

    /// In place: directory `dir` of the area (relative), opened beneath it without
    /// following any symlink, made (with its missing parents) when HEAD's layer lacks it;
    /// `None` when a symlink or a non-directory of that layer is on the way. The times of
    /// the layer's directories that get an entry are recorded first.
    fn dir_in_place(&mut self, root: &Path, dir: &Path) -> Result<Option<rustix::fd::OwnedFd>> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let io = |e: rustix::io::Errno| Error::Io(crate::store::io_at(root, e.into()));
        let mut fd = rustix::fs::open(root, flags, Mode::empty()).map_err(io)?;
        let mut at = PathBuf::new();
        for part in dir.components() {
            let std::path::Component::Normal(name) = part else {
                return Ok(None);
            };
            match rustix::fs::openat(&fd, name, flags, Mode::empty()) {
                Ok(next) => fd = next,
                Err(rustix::io::Errno::NOENT) => {
                    self.touch(&at, &fd);
                    rustix::fs::mkdirat(&fd, name, Mode::from_raw_mode(0o700)).map_err(io)?;
                    self.made.push(at.join(name));
                    fd = rustix::fs::openat(&fd, name, flags, Mode::empty()).map_err(io)?;
                }
                Err(_) => return Ok(None),
            }
            at.push(name);
        }
        self.touch(&at, &fd);
        Ok(Some(fd))
    }

    /// Record the time of directory `at` (open as `fd`) of HEAD's layer before its first
    /// change (nothing for a directory made here).
    fn touch(&mut self, at: &Path, fd: &rustix::fd::OwnedFd) {
        if self.touched.contains_key(at) || self.made.iter().any(|m| m == at) {
            return;
        }
        if let Ok(st) = rustix::fs::statat(fd, "", rustix::fs::AtFlags::EMPTY_PATH) {
            self.touched
                .insert(at.to_owned(), (st.st_mtime, st.st_mtime_nsec as i64));
        }
    }

    /// In place: move the entry `file` of HEAD's layer at `rel` (in directory `parent`)
    /// into the area's directory of set-aside entries (made at its root when first
    /// needed), so a copy can take its place; whether it was moved.
    fn set_aside(
        &mut self,
        root: &Path,
        rel: &Path,
        parent: &rustix::fd::OwnedFd,
        file: &std::ffi::OsStr,
    ) -> Result<bool> {
        use rustix::fs::{Mode, OFlags};
        if self.aside.contains_key(rel) {
            // Set aside before; what is there is a stranger's (cannot be: only copies).
            return Ok(false);
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let io = |e: rustix::io::Errno| Error::Io(crate::store::io_at(root, e.into()));
        let root_fd = rustix::fs::open(root, flags, Mode::empty()).map_err(io)?;
        let dir = PathBuf::from(&self.aside_dir);
        if self.aside.is_empty() {
            self.touch(Path::new(""), &root_fd);
            match rustix::fs::mkdirat(&root_fd, &dir, Mode::from_raw_mode(0o700)) {
                Ok(()) => {}
                // Not ours (HEAD's layer holds the name): nothing is set aside.
                Err(_) => return Ok(false),
            }
        }
        let dir_fd = rustix::fs::openat(&root_fd, &dir, flags, Mode::empty()).map_err(io)?;
        let name = self.next.to_string();
        self.next += 1;
        rustix::fs::renameat(parent, file, &dir_fd, name.as_str()).map_err(io)?;
        self.aside.insert(rel.to_owned(), dir.join(name));
        Ok(true)
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
        let copies: HashMap<PathBuf, Offered> = std::mem::take(&mut self.copies)
            .into_iter()
            .map(|(p, c)| {
                let valid = valid(&p, c.seq);
                (
                    p,
                    Offered {
                        name: c.name,
                        meta: c.meta,
                        written: c.written,
                        valid,
                    },
                )
            })
            .collect();
        let offered = Arc::new(Prestaged {
            upper: self.upper.clone(),
            root: Mutex::new(None),
            area: Mutex::new(self.area.take()),
            copies: Mutex::new(copies),
            made: std::mem::take(&mut self.made),
            touched: std::mem::take(&mut self.touched),
            aside: std::mem::take(&mut self.aside),
            aside_dir: PathBuf::from(&self.aside_dir),
            written: Mutex::new(std::collections::HashSet::new()),
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

    /// How many copies are offered as valid and not taken.
    pub fn left(&self) -> usize {
        lock(&self.0.copies).values().filter(|c| c.valid).count()
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

/// One copy as offered.
struct Offered {
    name: PathBuf,
    meta: Meta,
    /// Its data reached the device.
    written: bool,
    /// The caller vouched for it (see [`Prestage::offer`]).
    valid: bool,
}

/// Copies offered to a commit (see [`Prestage::offer`]).
pub struct Prestaged {
    upper: PathBuf,
    /// In place: the layer the area became ([`Prestaged::take_snapshot`]).
    root: Mutex<Option<PathBuf>>,
    /// The area while no commit took it as its layer.
    area: Mutex<Option<Area>>,
    copies: Mutex<HashMap<PathBuf, Offered>>,
    made: Vec<PathBuf>,
    touched: HashMap<PathBuf, (i64, i64)>,
    aside: HashMap<PathBuf, PathBuf>,
    aside_dir: PathBuf,
    /// The paths of the copies taken whose data had reached the device.
    written: Mutex<std::collections::HashSet<PathBuf>>,
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
    /// A plain area's copy to rename to `entry`'s place instead of copying it: only when
    /// `entry` is a file of the upper directory the copies were made from, with exactly the
    /// copy's metadata. The copy is the caller's from then on.
    pub(crate) fn take(&self, entry: &Entry) -> Option<PathBuf> {
        if entry.meta.kind != Kind::File {
            return None;
        }
        let rel = entry.src.strip_prefix(&self.upper).ok()?;
        let area = lock(&self.area).as_ref()?.path.clone();
        let name = {
            let mut copies = lock(&self.copies);
            let c = copies.get(rel)?;
            if !c.valid || c.meta != entry.meta {
                return None;
            }
            let c = copies.remove(rel)?;
            if c.written {
                lock(&self.written).insert(rel.to_owned());
            }
            c.name
        };
        self.taken.fetch_add(1, Ordering::Relaxed);
        Some(area.join(name))
    }

    /// Whether the copy taken for path `rel` had its data on the device already: a commit
    /// need not write it out.
    pub(crate) fn written(&self, rel: &Path) -> bool {
        lock(&self.written).contains(rel)
    }

    /// Whether copies are held in a plain directory (`layers`), which any commit of the
    /// same filesystem can take from.
    pub(crate) fn plain(&self) -> bool {
        lock(&self.area)
            .as_ref()
            .is_some_and(|a| a.snapshot_of.is_none())
    }

    /// btrfs: when the area is a writable snapshot of layer `top`, rename it to `dst` to be
    /// the commit's layer; whether it was. The commit then calls
    /// [`Prestaged::settle_in_place`] before it applies its plan.
    pub(crate) fn take_snapshot(&self, top: &str, dst: &Path) -> Result<bool> {
        let mut area = lock(&self.area);
        let Some(a) = area
            .as_ref()
            .filter(|a| a.snapshot_of.as_deref() == Some(top))
        else {
            return Ok(false);
        };
        fs_err::rename(&a.path, dst)?;
        *area = None;
        *lock(&self.root) = Some(dst.to_owned());
        Ok(true)
    }

    /// btrfs, once the snapshot is the commit's layer (at `root`) and its plan `tree` is
    /// made: keep the copies that are exactly the plan's files (valid, same metadata, no
    /// directory above them replaced by the plan: an opaque one is emptied when applied),
    /// remove every other copy and the directories made for copies that the plan does not
    /// hold, and give the layer's directories that the plan does not hold their times back.
    /// Returns the paths kept, which the apply leaves as they are.
    pub(crate) fn settle_in_place(
        &self,
        tree: &crate::fsops::Tree,
        opaque: &str,
    ) -> Result<std::collections::HashSet<PathBuf>> {
        let Some(root) = lock(&self.root).clone() else {
            return Ok(Default::default());
        };
        let replaced = |rel: &Path| {
            rel.ancestors().skip(1).any(|a| {
                tree.entries
                    .get(a)
                    .is_some_and(|e| crate::fsops::scan::is_opaque(&e.meta, opaque))
            })
        };
        let unplanned_dir = |rel: &Path| {
            rel.ancestors()
                .skip(1)
                .any(|a| self.made.iter().any(|m| m == a) && !tree.entries.contains_key(a))
        };
        let mut kept = std::collections::HashSet::new();
        for (rel, c) in std::mem::take(&mut *lock(&self.copies)) {
            let exact = c.valid
                && tree
                    .entries
                    .get(&rel)
                    .is_some_and(|e| e.meta.kind == Kind::File && e.meta == c.meta);
            if exact && !replaced(&rel) && !unplanned_dir(&rel) {
                kept.insert(rel);
            } else {
                remove_beneath(&root, &c.name, false)?;
            }
        }
        // What was set aside goes back where the plan leaves the path as HEAD's layer
        // had it; otherwise the copy or the plan's entry replaces it.
        for (rel, at) in &self.aside {
            if kept.contains(rel) || tree.entries.contains_key(rel) {
                remove_beneath(&root, at, false)?;
            } else {
                put_back(&root, at, rel)?;
            }
        }
        if !self.aside.is_empty() {
            remove_beneath(&root, &self.aside_dir, true)?;
        }
        for dir in self.made.iter().rev() {
            if !tree.entries.contains_key(dir) {
                remove_beneath(&root, dir, true)?;
            }
        }
        for (dir, (sec, nsec)) in &self.touched {
            if tree.entries.contains_key(dir) {
                continue;
            }
            let fd = crate::fsops::scan::open_dir_beneath(&root, dir)
                .map_err(|e| Error::Io(crate::store::io_at(&root.join(dir), e)))?;
            let proc =
                Path::new("/proc/self/fd").join(rustix::fd::AsRawFd::as_raw_fd(&fd).to_string());
            let dir_fd = rustix::fs::open(
                &proc,
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| Error::Io(crate::store::io_at(&root.join(dir), e.into())))?;
            crate::bundle::fsutil::set_mtime_fd(&std::fs::File::from(dir_fd), *sec, *nsec)
                .map_err(|e| Error::Io(crate::store::io_at(&root.join(dir), e)))?;
        }
        self.taken.store(kept.len() as u64, Ordering::Relaxed);
        Ok(kept)
    }
}

/// Move the entry at `from` of the store's own tree `root` back to `to`, both directories
/// opened beneath `root` without following any symlink.
fn put_back(root: &Path, from: &Path, to: &Path) -> Result<()> {
    let io = |e: std::io::Error| Error::Io(crate::store::io_at(&root.join(to), e));
    let (Some(fp), Some(fname), Some(tp), Some(tname)) =
        (from.parent(), from.file_name(), to.parent(), to.file_name())
    else {
        return Ok(());
    };
    let from_dir = crate::fsops::scan::open_dir_beneath(root, fp).map_err(io)?;
    let to_dir = crate::fsops::scan::open_dir_beneath(root, tp).map_err(io)?;
    rustix::fs::renameat(&from_dir, fname, &to_dir, tname).map_err(|e| io(e.into()))
}

/// Remove `rel` (a file, or with `dir` an empty directory) of the store's own tree
/// `root`, through its directory opened beneath `root` without following any symlink.
fn remove_beneath(root: &Path, rel: &Path, dir: bool) -> Result<()> {
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Ok(());
    };
    let io = |e: std::io::Error| Error::Io(crate::store::io_at(&root.join(rel), e));
    let fd = crate::fsops::scan::open_dir_beneath(root, parent).map_err(io)?;
    let flags = if dir {
        rustix::fs::AtFlags::REMOVEDIR
    } else {
        rustix::fs::AtFlags::empty()
    };
    match rustix::fs::unlinkat(&fd, name, flags) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(io(e.into())),
    }
}

impl Drop for Prestaged {
    fn drop(&mut self) {
        if let Some(area) = lock(&self.area).take() {
            let _ = remove_area(&area);
        }
    }
}
