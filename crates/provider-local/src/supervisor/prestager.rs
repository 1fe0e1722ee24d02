//! Prestaging while a batch command runs: a low-priority thread copies the files the
//! command wrote and then left alone into the store, so that the node at the command's end
//! renames them instead of copying them all then (see `agentbox_store::backend::prestage`
//! for the copies and what makes one exact).
//!
//! How the thread finds them: it taps the watcher's journal (see
//! [`crate::layer_watch::LayerWatch::start_tap`]) every [`TICK`]; a path with no event for
//! [`QUIET`] is copied, recorded with the number of the last event before the copy. A
//! directory that appeared is listed (files written in it before its watch existed raised
//! no event of their own). At the command's end the copies with no event on their path or
//! its directories since, and that no box process holds open or mapped, are offered to
//! the commit; any doubt (lost events, another watcher, a check that settled the journal
//! meanwhile, files held unknown) offers none, and the commit copies as before.
//!
//! Bounds: one command at a time per box; nothing past [`crate::supervisor`]'s hold of
//! batch commands ([`super::foreground::HOLD`]: the loop captures as it goes then); no
//! copy once the store's filesystem is low on space ([`SPACE_FLOOR`]); one copy per path
//! at a time (a rewritten file's earlier copy is deleted), so never more than the node
//! holds. The thread runs at nice 19 in the idle I/O class.
//!
//! It is on by default on the `layers` backend (ext4, xfs…), where a copy renamed into the
//! layer saves the end-of-command copy, and off on btrfs, where `bench/realwork` measured it
//! slower than without (the commit there reflinks, which costs about what a prestaged copy
//! does, and the copies compete with the command for the disk). `AGENTBOX_PRESTAGE=0` in the
//! supervisor's environment turns it off, any other value on.

use super::*;
use agentbox_store::backend::prestage::{Prestage, Staged};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// How often the thread looks at the journal.
const TICK: Duration = Duration::from_millis(100);
/// How long a path must have had no event before it is copied.
const QUIET: Duration = Duration::from_millis(300);
/// Free space below which (or below a twentieth of the filesystem) nothing more is copied.
const SPACE_FLOOR: u64 = 256 << 20;
/// Copies between two looks at the free space (the first copy looks too).
const SPACE_EVERY: usize = 256;

/// Whether prestaging is on for this supervisor on a store of backend `kind` (see the
/// module documentation).
pub(super) fn enabled(kind: agentbox_store::backend::BackendKind) -> bool {
    match std::env::var_os("AGENTBOX_PRESTAGE") {
        Some(v) => v != "0",
        None => kind != agentbox_store::backend::BackendKind::Btrfs,
    }
}

/// A prestaging thread of one batch command.
pub(super) struct Prestager {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Option<Prestage>>>,
    tap: crate::layer_watch::Tap,
    shared: Arc<Shared>,
}

/// What the command's commit gets: the copies and the tap that vouches for them.
pub(super) struct Prestaged {
    pub(super) prestage: Prestage,
    pub(super) tap: crate::layer_watch::Tap,
}

