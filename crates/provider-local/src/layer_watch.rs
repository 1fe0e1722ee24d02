//! The watcher of a box's layer, shared by the capture loop (which waits for its events and
//! rebuilds it when needed) and the change check after every command (which first reads
//! what is pending, then hands the store the paths with events as a [`ChangeHint`]).
//!
//! Why: the check otherwise looks at every entry of the layer, and a box's layer keeps
//! everything the box wrote since it started (an `npm install` is tens of thousands of
//! entries), so every command paid for all of it.
//!
//! When the hint is given, and when not:
//! * The journal ([`Journal`]) is *armed* against one version of the store's marks: after a
//!   check that looked at the whole layer, it holds what that check found changed plus every
//!   event since the check began. It is then complete against those marks, and stays so
//!   while the marks do not change behind its back: every commit made through the check
//!   re-arms it against the new marks, any other commit or reset changes the version, so
//!   the store ignores the hint and looks at everything (and the journal is re-armed).
//! * A lost event (queue overflow), a watcher that failed or was rebuilt, or a layer that
//!   is not the watched one: no hint.
//! * Writes through a shared writable mapping raise no event while the file stays open:
//!   every file a box process holds open or mapped is added to the hint (see
//!   [`crate::held_files`]); if they cannot be listed, no hint.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use agentbox_store::{ChangeHint, MarksVersion};

use crate::watch::{Seen, WatchError, Watcher};

/// Reads of pending events a check makes at most before it gives up on a hint (a box that
/// writes without pause could otherwise keep it reading).
const MAX_DRAINS: usize = 16;

/// See the module documentation.
#[derive(Default)]
pub struct LayerWatch {
    slot: Mutex<Option<Watched>>,
    installs: std::sync::atomic::AtomicU64,
}

struct Watched {
    watcher: Watcher,
    /// Which install this is: a check settles only the watcher it read.
    install: u64,
    /// The marks the journal is complete against.
    armed: Option<MarksVersion>,
    /// An error met by a check's read, for the capture loop to handle.
    failed: Option<WatchError>,
    /// Changes a check's read saw, for the capture loop's debouncer.
    seen: Seen,
    /// How many checks settled the journal (each may forget events: a tap across one
    /// can no longer tell what changed since its copies).
    settles: u64,
}

/// A tap of the shared watcher's journal for prestaging (see
/// [`crate::supervisor`]'s prestager): which watcher, and the journal's settles when it
/// began. Broken by another watcher, a settle, lost events or a full tap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tap {
    install: u64,
    settles: u64,
}

/// A check's view of the journal: the hint, if any, and the number of the last event it
/// covers (what a commit taking it may forget).
pub struct Snapshot {
    pub hint: Option<ChangeHint>,
    pub upto: u64,
    install: Option<u64>,
}

impl LayerWatch {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Watched>> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Share `watcher` (a recording one); returns a descriptor to wait on for its events.
    pub fn install(&self, watcher: Watcher) -> std::io::Result<OwnedFd> {
        let fd = rustix::io::fcntl_dupfd_cloexec(watcher.as_fd(), 0)?;
        let install = 1 + self
            .installs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *self.slot() = Some(Watched {
            watcher,
            install,
            armed: None,
            failed: None,
            seen: Seen::default(),
            settles: 0,
        });
        Ok(fd)
    }

    /// Stop sharing the watcher (it failed, or the layer changed).
    pub fn clear(&self) {
        *self.slot() = None;
    }

    /// The capture loop's read, once the descriptor is readable or its wait timed out:
    /// what was seen since the previous read (by the loop or by a check), or the error a
    /// check's read met. `None` when no watcher is shared.
    pub fn poll(&self) -> Option<Result<Seen, WatchError>> {
        let mut slot = self.slot();
        let w = slot.as_mut()?;
        if let Some(e) = w.failed.take() {
            return Some(Err(e));
        }
        let earlier = std::mem::take(&mut w.seen);
        Some(w.watcher.poll(Duration::ZERO).map(|s| Seen {
            changed: s.changed + earlier.changed,
            overflowed: s.overflowed || earlier.overflowed,
        }))
    }

    /// How many directories the shared watcher watches.
    pub fn watch_count(&self) -> usize {
        self.slot().as_ref().map_or(0, |w| w.watcher.watch_count())
    }

    /// For a change check of the layer at `upper` against marks `version`: read what is
    /// pending, then the hint if the journal is complete against `version` (with `held`,
    /// the files the box's processes hold, added; `None`: they are unknown).
    pub fn snapshot(
        &self,
        upper: &Path,
        version: Option<MarksVersion>,
        held: impl FnOnce() -> Option<Vec<PathBuf>>,
    ) -> Snapshot {
        let mut slot = self.slot();
        let Some(w) = slot.as_mut().filter(|w| w.watcher.root() == upper) else {
            return Snapshot {
                hint: None,
                upto: 0,
                install: None,
            };
        };
        let drained = w.drain();
        let journal = w
            .watcher
            .journal()
            .expect("the shared watcher is a recording one");
        let upto = journal.seq();
        if drained.is_err() || journal.lost() {
            w.armed = None;
        }
        let complete = w.armed.is_some() && w.armed == version;
        let hint = complete.then(held).flatten().map(|mut paths| {
            paths.extend(journal.paths().cloned());
            ChangeHint {
                since: version.expect("armed against a version"),
                paths,
            }
        });
        Snapshot {
            hint,
            upto,
            install: Some(w.install),
        }
    }

