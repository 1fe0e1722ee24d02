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
//!
//! By concern: making the copies (`copier`), offering them to a commit and matching them
//! against its plan (`offer`), and the cleanup of a btrfs area taken as a layer (`settle`).

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

mod copier;
mod offer;
mod settle;

pub(crate) use offer::offered;
pub use offer::{Offer, Prestaged};
use settle::remove_beneath;

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

    /// Whether a copy of `rel` is held.
    pub fn holds(&self, rel: &Path) -> bool {
        self.copies.contains_key(rel)
    }

    /// Every copy held: its path and the event number recorded with it.
    pub fn copies(&self) -> impl Iterator<Item = (&Path, u64)> {
        self.copies.iter().map(|(p, c)| (p.as_path(), c.seq))
    }
}

impl Drop for Prestage {
    fn drop(&mut self) {
        if let Some(area) = self.area.take() {
            let _ = remove_area(&area);
        }
    }
}

/// A mutex's guard, also after a panic elsewhere (what it guards stays consistent: every
/// change is one assignment).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
