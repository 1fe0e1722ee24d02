//! `fork` and `tournament`: their arguments, the call to the façade, and what they print.

use std::io::Write;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentbox_boxes::history::fork::ForkSpec;
use agentbox_boxes::history::tournament::{
    Candidate, CandidateResult, TournamentResult, TournamentSpec, Verdict,
};
use agentbox_boxes::records::record::BoxRecord;
use clap::Args;
use serde::Serialize;

use crate::commands::Ctx;
use crate::errors::CliError;
use crate::render;
use crate::CliResult;

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The box to fork (left out: the current project's only box, or -b BOX).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// The new box's name (default: BOX-fork-N, the first free N).
    #[arg(value_name = "NEW")]
    pub new: Option<String>,
    /// Fork at this node of BOX's history instead of its HEAD: HEAD~N, a tag, a node id or
    /// a unique id prefix (`agentbox log BOX` shows them).
    #[arg(long, value_name = "REF")]
    pub at: Option<String>,
}

/// The usage line is written out: clap's own lists, in an error, every argument it found
/// as if required — `--home <HOME>` too, when `AGENTBOX_HOME` is set, and BOX as `<BOX>`.
#[derive(Debug, Args)]
#[command(override_usage = "agentbox tournament [OPTIONS] --test <CMD> -c <NAME=CMD>... [BOX]")]
pub struct TournamentArgs {
    /// The box every candidate is forked from (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// The test: a shell command run in each candidate's box after the candidate's own;
    /// exit status 0 passes.
    #[arg(long, value_name = "CMD", required = true, allow_hyphen_values = true)]
    pub test: String,
    /// A candidate: NAME=CMD, a shell command run in a fork of BOX named BOX-NAME (on
    /// branch agentbox/BOX-NAME). Repeatable; the order given breaks ties.
    #[arg(
        short = 'c',
        long = "candidate",
        value_name = "NAME=CMD",
        required = true,
        allow_hyphen_values = true
    )]
    pub candidates: Vec<String>,
    /// Fork at this node of BOX's history instead of its HEAD.
    #[arg(long, value_name = "REF")]
    pub at: Option<String>,
    /// Move BOX to the winner's node and its branches to the winner's tips (BOX's
    /// processes are killed, as by a checkout); the winner's box is removed then. Without
    /// it BOX is left exactly as it was and the winner's box is kept.
    #[arg(long)]
    pub keep: bool,
    /// Keep the losers' boxes (stopped) instead of removing them and their branches.
    #[arg(long)]
    pub keep_losers: bool,
    /// How many candidates run at once (default: all of them).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub parallel: Option<u64>,
    /// Stop a candidate whose command and test together run longer than DUR (`90s`, `5m`,
    /// `1h`, `500ms`; a bare number is seconds); it fails. Default: no limit.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// The first candidate whose test passes wins; the others are stopped then (default:
    /// the first passing one in the order given, once every candidate has run).
    #[arg(long)]
    pub first: bool,
}

/// A duration as `--timeout` takes it: a number with `ms`, `s`, `m` or `h` (none: seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 90s, 5m, 1h, 500ms)"))?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {s:?} (use ms, s, m or h)"
            ))
        }
    };
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("{s:?} is not a positive duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[derive(Serialize)]
struct Forked<'a> {
    #[serde(flatten)]
    record: &'a BoxRecord,
    head: String,
    forked_from: &'a str,
}

/// `fork [BOX] [NEW] [--at REF]`: with `-b BOX`, the one positional is NEW.
pub fn fork(ctx: &Ctx, a: ForkArgs) -> CliResult {
    let (reference, new) = match (&ctx.env, a.name, a.new) {
        (Some(_), Some(new), None) => (None, Some(new)),
        (_, name, new) => (name, new),
    };
    let src = ctx.resolve_box(reference.as_deref())?;
    let spec = ForkSpec {
        source: src.name.to_string(),
        name: new,
        at: a.at,
    };
    let made = ctx.boxes().fork(&spec, ctx)?;
    let rec = &made.record;
    for g in &rec.repos {
        let at = match &g.sub {
            None => String::new(),
            Some(s) => format!(" ({s}/)"),
        };
        ctx.note(format!("box repository{at} on branch {}", g.branch));
    }
    ctx.out(
        &Forked {
            record: rec,
            head: made.head.clone(),
            forked_from: &src.name,
        },
        || {
            format!(
                "box {:?} (#{}, id {}) forked from {:?}{} (HEAD {})\nRun something: agentbox exec {} -- ls\n",
                rec.name.as_str(),
                rec.index,
                &rec.id[..8.min(rec.id.len())],
                src.name.as_str(),
                spec.at
                    .as_deref()
                    .map(|r| format!(" at {}", render::text(r)))
                    .unwrap_or_default(),
                render::short(&made.head),
                rec.name
            )
        },
    )
}

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

pub fn tournament(ctx: &Ctx, a: TournamentArgs) -> CliResult {
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
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn candidates_are_name_equals_command() {
        let c = candidate("a=make -j2 x=1").expect("valid");
        assert_eq!((c.name.as_str(), c.command.as_str()), ("a", "make -j2 x=1"));
        assert!(candidate("=x").is_err());
        assert!(candidate("nothing").is_err());
    }
}
