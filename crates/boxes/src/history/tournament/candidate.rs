//! One candidate's run in its fork: the command, then the test, each through the provider,
//! the output's tail kept, and the fork settled.

use std::time::Instant;

use crate::facade::Boxes;
use crate::history::fork::ForkSpec;
use crate::progress::Progress;
use crate::records::record::{self, BoxDirs, BoxRecord};

use super::slot::{Cancel, Event, Relay, Slot};
use super::*;

/// Run candidate `i` in its fork of `src` at `base`: its command, then (if that passed)
/// the test. Never fails: what went wrong is in the result.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_candidate(
    boxes: &Boxes,
    spec: &TournamentSpec,
    src: &BoxRecord,
    base: &str,
    i: usize,
    slot: &Slot,
    progress: &Relay,
    ledger: &super::ledger::Ledger,
) -> CandidateResult {
    let c = &spec.candidates[i];
    let mut r = CandidateResult::unrun(c, slot);
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
    ledger.made(&slot.box_name, &forked.created.record.id);
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
        let ran = boxes.provider_of(&slot.box_name).and_then(|p| {
            p.collect(
                &slot.box_name,
                vec!["sh".to_owned(), "-c".to_owned(), command.clone()],
                record::WORKSPACE,
                true,
            )
        });
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
pub(super) fn settle(
    boxes: &Boxes,
    name: &str,
    c: &Candidate,
    r: &mut CandidateResult,
    progress: &Relay,
) {
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
        match boxes.provider_of(name).and_then(|p| p.sync(name)) {
            Ok(synced) => r.branches = synced,
            Err(e) => progress.note(&format!("agentbox: syncing its branches failed: {e}")),
        }
    }
}

/// The last at most `max` bytes of `s`, starting at a character.
pub(super) fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut at = s.len() - max;
    while !s.is_char_boundary(at) {
        at += 1;
    }
    &s[at..]
}

impl CandidateResult {
    /// Candidate `c` in `slot` before anything of it ran: an error until its run says
    /// otherwise.
    pub(super) fn unrun(c: &Candidate, slot: &Slot) -> CandidateResult {
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
            error: None,
            output: String::new(),
            log: None,
            kept: false,
        }
    }
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
}
