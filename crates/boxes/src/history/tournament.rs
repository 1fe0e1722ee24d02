//! Tournaments: candidate commands raced in forks of one box, judged by one test.
//!
//! Each candidate gets a fork of the source box at one node (see [`crate::history::fork`]), named
//! `<box>-<candidate>` on its own branch, in which its command and then the test run
//! (`sh -c`, through the provider like `agentbox exec`, each change a node of the fork's
//! history). Candidates run in parallel, at most `parallel` at once. The winner is the first
//! candidate in the order given whose test exits 0 — or, with `first`, the first whose test
//! passes, the others being stopped then.
//!
//! Invariants:
//!
//! * The source box is not touched while the tournament runs (its tree, HEAD, branches and
//!   processes stay exactly as they were); only `keep` moves it, at the end, to the winner.
//! * What a candidate made is gone at the end unless it is kept: the losers' boxes (records,
//!   environments, directories with their logs, pins and branches) without `keep_losers`,
//!   and every candidate's when the tournament is interrupted (`interrupt` set, by a signal
//!   handler). A candidate that runs past `timeout` is stopped and counts as failed.
//! * A candidate is stopped by stopping its box, repeatedly until its worker is done: a
//!   step that would start the box again after the stop sees the cancellation first, or is
//!   stopped once more.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::facade::Boxes;
use crate::history::fork::ForkSpec;
use crate::progress::Progress;
use crate::records::record::{self, BoxDirs, BoxRecord};
use crate::types::SyncedRepo;
use crate::{BoxError, Result};

/// One candidate: a name (its box is `<box>-<name>`) and a shell command.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub name: String,
    pub command: String,
}

/// A tournament as a front end asks for it.
#[derive(Debug, Clone)]
pub struct TournamentSpec {
    /// The box whose node every candidate starts from (its name).
    pub source: String,
    /// The shell command that judges a candidate (exit 0: it passed).
    pub test: String,
    /// In the order that breaks ties.
    pub candidates: Vec<Candidate>,
    /// The node of the source's history to start from (`None`: HEAD).
    pub at: Option<String>,
    /// Move the source box to the winner's node, and its branches to the winner's tips.
    pub keep: bool,
    /// Keep the losers' boxes (stopped) instead of destroying them.
    pub keep_losers: bool,
    /// How many candidates run at once (`None`: all of them).
    pub parallel: Option<usize>,
    /// How long a candidate's command and test may take together (`None`: no limit).
    pub timeout: Option<Duration>,
    /// The first candidate to pass wins, and the others are stopped then.
    pub first: bool,
    /// Set to a signal's number to stop the tournament: every candidate is stopped and
    /// removed, and the tournament ends with [`BoxError::Interrupted`].
    pub interrupt: Arc<AtomicI32>,
}

/// How a candidate ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// It won.
    Won,
    /// Its test passed, but another candidate won (an earlier one in the order given, or,
    /// with `first`, one that passed sooner).
    Passed,
    /// Its command or its test exited with a non-zero status.
    Failed,
    /// It ran past the timeout and was stopped.
    TimedOut,
    /// With `first`: another candidate passed while it ran (or before it started); it was
    /// stopped.
    Lost,
    /// The tournament was interrupted.
    Interrupted,
    /// Its box could not be made or its commands could not be run (see `error`).
    Error,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Won => "won",
            Verdict::Passed => "passed",
            Verdict::Failed => "failed",
            Verdict::TimedOut => "timed-out",
            Verdict::Lost => "lost",
            Verdict::Interrupted => "interrupted",
            Verdict::Error => "error",
        }
    }
}

/// What one candidate produced.
#[derive(Debug, Clone, Serialize)]
pub struct CandidateResult {
    pub name: String,
    /// Its command.
    pub cmd: String,
    /// Its box (`<box>-<name>`); see `kept`.
    #[serde(rename = "box")]
    pub box_name: String,
    /// Its branches and their tips in the host repositories after its commands.
    pub branches: Vec<SyncedRepo>,
    /// Its box's HEAD after its command and test (`None`: the box was never made).
    pub node: Option<String>,
    /// The command's exit status (`None`: not run, or stopped before it ended).
    pub cmd_exit: Option<i32>,
    /// The test's exit status (`None`: not run — the command failed — or stopped).
    pub test_exit: Option<i32>,
    /// How long its command and test took.
    pub duration_ms: u64,
    pub verdict: Verdict,
    /// Why its box could not be made or its commands not run.
    pub error: Option<String>,
    /// The end of what its command and test printed (box-controlled text), at most
    /// [`OUTPUT_TAIL`] bytes; the whole of it is in `log` while the box is kept.
    pub output: String,
    /// Its log (every command with its output and status), while its box is kept.
    pub log: Option<PathBuf>,
    /// Whether its box (made by this tournament) still exists.
    pub kept: bool,
}

