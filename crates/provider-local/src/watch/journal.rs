//! The journal of a recording [`Watcher`]: every path of the watched tree with an event,
//! numbered in the order read, and, while someone taps it, the paths in order and the
//! directories that moved.

use super::*;

/// The paths of the tree a recording watcher saw events for, each with the number of the
/// last one (events are numbered in the order they were read).
///
/// Complete while nothing is lost: every change to the tree since the watcher was built
/// raised an event on one of these paths (a new directory's contents are not listed: its
/// own path stands for them), except writes through a shared mapping while the file is
/// still open or mapped (see the watcher's event mask, `change_mask`).
#[derive(Debug, Default)]
pub struct Journal {
    paths: HashMap<PathBuf, u64>,
    pub(super) seq: u64,
    /// The number of the last event before the kernel's queue last overflowed.
    pub(super) lost: Option<u64>,
    /// While someone taps the journal ([`Journal::tap`]): the paths recorded since they
    /// last took them, in order, repeats included; `None` once more than [`TAP_MAX`]
    /// waited (the tap is broken: [`Journal::tapped`] says so).
    tap: Option<Option<Vec<PathBuf>>>,
    /// While tapped: the directories that appeared or went at a path (created, removed,
    /// moved in or out), with the number of the last such event.
    moves: HashMap<PathBuf, u64>,
}

/// The most paths a tap holds between two takes.
const TAP_MAX: usize = 1 << 20;

impl Journal {
    pub(super) fn record(&mut self, rel: PathBuf) {
        self.seq += 1;
        if let Some(tap) = &mut self.tap {
            match tap {
                Some(t) if t.len() < TAP_MAX => t.push(rel.clone()),
                _ => *tap = None,
            }
        }
        self.paths.insert(rel, self.seq);
    }

    /// Start (or restart, emptied) keeping every recorded path for [`Journal::tapped`].
    pub fn tap(&mut self) {
        self.tap = Some(Some(Vec::new()));
        self.moves.clear();
    }

    /// Stop keeping paths for a tap.
    pub fn untap(&mut self) {
        self.tap = None;
        self.moves = HashMap::new();
    }

    /// The last event (just recorded) made or removed a directory at `rel`.
    pub(super) fn moved(&mut self, rel: &Path) {
        if self.tap.is_some() {
            self.moves.insert(rel.to_owned(), self.seq);
        }
    }

    /// Since the tap began: the number of the last event that made or removed a directory
    /// at `rel` (which changes what every path below it names; a change of the directory's
    /// own attributes does not).
    pub fn last_move(&self, rel: &Path) -> Option<u64> {
        self.moves.get(rel).copied()
    }

    /// The paths recorded since the tap began or since the last call, oldest first;
    /// `None` when there is no tap or it broke (too many waited).
    pub fn tapped(&mut self) -> Option<Vec<PathBuf>> {
        match &mut self.tap {
            Some(Some(t)) => Some(std::mem::take(t)),
            _ => None,
        }
    }

    /// The number of the last event recorded on `rel`, if the journal holds one.
    pub fn last_event(&self, rel: &Path) -> Option<u64> {
        self.paths.get(rel).copied()
    }

    /// The number of the last event recorded.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether events were lost since the journal was last found complete.
    pub fn lost(&self) -> bool {
        self.lost.is_some()
    }

    /// A look at the whole tree made after event number `upto` covers what was lost before.
    pub fn recovered(&mut self, upto: u64) {
        if self.lost.is_some_and(|l| l <= upto) {
            self.lost = None;
        }
    }

    /// Every recorded path.
    pub fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        self.paths.keys()
    }

    /// Forget the paths whose last event is number `upto` or earlier.
    pub fn forget_upto(&mut self, upto: u64) {
        self.paths.retain(|_, s| *s > upto);
    }

    /// Record `rel` as if it had an event numbered `seq` (a path known to differ from the
    /// marks, which must stay until a commit takes it).
    pub fn keep(&mut self, rel: PathBuf, seq: u64) {
        let s = self.paths.entry(rel).or_insert(seq);
        *s = (*s).max(seq);
    }
}