    /// After a check (and the commit it led to, if any): the marks are now `version`, and
    /// `still` are the paths that differ from them. The journal keeps those and the
    /// events after `upto`; it is armed against `version`.
    pub fn settled(&self, snap: &Snapshot, version: Option<MarksVersion>, still: &[PathBuf]) {
        let mut slot = self.slot();
        // Only the watcher the snapshot was of: a later one saw nothing before it began.
        let Some(w) = slot.as_mut().filter(|w| Some(w.install) == snap.install) else {
            return;
        };
        let failed = w.failed.is_some();
        w.settles += 1;
        let Some(journal) = w.watcher.journal() else {
            return;
        };
        let upto = snap.upto;
        // The check looked at everything when events had been lost before its snapshot
        // (there was no hint then); lost after it, they are lost for this one too.
        if snap.hint.is_none() {
            journal.recovered(upto);
        }
        if journal.lost() || failed {
            w.armed = None;
            return;
        }
        journal.forget_upto(upto);
        for p in still {
            journal.keep(p.clone(), upto);
        }
        w.armed = version;
    }
}

impl LayerWatch {
    /// Start tapping the journal of the watcher of `upper` (`None`: no such watcher, or
    /// events were lost).
    pub fn start_tap(&self, upper: &Path) -> Option<Tap> {
        let mut slot = self.slot();
        let w = slot.as_mut().filter(|w| w.watcher.root() == upper)?;
        let (install, settles) = (w.install, w.settles);
        let journal = w.watcher.journal()?;
        if journal.lost() {
            return None;
        }
        journal.tap();
        Some(Tap { install, settles })
    }

    /// The tapped watcher, read up to now, while the tap holds.
    fn tapped_watcher<'a>(
        slot: &'a mut Option<Watched>,
        tap: &Tap,
    ) -> Option<&'a mut crate::watch::Journal> {
        let w = slot
            .as_mut()
            .filter(|w| w.install == tap.install && w.settles == tap.settles)?;
        w.drain().ok()?;
        let journal = w.watcher.journal()?;
        (!journal.lost()).then_some(journal)
    }

    /// Read what is pending, then the paths with events since the tap began or since the
    /// last call (repeats included) and the number of the last event; `None` once the tap
    /// broke.
    pub fn tapped(&self, tap: &Tap) -> Option<(Vec<PathBuf>, u64)> {
        let mut slot = self.slot();
        let journal = Self::tapped_watcher(&mut slot, tap)?;
        let paths = journal.tapped()?;
        Some((paths, journal.seq()))
    }

    /// Read what is pending, then, if the tap still holds, which of `copies` (a path and
    /// the number of the last event when its copy began) are still valid: no event on the
    /// path since, and no directory above it made or removed since (which would make the
    /// path name another file; a change of a directory's attributes, such as the overlay's
    /// own markers, does not). `None`: the tap broke, none is. The tap ends either way.
    pub fn end_tap<'a>(
        &self,
        tap: &Tap,
        copies: impl Iterator<Item = (&'a Path, u64)>,
    ) -> Option<std::collections::HashSet<PathBuf>> {
        let mut slot = self.slot();
        let Some(journal) =
            Self::tapped_watcher(&mut slot, tap).and_then(|j| j.tapped().is_some().then_some(j))
        else {
            drop(slot);
            self.stop_tap(tap);
            return None;
        };
        let valid = copies
            .filter(|(rel, seq)| {
                journal.last_event(rel).is_none_or(|s| s <= *seq)
                    && rel
                        .ancestors()
                        .skip(1)
                        .all(|a| journal.last_move(a).is_none_or(|s| s <= *seq))
            })
            .map(|(rel, _)| rel.to_owned())
            .collect();
        journal.untap();
        Some(valid)
    }

    /// Stop tapping (a tap given up): the journal keeps no paths for it any more.
    pub fn stop_tap(&self, tap: &Tap) {
        let mut slot = self.slot();
        if let Some(j) = slot
            .as_mut()
            .filter(|w| w.install == tap.install)
            .and_then(|w| w.watcher.journal())
        {
            j.untap();
        }
    }
}

impl Watched {
    /// Read every pending event (into the journal), keeping what was seen for the loop.
    /// A watcher that failed is not read again: its error waits for the capture loop,
    /// which drops it.
    fn drain(&mut self) -> Result<(), ()> {
        if self.failed.is_some() {
            return Err(());
        }
        for _ in 0..MAX_DRAINS {
            match self.watcher.pending() {
                Ok(false) => return Ok(()),
                Ok(true) => {}
                Err(e) => {
                    self.failed = Some(e);
                    return Err(());
                }
            }
            match self.watcher.poll(Duration::ZERO) {
                Ok(s) => {
                    self.seen.changed += s.changed;
                    self.seen.overflowed |= s.overflowed;
                }
                Err(e) => {
                    self.failed = Some(e);
                    return Err(());
                }
            }
        }
        Err(())
    }
}