/// Where the source box went with `keep`.
#[derive(Debug, Clone, Serialize)]
pub struct SourceMoved {
    /// The source box's HEAD now: a child of the winner's node recording its branches.
    pub node: String,
    /// Its branches' tips in the host repositories.
    pub branches: Vec<SyncedRepo>,
}

/// The outcome of one tournament.
#[derive(Debug, Clone, Serialize)]
pub struct TournamentResult {
    /// The source box.
    pub source: String,
    /// The node every candidate started from.
    pub base: String,
    /// One per candidate, in the order given.
    pub candidates: Vec<CandidateResult>,
    /// The winning candidate's name (`None`: no test passed).
    pub winner: Option<String>,
    /// The winning node.
    pub winner_node: Option<String>,
    /// The winner's box, while it is kept (with `keep` it is destroyed once the source
    /// holds its work).
    pub winner_box: Option<String>,
    /// With `keep` and a winner: where the source box is now.
    pub moved: Option<SourceMoved>,
    /// What the user should know (what was removed or kept, what could not be).
    pub notes: Vec<String>,
}

/// How much of a candidate's output its result carries.
pub const OUTPUT_TAIL: usize = 64 << 10;

/// The file of a candidate's box that holds its log.
pub const LOG_FILE: &str = "tournament.log";

impl Boxes {
    /// Run a tournament (see the module documentation).
    pub fn tournament(
        &self,
        spec: &TournamentSpec,
        progress: &dyn Progress,
    ) -> Result<TournamentResult> {
        run(self, spec, progress)
    }
}

/// Why a candidate is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Cancel {
    None = 0,
    Timeout = 1,
    Lost = 2,
    Interrupted = 3,
}

impl Cancel {
    fn from_u8(v: u8) -> Cancel {
        match v {
            1 => Cancel::Timeout,
            2 => Cancel::Lost,
            3 => Cancel::Interrupted,
            _ => Cancel::None,
        }
    }

    /// Why the candidate was stopped, for its log.
    fn describe(self) -> &'static str {
        match self {
            Cancel::None => "not stopped",
            Cancel::Timeout => "it ran past the timeout",
            Cancel::Lost => "another candidate passed first",
            Cancel::Interrupted => "the tournament was interrupted",
        }
    }

    fn verdict(self) -> Option<Verdict> {
        match self {
            Cancel::None => None,
            Cancel::Timeout => Some(Verdict::TimedOut),
            Cancel::Lost => Some(Verdict::Lost),
            Cancel::Interrupted => Some(Verdict::Interrupted),
        }
    }
}

/// What the coordinator and a candidate's worker share.
struct Slot {
    box_name: String,
    cancel: AtomicU8,
    /// When its command started (the timeout runs from then).
    started: Mutex<Option<Instant>>,
}

impl Slot {
    fn cancelled(&self) -> Cancel {
        Cancel::from_u8(self.cancel.load(Ordering::SeqCst))
    }

