//! When to capture: once changes have settled for a quiet period, and never later than a
//! maximum delay after the first unsaved change.

use super::*;

/// When to capture: pure decision logic over instants the caller supplies (no IO, no clock).
///
/// Invariants:
/// * clean (nothing unsaved) ⇔ `first` and `last` are both `None`; dirty ⇒ `first <= last`;
/// * once dirty, [`due`](Debouncer::due) becomes true no later than `max_delay` after the
///   first unsaved change, however often changes keep arriving (a continuous stream cannot
///   postpone a capture forever), and `quiet` after the last change otherwise;
/// * `quiet` is at most [`Debouncer::MAX_QUIET`] (1 s).
#[derive(Debug, Clone)]
pub struct Debouncer {
    quiet: Duration,
    max_delay: Duration,
    /// The first change not yet captured.
    first: Option<Instant>,
    /// The latest change seen.
    last: Option<Instant>,
}

impl Default for Debouncer {
    /// [`Debouncer::DEFAULT_QUIET`] and [`Debouncer::DEFAULT_MAX_DELAY`].
    fn default() -> Self {
        Debouncer::new(Self::DEFAULT_QUIET, Self::DEFAULT_MAX_DELAY)
    }
}

impl Debouncer {
    /// Default quiet period: a capture follows one second without changes.
    pub const DEFAULT_QUIET: Duration = Duration::from_secs(1);
    /// Longest allowed quiet period; longer values are clamped to it.
    pub const MAX_QUIET: Duration = Duration::from_secs(1);
    /// Default maximum delay between the first unsaved change and its capture.
    pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(10);

    /// A clean debouncer. `quiet` is clamped to [`Debouncer::MAX_QUIET`]; a `max_delay`
    /// shorter than `quiet` makes every capture happen at `max_delay`.
    pub fn new(quiet: Duration, max_delay: Duration) -> Debouncer {
        Debouncer {
            quiet: quiet.min(Self::MAX_QUIET),
            max_delay,
            first: None,
            last: None,
        }
    }

    /// The quiet period in use (after clamping).
    pub fn quiet(&self) -> Duration {
        self.quiet
    }

    /// The maximum delay in use.
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// A change was seen at `now`.
    pub fn change(&mut self, now: Instant) {
        match (self.first, self.last) {
            (Some(first), Some(last)) => {
                self.first = Some(first.min(now));
                self.last = Some(last.max(now));
            }
            _ => {
                self.first = Some(now);
                self.last = Some(now);
            }
        }
    }

    /// True when there are unsaved changes and either `quiet` passed since the last change
    /// or `max_delay` passed since the first unsaved one.
    pub fn due(&self, now: Instant) -> bool {
        match (self.first, self.last) {
            (Some(first), Some(last)) => {
                now.saturating_duration_since(last) >= self.quiet
                    || now.saturating_duration_since(first) >= self.max_delay
            }
            _ => false,
        }
    }

    /// When [`due`](Debouncer::due) becomes true if no further change arrives (`None` when
    /// clean; an instant in the past when already due). Use it as the poll timeout.
    pub fn next_deadline(&self) -> Option<Instant> {
        let (first, last) = (self.first?, self.last?);
        match (
            last.checked_add(self.quiet),
            first.checked_add(self.max_delay),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A snapshot reflecting every change seen up to `now` was taken. Changes recorded
    /// with a later instant stay unsaved, their maximum delay counted from `now`.
    pub fn captured(&mut self, now: Instant) {
        match self.last {
            Some(last) if last > now => self.first = Some(now),
            _ => {
                self.first = None;
                self.last = None;
            }
        }
    }

    /// Whether changes are waiting for a capture.
    pub fn is_dirty(&self) -> bool {
        self.first.is_some()
    }
}
