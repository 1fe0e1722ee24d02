//! The offer of copies to a command's commit, and the matching there: a copy is taken
//! only for a plan entry of the same path with exactly the copy's metadata.

use super::*;

impl Prestage {
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

/// One copy as offered.
pub(super) struct Offered {
    pub(super) name: PathBuf,
    pub(super) meta: Meta,
    /// Its data reached the device.
    pub(super) written: bool,
    /// The caller vouched for it (see [`Prestage::offer`]).
    pub(super) valid: bool,
}

/// Copies offered to a commit (see [`Prestage::offer`]).
pub struct Prestaged {
    pub(super) upper: PathBuf,
    /// In place: the layer the area became ([`Prestaged::take_snapshot`]).
    pub(super) root: Mutex<Option<PathBuf>>,
    /// The area while no commit took it as its layer.
    pub(super) area: Mutex<Option<Area>>,
    pub(super) copies: Mutex<HashMap<PathBuf, Offered>>,
    pub(super) made: Vec<PathBuf>,
    pub(super) touched: HashMap<PathBuf, (i64, i64)>,
    pub(super) aside: HashMap<PathBuf, PathBuf>,
    pub(super) aside_dir: PathBuf,
    /// The paths of the copies taken whose data had reached the device.
    pub(super) written: Mutex<std::collections::HashSet<PathBuf>>,
    pub(super) taken: AtomicU64,
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
}

impl Drop for Prestaged {
    fn drop(&mut self) {
        if let Some(area) = lock(&self.area).take() {
            let _ = remove_area(&area);
        }
    }
}