    /// Ask it to stop for `why` (the first reason given stays).
    fn cancel(&self, why: Cancel) {
        let _ = self.cancel.compare_exchange(
            Cancel::None as u8,
            why as u8,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}

enum Event {
    Note(usize, String),
    /// Its test passed (sent as soon as it did: `first` picks by these).
    Passed(usize),
    Done(usize, Box<CandidateResult>),
}

/// A worker's progress: its notes go to the coordinator, which prints them (a front end's
/// progress need not be shared between threads).
struct Relay {
    tx: mpsc::Sender<Event>,
    index: usize,
}

impl Progress for Relay {
    fn note(&self, line: &str) {
        let _ = self.tx.send(Event::Note(self.index, line.to_owned()));
    }
    fn busy(&self, _what: &str, work: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        work()
    }
}

/// Check the candidates before anything is made: at least one, each name distinct and
/// making a valid box name that is free.
fn check(boxes: &Boxes, src: &BoxRecord, spec: &TournamentSpec) -> Result<()> {
    if spec.candidates.is_empty() {
        return Err(BoxError::NoCandidates {
            name: src.name.to_string(),
        });
    }
    for (i, c) in spec.candidates.iter().enumerate() {
        let bad = |why: String| BoxError::BadCandidate {
            candidate: c.name.clone(),
            why,
        };
        if c.name.is_empty() {
            return Err(bad("the name is empty".into()));
        }
        if spec.candidates[..i].iter().any(|o| o.name == c.name) {
            return Err(bad("two candidates have this name".into()));
        }
        let box_name = box_name(src, c);
        let checked = crate::records::registry::check_new_name(boxes.home(), &box_name)
            .map_err(|e| bad(format!("its box name {box_name:?} is not valid: {e}")))?;
        if BoxDirs::new(boxes.home(), &checked).dir.exists() || boxes.store()?.env(&checked).is_ok()
        {
            return Err(BoxError::BoxExists {
                name: checked.into_string(),
            });
        }
    }
    Ok(())
}

fn box_name(src: &BoxRecord, c: &Candidate) -> String {
    format!("{}-{}", src.name, c.name)
}

fn run(boxes: &Boxes, spec: &TournamentSpec, progress: &dyn Progress) -> Result<TournamentResult> {
    let src = record::read(boxes.home(), &spec.source)?;
    check(boxes, &src, spec)?;
    let reference = spec.at.as_deref().unwrap_or("HEAD");
    let base = boxes
        .store()?
        .resolve(&src.name, reference)
        .map_err(|e| match e {
            agentbox_store::Error::UnknownRef { .. } => BoxError::NoSuchNode {
                name: src.name.to_string(),
                reference: reference.to_owned(),
            },
            other => other.into(),
        })?;
    if reference == "HEAD" {
        crate::history::fork::note_unrecorded(boxes, &src, progress);
    }
    let n = spec.candidates.len();
    let parallel = spec.parallel.unwrap_or(n).clamp(1, n);
    let slots: Vec<Slot> = spec
        .candidates
        .iter()
        .map(|c| Slot {
            box_name: box_name(&src, c),
            cancel: AtomicU8::new(0),
            started: Mutex::new(None),
        })
        .collect();
    let mut results: Vec<Option<CandidateResult>> = vec![None; n];
    let mut first_passed = None;
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<Event>();
    std::thread::scope(|scope| {
        for _ in 0..parallel {
            let tx = tx.clone();
            let (slots, next, src, base) = (&slots, &next, &src, &base);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    return;
                }
                let relay = Relay {
                    tx: tx.clone(),
                    index: i,
                };
                // A worker that panics still reports: its box is cleaned up with the others.
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_candidate(boxes, spec, src, base, i, &slots[i], &relay)
                }))
                .unwrap_or_else(|_| lost_worker(boxes, &spec.candidates[i], &slots[i]));
                let _ = tx.send(Event::Done(i, Box::new(r)));
            });
        }
        drop(tx);
        let mut done = 0;
        while done < n {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(Event::Note(i, line)) => {
                    progress.note(&format!("[{}] {line}", spec.candidates[i].name));
                }
                Ok(Event::Passed(i)) => {
                    if spec.first && first_passed.is_none() {
                        first_passed = Some(i);
                        for (j, s) in slots.iter().enumerate() {
                            if j != i {
                                s.cancel(Cancel::Lost);
                            }
                        }
                    }
                }
                Ok(Event::Done(i, r)) => {
                    results[i] = Some(*r);
                    done += 1;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                // Every worker ended (each sent its result first).
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if spec.interrupt.load(Ordering::SeqCst) != 0 {
                slots.iter().for_each(|s| s.cancel(Cancel::Interrupted));
            }
            for (i, s) in slots.iter().enumerate() {
                if results[i].is_some() {
                    continue;
                }
                let started = *s.started.lock().unwrap_or_else(|p| p.into_inner());
                if let (Some(limit), Some(t)) = (spec.timeout, started) {
                    if t.elapsed() > limit {
                        s.cancel(Cancel::Timeout);
                    }
                }
                if s.cancelled() != Cancel::None {
                    // Stopping the box ends whatever runs in it; repeated until the worker
                    // is done, in case a step of it started the box again.
                    let _ = boxes.provider().stop(&s.box_name);
                }
            }
        }
    });
    let mut results: Vec<CandidateResult> = results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|| lost_worker(boxes, &spec.candidates[i], &slots[i])))
        .collect();
    let mut notes: Vec<String> = Vec::new();
    let signal = spec.interrupt.load(Ordering::SeqCst);
    if signal != 0 {
        // Only boxes this tournament made (a fork that failed undid itself; a name taken
        // meanwhile by another command is that command's box).
        for r in results.iter().filter(|r| r.kept) {
            remove_candidate(boxes, &r.box_name, &mut notes);
        }
        for n in &notes {
            progress.note(n);
        }
        return Err(BoxError::Interrupted {
            what: format!("the tournament of box {:?}", src.name.as_str()),
            signal,
            undone: if notes.is_empty() {
                "every candidate's box, branch and pin was removed".to_owned()
            } else {
                "what could not be removed is listed above (`agentbox prune` retries)".to_owned()
            },
        });
    }
    let winner = match first_passed {
        Some(i) => Some(i),
        None => results.iter().position(|r| r.verdict == Verdict::Passed),
    };
    if let Some(w) = winner {
        results[w].verdict = Verdict::Won;
    }
    for (i, r) in results.iter_mut().enumerate() {
        if Some(i) == winner {
            continue;
        }
        if !r.kept {
            continue;
        }
        if spec.keep_losers {
            // Their work is in their nodes; their processes need not run on.
            let _ = boxes.provider().stop(&r.box_name);
        } else {
            remove_candidate(boxes, &r.box_name, &mut notes);
            r.kept = false;
            r.log = None;
        }
    }
    let mut result = TournamentResult {
        source: src.name.to_string(),
        base: base.into_string(),
        winner: winner.map(|w| results[w].name.clone()),
        winner_node: winner.and_then(|w| results[w].node.clone()),
        winner_box: winner.map(|w| results[w].box_name.clone()),
        candidates: results,
        moved: None,
        notes,
    };
    if let (true, Some(w)) = (spec.keep, winner) {
        let win = &result.candidates[w];
        let node = win
            .node
            .clone()
            .ok_or_else(|| BoxError::Supervisor(format!("candidate {:?} has no node", win.name)))?;
        let moved = move_source(boxes, &src, &win.box_name, &node).inspect_err(|_| {
            progress.note(&format!(
                "agentbox: box {:?} keeps the winner's work",
                win.box_name
            ));
        })?;
        // The one node of the move is where the source is now (a child of the winner's
        // node that records the source's own branches): the note names that one.
        let now_at = moved.node.clone();
        result.moved = Some(moved);
        let winner_box = win.box_name.clone();
        let before = result.notes.len();
        remove_candidate(boxes, &winner_box, &mut result.notes);
        if result.notes.len() == before {
            result.notes.push(format!(
                "box {:?} now holds the winner's work (node {}); the winner's box {winner_box:?} was removed",
                src.name.as_str(),
                short(&now_at)
            ));
            result.candidates[w].kept = false;
            result.candidates[w].log = None;
            result.winner_box = None;
        }
    }
    Ok(result)
}

