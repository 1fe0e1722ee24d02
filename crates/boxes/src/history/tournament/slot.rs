//! A running candidate as the race sees it: its slot (box name, start, why it is being
//! stopped — the first reason stays) and the events its worker reports.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Instant;

use crate::progress::Progress;
use crate::Result;

use super::*;

/// Why a candidate is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Cancel {
    None = 0,
    Timeout = 1,
    Lost = 2,
    Interrupted = 3,
}

impl Cancel {
    pub(super) fn from_u8(v: u8) -> Cancel {
        match v {
            1 => Cancel::Timeout,
            2 => Cancel::Lost,
            3 => Cancel::Interrupted,
            _ => Cancel::None,
        }
    }

    /// Why the candidate was stopped, for its log.
    pub(super) fn describe(self) -> &'static str {
        match self {
            Cancel::None => "not stopped",
            Cancel::Timeout => "it ran past the timeout",
            Cancel::Lost => "another candidate passed first",
            Cancel::Interrupted => "the tournament was interrupted",
        }
    }

    pub(super) fn verdict(self) -> Option<Verdict> {
        match self {
            Cancel::None => None,
            Cancel::Timeout => Some(Verdict::TimedOut),
            Cancel::Lost => Some(Verdict::Lost),
            Cancel::Interrupted => Some(Verdict::Interrupted),
        }
    }
}

/// What the coordinator and a candidate's worker share.
pub(super) struct Slot {
    pub(super) box_name: String,
    pub(super) cancel: AtomicU8,
    /// When its command started (the timeout runs from then).
    pub(super) started: Mutex<Option<Instant>>,
}

impl Slot {
    pub(super) fn cancelled(&self) -> Cancel {
        Cancel::from_u8(self.cancel.load(Ordering::SeqCst))
    }

    /// Ask it to stop for `why` (the first reason given stays).
    pub(super) fn cancel(&self, why: Cancel) {
        let _ = self.cancel.compare_exchange(
            Cancel::None as u8,
            why as u8,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}

pub(super) enum Event {
    Note(usize, String),
    /// Its test passed (sent as soon as it did: `first` picks by these).
    Passed(usize),
    Done(usize, Box<CandidateResult>),
}

/// A worker's progress: its notes go to the coordinator, which prints them (a front end's
/// progress need not be shared between threads).
pub(super) struct Relay {
    pub(super) tx: mpsc::Sender<Event>,
    pub(super) index: usize,
}

impl Progress for Relay {
    fn note(&self, line: &str) {
        let _ = self.tx.send(Event::Note(self.index, line.to_owned()));
    }
    fn busy(&self, _what: &str, work: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        work()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reason_to_stop_stays() {
        let s = Slot {
            box_name: "b".into(),
            cancel: AtomicU8::new(0),
            started: Mutex::new(None),
        };
        assert_eq!(s.cancelled(), Cancel::None);
        s.cancel(Cancel::Timeout);
        s.cancel(Cancel::Interrupted);
        assert_eq!(s.cancelled().verdict(), Some(Verdict::TimedOut));
    }
}
