//! The box's foreground commands as auto-capture sees them, and what the capture loop may do
//! while they run.
//!
//! Why: a batch command (`npm install`, `pip install`, `cargo build`) writes without pause,
//! so the loop's maximum delay used to fire in the middle of it, again and again: each node
//! copied a half-written tree into the store (a state nobody can use, under a label that read
//! like a finished install), and together they made the command two to three times slower
//! than on the host. The command's own end makes a node anyway, labelled with the command.
//!
//! The rules (see [`ForegroundTable::decide`]):
//! * A *batch* command (`exec` without a terminal, capture on) holds the loop's captures until
//!   it ends, for at most [`HOLD`] after it started; its end makes one node of everything it
//!   wrote. Past the bound (a command that runs for many minutes, say an agent started by a
//!   script), the loop captures again at its usual delays, with the box frozen while the
//!   node is taken (one instant of the box, not files copied across seconds of writes) and a
//!   label that says the command was still running.
//! * A command run with `--no-capture` holds the loop's captures until it ends, without bound,
//!   and what it wrote is not a reason for a node afterwards either ([`Forget`]): its writes
//!   stay in the box, uncommitted, until some other node takes them.
//! * Interactive commands (a terminal: `shell`, `exec -t`, an agent on a terminal) and
//!   background processes (`spawn`, sessions) hold nothing: they are the long-running authors
//!   whose work the loop exists to capture within its maximum delay.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest a batch command holds the capture loop (see the module documentation).
pub(crate) const HOLD: Duration = Duration::from_secs(120);

/// How a foreground command's writes are captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Batch: one node at its end.
    AtEnd,
    /// `--no-capture`: no node from its writes.
    Off,
    /// On a terminal: captured as it goes, like a background process.
    Interactive,
}

impl Mode {
    /// The mode of an `exec` with a terminal or not, capturing or not.
    pub(crate) fn of(terminal: bool, capture: bool) -> Mode {
        match (capture, terminal) {
            (false, _) => Mode::Off,
            (true, true) => Mode::Interactive,
            (true, false) => Mode::AtEnd,
        }
    }
}

struct Entry {
    label: String,
    started: Instant,
    mode: Mode,
}

/// What the capture loop may do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Take a node now. `running` names a batch command still running (the label says so,
    /// and the box is frozen while the node is taken).
    Capture { running: Option<String> },
    /// Not now: a batch or `--no-capture` command is running; ask again later.
    Hold,
}

/// A count the capture loop compares with the one it saw last: when it moved, a
/// `--no-capture` command ended, and the changes the loop had pending are not a reason for a
/// node.
pub(crate) type Forget = u64;

/// The box's running foreground commands (by process id).
#[derive(Default)]
pub(crate) struct ForegroundTable {
    running: Mutex<BTreeMap<u64, Entry>>,
    forgets: AtomicU64,
}

/// Removes its command from the table when dropped (however the command's handler ends).
pub(crate) struct Running<'a> {
    table: &'a ForegroundTable,
    id: u64,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut running = self.table.lock();
        if let Some(e) = running.remove(&self.id) {
            // The loop forgets what it had pending only when nothing else that captures is
            // left running: another command's writes must still be taken.
            if e.mode == Mode::Off && running.values().all(|o| o.mode == Mode::Off) {
                self.table.forgets.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

impl ForegroundTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register foreground command `id` until the returned guard drops. The guard must live
    /// until after the command's own capture, so the loop cannot take its writes first under
    /// another label.
    pub(crate) fn enter(&self, id: u64, label: String, mode: Mode) -> Running<'_> {
        self.lock().insert(
            id,
            Entry {
                label,
                started: Instant::now(),
                mode,
            },
        );
        Running { table: self, id }
    }

    /// How many foreground commands are running (the caller's own included).
    pub(crate) fn count(&self) -> usize {
        self.lock().len()
    }

    /// See [`Forget`].
    pub(crate) fn forgets(&self) -> Forget {
        self.forgets.load(Ordering::SeqCst)
    }

    /// What the capture loop may do at `now`, when `background` processes (spawned ones,
    /// sessions) are running or not.
    pub(crate) fn decide(&self, now: Instant, background: bool) -> Decision {
        let running = self.lock();
        decide(running.values(), now, background)
    }
}