/// The result of a candidate whose worker ended without one (it panicked).
fn lost_worker(boxes: &Boxes, c: &Candidate, slot: &Slot) -> CandidateResult {
    CandidateResult {
        name: c.name.clone(),
        cmd: c.command.clone(),
        box_name: slot.box_name.clone(),
        branches: Vec::new(),
        node: None,
        cmd_exit: None,
        test_exit: None,
        duration_ms: 0,
        verdict: Verdict::Error,
        error: Some("its worker ended without a result".into()),
        output: String::new(),
        log: None,
        // Its box, if the fork got that far, is removed with the losers (its name was free
        // when the tournament began: the box is this tournament's).
        kept: BoxDirs::new(boxes.home(), &slot.box_name).record().exists(),
    }
}

/// Remove candidate box `name` and everything of it (its branches too); what could not be
/// removed is added to `notes`. A box only half made (an environment without a record)
/// goes too.
fn remove_candidate(boxes: &Boxes, name: &str, notes: &mut Vec<String>) {
    struct Collect<'a>(&'a Mutex<Vec<String>>);
    impl Progress for Collect<'_> {
        fn note(&self, line: &str) {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(line.to_owned());
        }
        fn busy(&self, _what: &str, work: &mut dyn FnMut() -> Result<()>) -> Result<()> {
            work()
        }
    }
    let said = Mutex::new(Vec::new());
    let dirs = BoxDirs::new(boxes.home(), name);
    let outcome = if dirs.record().exists() {
        boxes.destroy(name, true, &Collect(&said)).map(|_| ())
    } else {
        // Without a record, only what the fork's own rollback could not remove is left.
        let env = boxes.store().and_then(|s| match s.env(name) {
            Ok(_) => Ok(s.remove_env(name)?),
            Err(_) => Ok(()),
        });
        env.and_then(|()| match fs_err::remove_dir_all(&dirs.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        })
    };
    notes.extend(said.into_inner().unwrap_or_else(|p| p.into_inner()));
    if let Err(e) = outcome {
        notes.push(format!(
            "agentbox: could not remove candidate box {name:?}: {e} (`agentbox prune` retries)"
        ));
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Run candidate `i` in its fork of `src` at `base`: its command, then (if that passed)
/// the test. Never fails: what went wrong is in the result.
fn run_candidate(
    boxes: &Boxes,
    spec: &TournamentSpec,
    src: &BoxRecord,
    base: &str,
    i: usize,
    slot: &Slot,
    progress: &Relay,
) -> CandidateResult {
    let c = &spec.candidates[i];
    let mut r = CandidateResult {
        name: c.name.clone(),
        cmd: c.command.clone(),
        box_name: slot.box_name.clone(),
        branches: Vec::new(),
        node: None,
        cmd_exit: None,
        test_exit: None,
        duration_ms: 0,
        verdict: Verdict::Error,
        error: None,
        output: String::new(),
        log: None,
        kept: false,
    };
    if let Some(v) = slot.cancelled().verdict() {
        r.verdict = v;
        return r;
    }
    let forked = crate::history::fork::fork(
        boxes,
        &ForkSpec {
            source: src.name.to_string(),
            name: Some(slot.box_name.clone()),
            at: Some(base.to_owned()),
        },
        progress,
    );
    let forked = match forked {
        Ok(f) => f,
        Err(e) => {
            r.verdict = slot.cancelled().verdict().unwrap_or(Verdict::Error);
            r.error = Some(e.to_string());
            return r;
        }
    };
    r.kept = true;
    r.node = Some(forked.created.head.clone());
    r.branches = forked.synced;
    let log_path = BoxDirs::new(boxes.home(), &slot.box_name)
        .dir
        .join(LOG_FILE);
    r.log = Some(log_path.clone());
    let mut log = String::new();
    let t0 = Instant::now();
    *slot.started.lock().unwrap_or_else(|p| p.into_inner()) = Some(t0);
    let steps = [(&c.command, true), (&spec.test, false)];
    for (command, is_cmd) in steps {
        if slot.cancelled() != Cancel::None {
            break;
        }
        let ran = boxes.provider().collect(
            &slot.box_name,
            vec!["sh".to_owned(), "-c".to_owned(), command.clone()],
            record::WORKSPACE,
            true,
        );
        log.push_str(&format!("$ {command}\n"));
        let status = match ran {
            Ok(ran) => {
                log.push_str(&ran.output);
                if !ran.output.is_empty() && !ran.output.ends_with('\n') {
                    log.push('\n');
                }
                log.push_str(&format!("[exit {}]\n", ran.status));
                ran.status
            }
            Err(e) => {
                match slot.cancelled() {
                    Cancel::None => {
                        log.push_str(&format!("[not finished: {e}]\n"));
                        r.error = Some(e.to_string());
                    }
                    why => log.push_str(&format!("[stopped: {}]\n", why.describe())),
                }
                break;
            }
        };
        // A status of a command the stop killed is the stop's, not the candidate's.
        if slot.cancelled() != Cancel::None {
            log.push_str(&format!("[stopped: {}]\n", slot.cancelled().describe()));
            break;
        }
        if is_cmd {
            r.cmd_exit = Some(status);
            if status != 0 {
                break;
            }
        } else {
            r.test_exit = Some(status);
        }
    }
    // The timeout is over: what follows is agentbox's work, not the candidate's.
    *slot.started.lock().unwrap_or_else(|p| p.into_inner()) = None;
    r.duration_ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
    if let Err(e) = fs_err::write(&log_path, &log) {
        progress.note(&format!("agentbox: could not write its log: {e}"));
    }
    r.output = tail(&log, OUTPUT_TAIL).to_owned();
    r.verdict = match (slot.cancelled().verdict(), r.cmd_exit, r.test_exit) {
        (Some(v), _, _) => v,
        (None, _, _) if r.error.is_some() => Verdict::Error,
        (None, Some(0), Some(0)) => Verdict::Passed,
        _ => Verdict::Failed,
    };
    if r.verdict == Verdict::Passed {
        let _ = progress.tx.send(Event::Passed(i));
    }
    // Only a box that may be kept needs its work recorded and its branches synced.
    if r.verdict == Verdict::Passed || (r.verdict == Verdict::Failed && spec.keep_losers) {
        settle(boxes, &slot.box_name, c, &mut r, progress);
    }
    r
}

/// After a candidate's commands: its work in a node (auto-capture made one unless the box
/// has capture off) and its branches synced; `r` gets the HEAD and the tips.
fn settle(boxes: &Boxes, name: &str, c: &Candidate, r: &mut CandidateResult, progress: &Relay) {
    let capture = record::read(boxes.home(), name).is_ok_and(|rec| rec.capture);
    if !capture {
        let opts = agentbox_store::CommitOpts {
            message: format!("tournament candidate {}", c.name),
            command: Some(c.command.clone()),
            ..Default::default()
        };
        if let Err(e) = boxes.commit(name, opts) {
            progress.note(&format!(
                "agentbox: could not record its work as a node: {e}"
            ));
        }
    }
    match boxes.store().and_then(|s| Ok(s.env(name)?)) {
        Ok(env) => r.node = Some(env.head.into_string()),
        Err(e) => progress.note(&format!("agentbox: cannot read its HEAD: {e}")),
    }
    if !r.branches.is_empty() {
        match boxes.provider().sync(name) {
            Ok(synced) => r.branches = synced,
            Err(e) => progress.note(&format!("agentbox: syncing its branches failed: {e}")),
        }
    }
}

/// The last at most `max` bytes of `s`, starting at a character.
fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut at = s.len() - max;
    while !s.is_char_boundary(at) {
        at += 1;
    }
    &s[at..]
}

