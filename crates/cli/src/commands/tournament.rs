//! `agentbox tournament`: race candidate commands in forks of a box; print the result.

use std::io::Write;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use agentbox_boxes::history::tournament::{
    Candidate, CandidateResult, TournamentResult, TournamentSpec, Verdict,
};

use super::ctx::Ctx;
use crate::args::TournamentArgs;
use crate::errors::{CliError, CliResult};
use crate::render;

/// `NAME=CMD` of `-c`.
fn candidate(s: &str) -> CliResult<Candidate> {
    match s.split_once('=') {
        Some((name, command)) if !name.is_empty() => Ok(Candidate {
            name: name.to_owned(),
            command: command.to_owned(),
        }),
        _ => Err(CliError::usage(
            format!("-c {s:?}: a candidate is NAME=CMD"),
            "e.g. -c quick='make quick-fix' -c full='make full-fix'",
        )),
    }
}

/// Catch SIGINT, SIGTERM and SIGHUP for the tournament: the first one asks it to stop and
/// clean up (`interrupt` gets its number); a second ends the process at once, leaving what
/// was not removed yet to `agentbox prune`.
fn catch_interrupts(interrupt: Arc<AtomicI32>) -> CliResult {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if interrupt.swap(signal, Ordering::SeqCst) != 0 {
                eprintln!(
                    "agentbox: interrupted again; `agentbox prune` removes what the tournament left"
                );
                std::process::exit(128 + signal);
            }
            eprintln!("agentbox: interrupted; stopping the candidates and removing their boxes");
        }
    });
    Ok(())
}

pub(super) fn tournament(ctx: &Ctx, a: TournamentArgs) -> CliResult {
    let src = ctx.resolve_box(a.name.as_deref())?;
    let candidates = a
        .candidates
        .iter()
        .map(|c| candidate(c))
        .collect::<CliResult<Vec<_>>>()?;
    let interrupt = Arc::new(AtomicI32::new(0));
    catch_interrupts(interrupt.clone())?;
    let spec = TournamentSpec {
        source: src.name.to_string(),
        test: a.test,
        candidates,
        at: a.at,
        keep: a.keep,
        keep_losers: a.keep_losers,
        parallel: a.parallel.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        timeout: a.timeout,
        first: a.first,
        interrupt,
    };
    let result = ctx.boxes().tournament(&spec, ctx)?;
    ctx.out(&result, || table(&result))?;
    let _ = std::io::stdout().flush();
    if result.winner.is_none() {
        // No candidate passed: the result is printed; the status says so.
        std::process::exit(1);
    }
    Ok(())
}

fn exit_text(e: Option<i32>) -> String {
    e.map_or_else(|| "-".to_owned(), |e| e.to_string())
}

fn duration_text(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

fn branch_text(r: &CandidateResult) -> String {
    match r.branches.as_slice() {
        [] => "-".to_owned(),
        [one] => one.branch.clone(),
        [one, rest @ ..] => format!("{} (+{})", one.branch, rest.len()),
    }
}

/// The human form of a tournament's result: one row per candidate, then where each one's
/// output is, the notes, and the outcome.
fn table(t: &TournamentResult) -> String {
    let name_w = t
        .candidates
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0)
        .max("CANDIDATE".len());
    let branch_w = t
        .candidates
        .iter()
        .map(|c| branch_text(c).len())
        .max()
        .unwrap_or(0)
        .max("BRANCH".len());
    let mut s = format!(
        "{:<name_w$}  {:>4}  {:>4}  {:>7}  {:<12}  {:<branch_w$}  VERDICT\n",
        "CANDIDATE", "CMD", "TEST", "TIME", "NODE", "BRANCH"
    );
    for c in &t.candidates {
        s.push_str(&format!(
            "{:<name_w$}  {:>4}  {:>4}  {:>7}  {:<12}  {:<branch_w$}  {}\n",
            render::text(&c.name),
            exit_text(c.cmd_exit),
            exit_text(c.test_exit),
            duration_text(c.duration_ms),
            c.node.as_deref().map(render::short).unwrap_or("-"),
            branch_text(c),
            c.verdict.as_str()
        ));
    }
    for c in &t.candidates {
        if let Some(e) = &c.error {
            s.push_str(&format!("{}: {}\n", render::text(&c.name), render::text(e)));
        }
        match (&c.log, c.kept) {
            (Some(log), true) => s.push_str(&format!(
                "{}: box {}, log {}\n",
                render::text(&c.name),
                c.box_name,
                log.display()
            )),
            _ if c.verdict != Verdict::Won && !c.output.is_empty() => {
                // The box (and its log) is gone: the end of its output is all there is.
                let lines: Vec<&str> = c.output.lines().collect();
                s.push_str(&format!("{}: its output ended:\n", render::text(&c.name)));
                for l in &lines[lines.len().saturating_sub(3)..] {
                    s.push_str(&format!("  | {}\n", render::output(l)));
                }
            }
            _ => {}
        }
    }
    for n in &t.notes {
        s.push_str(&format!("{}\n", render::text(n)));
    }
    match (&t.winner, &t.moved, &t.winner_box) {
        (Some(w), Some(m), _) => s.push_str(&format!(
            "winner: {} — box {} moved to it (HEAD {})\n",
            render::text(w),
            t.source,
            render::short(&m.node)
        )),
        (Some(w), None, Some(b)) => s.push_str(&format!(
            "winner: {} (node {}) — kept as box {b}: `agentbox diff {b} {}` shows its work; box {} is unchanged\n",
            render::text(w),
            t.winner_node.as_deref().map(render::short).unwrap_or("-"),
            render::short(&t.base),
            t.source
        )),
        (Some(w), _, _) => s.push_str(&format!("winner: {}\n", render::text(w))),
        (None, _, _) => s.push_str(&format!(
            "no candidate passed the test; box {} is unchanged\n",
            t.source
        )),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_name_equals_command() {
        let c = candidate("a=make -j2 x=1").expect("valid");
        assert_eq!((c.name.as_str(), c.command.as_str()), ("a", "make -j2 x=1"));
        assert!(candidate("=x").is_err());
        assert!(candidate("nothing").is_err());
    }
}
