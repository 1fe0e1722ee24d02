//! Phase timings for diagnosing slow operations: with `AGENTBOX_TIMINGS=1` in the
//! environment, each [`Timer::lap`] prints `timing: <op> <phase> <ms>` on stderr.

use std::time::Instant;

/// Measures the phases of one operation.
pub struct Timer {
    op: &'static str,
    last: Instant,
    on: bool,
}

impl Timer {
    pub fn start(op: &'static str) -> Timer {
        Timer {
            op,
            last: Instant::now(),
            on: std::env::var_os("AGENTBOX_TIMINGS").is_some_and(|v| v == "1"),
        }
    }

    /// Report the time since the previous lap (or the start) under `phase`.
    pub fn lap(&mut self, phase: &str) {
        if self.on {
            let now = Instant::now();
            eprintln!(
                "timing: {} {phase} {:.2} ms",
                self.op,
                (now - self.last).as_secs_f64() * 1000.0
            );
            self.last = now;
        }
    }
}
