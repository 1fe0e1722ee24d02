//! The race: candidates checked, their forks made, at most `parallel` workers running
//! them, verdicts gathered (the rest stopped at the first pass with `first`, or at an
//! interrupt), the losers removed, and the source box moved to the winner with `keep`.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use crate::facade::Boxes;
use crate::progress::Progress;
use crate::records::record::{self, BoxDirs, BoxRecord};
use crate::{BoxError, Result};

use super::candidate::run_candidate;
use super::removal::remove_candidate;
use super::slot::{Cancel, Event, Relay, Slot};
use super::*;

/// Check the candidates before anything is made: at least one, each name distinct and
/// making a valid box name that is free.
pub(super) fn check(boxes: &Boxes, src: &BoxRecord, spec: &TournamentSpec) -> Result<()> {
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

pub(super) fn box_name(src: &BoxRecord, c: &Candidate) -> String {
    format!("{}-{}", src.name, c.name)
}

pub(super) fn run(
    boxes: &Boxes,
    spec: &TournamentSpec,
    progress: &dyn Progress,
) -> Result<TournamentResult> {
    let src = record::read(boxes.home(), &spec.source)?;
    // Every candidate is a fork of the source: its provider runs them all.
    let provider = boxes.provider_of(&src.name)?;
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
    // Until this returns: what `prune` removes if the process ends before it cleans up.
    let ledger = super::ledger::Ledger::begin(
        boxes,
        &src.name,
        slots.iter().map(|s| s.box_name.clone()).collect(),
    )?;
    let mut results: Vec<Option<CandidateResult>> = vec![None; n];
    let mut first_passed = None;
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<Event>();
    std::thread::scope(|scope| {
        for _ in 0..parallel {
            let tx = tx.clone();
            let (slots, next, src, base, ledger) = (&slots, &next, &src, &base, &ledger);
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
                    run_candidate(boxes, spec, src, base, i, &slots[i], &relay, ledger)
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
                    let _ = provider.stop(&s.box_name);
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
            let _ = provider.stop(&r.box_name);
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
pub(super) fn lost_worker(boxes: &Boxes, c: &Candidate, slot: &Slot) -> CandidateResult {
    CandidateResult {
        error: Some("its worker ended without a result".into()),
        // Its box, if the fork got that far, is removed with the losers (its name was free
        // when the tournament began: the box is this tournament's).
        kept: BoxDirs::new(boxes.home(), &slot.box_name).record().exists(),
        ..CandidateResult::unrun(c, slot)
    }
}

pub(super) fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Move source box `src` to the winner's `node`: a checkout through the façade (its
/// processes are killed), then each of its repositories moved back from the winner's branch
/// onto its own inside the box, recorded as a node, and synced. A box that was stopped is
/// stopped again.
pub(super) fn move_source(
    boxes: &Boxes,
    src: &BoxRecord,
    winner: &str,
    node: &str,
) -> Result<SourceMoved> {
    let mut timer = agentbox_core::timing::Timer::start("tournament keep");
    let provider = boxes.provider_of(&src.name)?;
    let was_running = provider.is_running(&src.name)?;
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
        branches = provider.sync(&src.name)?;
        timer.lap("sync");
    }
    if !was_running {
        provider.stop(&src.name)?;
        timer.lap("stop");
    }
    Ok(SourceMoved {
        node: head,
        branches,
    })
}