/// Start prestaging for a batch command, unless another command's prestaging runs, the
/// box has no watcher, or the store cannot make an area (said in the log).
pub(super) fn start(shared: &Arc<Shared>) -> Option<Prestager> {
    if !shared.prestage_on || shared.prestaging.swap(true, Ordering::SeqCst) {
        return None;
    }
    let started = (|| {
        let upper = lock(&shared.box_).as_ref().map(|g| g.upper.clone())?;
        let tap = shared.watch.start_tap(&upper)?;
        let prestage = match shared.store.prestage(&shared.name) {
            Ok(p) if p.upper() == upper => p,
            Ok(_) => {
                shared.watch.stop_tap(&tap);
                return None;
            }
            Err(e) => {
                eprintln!("prestaging: cannot start: {e}");
                shared.watch.stop_tap(&tap);
                return None;
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::Builder::new()
                .name("prestage".into())
                .spawn(move || run(&shared, prestage, &tap, &stop))
                .ok()?
        };
        Some(Prestager {
            stop,
            thread: Some(thread),
            tap,
            shared: shared.clone(),
        })
    })();
    if started.is_none() {
        shared.prestaging.store(false, Ordering::SeqCst);
    }
    started
}

impl Prestager {
    /// Stop the thread (at the command's end) and take its copies.
    pub(super) fn finish(mut self) -> Option<Prestaged> {
        let prestage = self.join()?;
        Some(Prestaged {
            prestage,
            tap: self.tap,
        })
    }

    fn join(&mut self) -> Option<Prestage> {
        self.stop.store(true, Ordering::SeqCst);
        let prestage = self.thread.take()?.join().ok().flatten();
        self.shared.prestaging.store(false, Ordering::SeqCst);
        if prestage.is_none() {
            self.shared.watch.stop_tap(&self.tap);
        }
        prestage
    }
}

impl Drop for Prestager {
    fn drop(&mut self) {
        if self.thread.is_some() {
            drop(self.join());
            self.shared.watch.stop_tap(&self.tap);
        }
    }
}

/// The thread: until `stop`, copy the paths that went quiet. `None` when the tap broke or
/// the command outlived the hold (nothing is offered then).
fn run(
    shared: &Shared,
    mut prestage: Prestage,
    tap: &crate::layer_watch::Tap,
    stop: &AtomicBool,
) -> Option<Prestage> {
    // Background work: the command comes first for the CPU and the disk.
    let _ = agentbox_sys::priority::lower_this_thread();
    let began = Instant::now();
    // Path → when its last event was seen.
    let mut quiet_since: HashMap<PathBuf, Instant> = HashMap::new();
    let mut copies = 0usize;
    // What the thread did, for `AGENTBOX_TIMINGS=1`: copies made, paths skipped, asked
    // again for being too new, directories listed.
    let mut counts = [0usize; 4];
    let mut timer = agentbox_core::timing::Timer::start("prestage");
    let mut space_low = false;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(TICK);
        if began.elapsed() > super::foreground::HOLD {
            return None;
        }
        let (paths, seq) = shared.watch.tapped(tap)?;
        let now = Instant::now();
        for p in paths {
            quiet_since.insert(p, now);
        }
        // The copies of the previous ticks: their writeback had time to finish.
        prestage.write_out();
        if space_low {
            continue;
        }
        let due: Vec<PathBuf> = quiet_since
            .iter()
            .filter(|(_, t)| now.duration_since(**t) >= QUIET)
            .map(|(p, _)| p.clone())
            .collect();
        for rel in due {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            quiet_since.remove(&rel);
            match prestage.stage(&rel, seq) {
                Ok(Staged::Copied(_)) => {
                    copies += 1;
                    counts[0] += 1;
                    if copies % SPACE_EVERY == 1 && prestage.space_low(SPACE_FLOOR) {
                        space_low = true;
                        break;
                    }
                }
                Ok(Staged::TooNew) => {
                    counts[2] += 1;
                    quiet_since.insert(rel, now);
                }
                Ok(Staged::Directory) => {
                    counts[3] += 1;
                    for f in prestage.files_below(&rel) {
                        if !prestage.holds(&f) {
                            quiet_since.entry(f).or_insert(now);
                        }
                    }
                }
                Ok(Staged::Skipped) => counts[1] += 1,
                Err(e) => {
                    eprintln!("prestaging: {e}");
                    return None;
                }
            }
        }
    }
    let (held, bytes) = prestage.size();
    timer.lap(&format!(
        "while the command ran: {} copies made ({held} held, {bytes} bytes), {} paths \
         skipped, {} too new, {} directories listed",
        counts[0], counts[1], counts[2], counts[3]
    ));
    Some(prestage)
}
