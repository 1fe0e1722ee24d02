//! Progress of a long transfer (`export`, `import`, `checkpoint export` / `import`) on
//! stderr: a spinner with the bytes moved on a terminal; elsewhere (a pipe, a log, CI) one
//! line every few seconds and a last one, as `docker pull` does, so a long export is not
//! silent. The bytes are those `agentbox_core::progress` counts: the bundle written by an
//! export, the bundle read by an import. And the spinner of other long work ([`busy`]).

use std::time::{Duration, Instant};

use super::basic::bytes;

/// How often a line is printed when stderr is not a terminal, in milliseconds (0: never).
pub(crate) const INTERVAL_ENV: &str = "AGENTBOX_PROGRESS_INTERVAL_MS";
const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

fn interval() -> Option<Duration> {
    match std::env::var(INTERVAL_ENV)
        .ok()
        .map(|v| v.trim().parse::<u64>())
    {
        Some(Ok(0)) => None,
        Some(Ok(ms)) => Some(Duration::from_millis(ms)),
        _ => Some(DEFAULT_INTERVAL),
    }
}

/// One progress line: what, the bytes moved so far and the time taken.
fn line(what: &str, moved: u64, elapsed: Duration, done: bool) -> String {
    format!(
        "agentbox: {what}: {}{} ({:.0} s)\n",
        bytes(moved),
        if done { ", done" } else { " so far" },
        elapsed.as_secs_f64()
    )
}

/// Run `work`, a transfer, reporting its progress on stderr (`quiet`: not at all — with
/// --json, or for the in-box `agentbox`, whose output must stay what it asked for).
pub fn transfer<T>(what: &str, quiet: bool, work: impl FnOnce() -> T) -> T {
    use std::io::IsTerminal;
    if quiet {
        return work();
    }
    let start = agentbox_core::progress::moved();
    let moved = move || agentbox_core::progress::moved().saturating_sub(start);
    let began = Instant::now();
    if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .expect("the template is valid"),
        );
        bar.set_message(what.to_owned());
        bar.enable_steady_tick(Duration::from_millis(100));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let out = std::thread::scope(|s| {
            let bar = &bar;
            s.spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(Duration::from_millis(200))
                {
                    bar.set_message(format!("{what}: {}", bytes(moved())));
                }
            });
            let out = work();
            drop(stop);
            out
        });
        bar.finish_and_clear();
        return out;
    }
    let Some(every) = interval() else {
        return work();
    };
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let ticker = s.spawn(move || {
            let mut printed = false;
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every)
            {
                eprint!("{}", line(what, moved(), began.elapsed(), false));
                printed = true;
            }
            printed
        });
        let out = work();
        drop(stop);
        // A transfer over before the first line needs no last one either.
        if ticker.join().unwrap_or(false) {
            eprint!("{}", line(what, moved(), began.elapsed(), true));
        }
        out
    })
}

/// Run long work under a spinner with the elapsed time on stderr (`quiet`: without one —
/// with --json, for the in-box `agentbox`, or when stderr is no terminal, so pipes and
/// scripts see clean output).
pub fn busy<T>(msg: &str, quiet: bool, work: impl FnOnce() -> T) -> T {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() {
        return work();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .expect("the template is valid"),
    );
    bar.set_message(msg.to_owned());
    bar.enable_steady_tick(std::time::Duration::from_millis(100));
    let out = work();
    bar.finish_and_clear();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_says_how_much_and_how_long() {
        assert_eq!(
            line("exporting", 3 << 20, Duration::from_secs(12), false),
            "agentbox: exporting: 3.0 MiB so far (12 s)\n"
        );
        assert_eq!(
            line("exporting", 3 << 20, Duration::from_secs(20), true),
            "agentbox: exporting: 3.0 MiB, done (20 s)\n"
        );
    }
}