fn decide<'a>(
    running: impl Iterator<Item = &'a Entry>,
    now: Instant,
    background: bool,
) -> Decision {
    let mut off = false;
    let mut interactive = false;
    // The oldest batch command.
    let mut batch: Option<&Entry> = None;
    for e in running {
        match e.mode {
            Mode::Off => off = true,
            Mode::Interactive => interactive = true,
            Mode::AtEnd => {
                if batch.is_none_or(|b| e.started < b.started) {
                    batch = Some(e);
                }
            }
        }
    }
    let author = background || interactive;
    match batch {
        None if off && !author => Decision::Hold,
        None => Decision::Capture { running: None },
        Some(b) if !author && (off || now.saturating_duration_since(b.started) < HOLD) => {
            Decision::Hold
        }
        Some(b) => Decision::Capture {
            running: Some(format!(
                "{} still running, {} in",
                b.label,
                duration_text(now.saturating_duration_since(b.started))
            )),
        },
    }
}

/// `45 s`, `3 min 05 s`.
fn duration_text(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s} s")
    } else {
        format!("{} min {:02} s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(mode: Mode, age: Duration, now: Instant) -> Entry {
        Entry {
            label: "npm install".into(),
            started: now - age,
            mode,
        }
    }

    #[test]
    fn batch_holds_until_the_bound() {
        let now = Instant::now() + HOLD * 2;
        let young = [entry(Mode::AtEnd, Duration::from_secs(30), now)];
        assert_eq!(decide(young.iter(), now, false), Decision::Hold);
        let old = [entry(Mode::AtEnd, HOLD + Duration::from_secs(5), now)];
        assert_eq!(
            decide(old.iter(), now, false),
            Decision::Capture {
                running: Some("npm install still running, 2 min 05 s in".into())
            }
        );
    }

    #[test]
    fn no_capture_holds_without_bound_unless_an_author_writes() {
        let now = Instant::now() + HOLD * 4;
        let off = [entry(Mode::Off, HOLD * 3, now)];
        assert_eq!(decide(off.iter(), now, false), Decision::Hold);
        assert_eq!(
            decide(off.iter(), now, true),
            Decision::Capture { running: None }
        );
    }

    #[test]
    fn authors_are_captured_as_they_go() {
        let now = Instant::now() + HOLD;
        assert_eq!(
            decide(std::iter::empty(), now, false),
            Decision::Capture { running: None }
        );
        let tty = [entry(Mode::Interactive, Duration::from_secs(1), now)];
        assert_eq!(
            decide(tty.iter(), now, false),
            Decision::Capture { running: None }
        );
        // A batch command beside a background author: the node is taken, frozen, and says
        // what was still running.
        let batch = [entry(Mode::AtEnd, Duration::from_secs(3), now)];
        assert_eq!(
            decide(batch.iter(), now, true),
            Decision::Capture {
                running: Some("npm install still running, 3 s in".into())
            }
        );
    }

    #[test]
    fn the_end_of_the_last_no_capture_command_is_forgotten() {
        let t = ForegroundTable::default();
        let before = t.forgets();
        let a = t.enter(1, "a".into(), Mode::Off);
        let b = t.enter(2, "b".into(), Mode::AtEnd);
        drop(a);
        // `a` ended while `b` ran: b's writes still count.
        assert_eq!(t.forgets(), before);
        drop(b);
        assert_eq!(t.forgets(), before);
        {
            let _a = t.enter(3, "a".into(), Mode::Off);
        }
        assert_eq!(t.forgets(), before + 1);
        {
            let _b = t.enter(4, "b".into(), Mode::AtEnd);
        }
        assert_eq!(t.forgets(), before + 1);
    }
}