/// Move source box `src` to the winner's `node`: a checkout through the façade (its
/// processes are killed), then each of its repositories moved back from the winner's branch
/// onto its own inside the box, recorded as a node, and synced. A box that was stopped is
/// stopped again.
fn move_source(boxes: &Boxes, src: &BoxRecord, winner: &str, node: &str) -> Result<SourceMoved> {
    let mut timer = agentbox_core::timing::Timer::start("tournament keep");
    let was_running = boxes.provider().is_running(&src.name)?;
    boxes.checkout(&src.name, node, false)?;
    timer.lap("checkout");
    let mut head = node.to_owned();
    let mut branches = Vec::new();
    if !src.repos.is_empty() {
        let win = record::read(boxes.home(), winner)?;
        for g in &src.repos {
            let Some(from) = win.repos.iter().find(|w| w.sub == g.sub) else {
                continue;
            };
            crate::history::fork::move_branch(boxes, &src.name, g, &from.branch)?;
        }
        timer.lap("move branches");
        let opts = agentbox_store::CommitOpts {
            message: format!("tournament winner {winner} ({})", short(node)),
            ..Default::default()
        };
        head = boxes.commit(&src.name, opts)?.id.into_string();
        timer.lap("commit");
        branches = boxes.provider().sync(&src.name)?;
        timer.lap("sync");
    }
    if !was_running {
        boxes.provider().stop(&src.name)?;
        timer.lap("stop");
    }
    Ok(SourceMoved {
        node: head,
        branches,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_of_output_starts_at_a_character() {
        assert_eq!(tail("abc", 10), "abc");
        assert_eq!(tail("abcdef", 3), "def");
        // "é" is two bytes: a cut inside it moves past it.
        assert_eq!(tail("aéb", 2), "b");
    }

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
