//! The ledger of running tournaments: what a tournament made, for `prune` to remove when
//! the process that ran it ended without cleaning up (a second interrupt ends it at once,
//! `kill -9`, a crash).
//!
//! `tournaments/<id>.json` in the agentbox home ([`Entry`]): written before the first
//! candidate is forked, each candidate's box id added once its fork exists, removed when
//! the tournament returns (whatever it returns: its own cleanup ran). An entry whose process
//! is gone (its PID no longer names a process started at the recorded time) is an
//! interrupted tournament: `prune` removes the candidate boxes it names — only boxes whose
//! id it recorded (a box made later under the same name is someone else's), and half-made
//! candidates (an environment under the name, no record) — then the entry.

use std::path::PathBuf;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::facade::Boxes;
use crate::records::record::{self, BoxDirs};
use crate::types::{BoxLeftover, PruneOutcome};
use crate::Result;

/// One running tournament (see the module documentation).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    /// The process running it, and when that process started (clock ticks since boot, as
    /// `/proc/PID/stat` says): a PID reused later names another process.
    pid: u32,
    started: u64,
    source: String,
    /// Every candidate's box name.
    candidates: Vec<String>,
    /// The ids of the candidate boxes made so far, by name.
    #[serde(default)]
    made: Vec<(String, String)>,
}

/// The entry of the running tournament; removed when dropped.
pub(super) struct Ledger {
    path: PathBuf,
    entry: Mutex<Entry>,
}

fn dir(boxes: &Boxes) -> PathBuf {
    boxes.home().root().join("tournaments")
}

/// When process `pid` started, in clock ticks since boot (`None`: no such process).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields count from the
    // last `)`. `starttime` is field 22.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

impl Ledger {
    /// Record a tournament of `source` whose candidates' boxes are `candidates`, before
    /// any of them is made.
    pub(super) fn begin(boxes: &Boxes, source: &str, candidates: Vec<String>) -> Result<Ledger> {
        let pid = std::process::id();
        let entry = Entry {
            pid,
            started: start_time(pid).unwrap_or(0),
            source: source.to_owned(),
            candidates,
            made: Vec::new(),
        };
        let dir = dir(boxes);
        fs_err::create_dir_all(&dir)?;
        let path = dir.join(format!("{}.json", agentbox_core::id::new_id()));
        agentbox_core::atomic::write_json(&path, &entry)?;
        Ok(Ledger {
            path,
            entry: Mutex::new(entry),
        })
    }

    /// Candidate box `name` exists now, with id `id`.
    pub(super) fn made(&self, name: &str, id: &str) {
        let mut entry = self.entry.lock().unwrap_or_else(|p| p.into_inner());
        entry.made.push((name.to_owned(), id.to_owned()));
        // Without it, prune leaves that box alone: it stays a box the user can see and
        // destroy. Not a reason to fail the candidate.
        if let Err(e) = agentbox_core::atomic::write_json(&self.path, &*entry) {
            eprintln!("agentbox: recording candidate box {name:?} for prune: {e}");
        }
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        let _ = fs_err::remove_file(&self.path);
    }
}

/// Remove (or, `dry_run`, name) the candidate boxes of tournaments whose process ended
/// without cleaning up, and their entries.
pub fn prune(boxes: &Boxes, dry_run: bool) -> Result<Vec<BoxLeftover>> {
    let mut out = Vec::new();
    let dir = dir(boxes);
    let entries = match fs_err::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e.into()),
    };
    for file in entries {
        let path = file?.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let entry: Entry = match agentbox_core::atomic::read_json_opt(&path) {
            Ok(Some(e)) => e,
            // Half-written (it is written whole under another name first: not ours) or
            // gone meanwhile.
            _ => continue,
        };
        if start_time(entry.pid).is_some_and(|t| t == entry.started) {
            // Still running.
            continue;
        }
        let mut kept = false;
        for name in &entry.candidates {
            let Some(outcome) = prune_candidate(boxes, &entry, name, dry_run) else {
                continue;
            };
            kept |= matches!(outcome, PruneOutcome::Kept(_));
            out.push(BoxLeftover {
                kind: "tournament".into(),
                what: format!(
                    "candidate box {name:?} of an interrupted tournament of box {:?}",
                    entry.source
                ),
                target: name.clone(),
                outcome,
            });
        }
        if !dry_run && !kept {
            fs_err::remove_file(&path)?;
        }
    }
    Ok(out)
}

/// What prune does with candidate box `name` of `entry`; `None`: nothing of it is left
/// (or the box there is not the tournament's).
fn prune_candidate(
    boxes: &Boxes,
    entry: &Entry,
    name: &str,
    dry_run: bool,
) -> Option<PruneOutcome> {
    let dirs = BoxDirs::new(boxes.home(), name);
    let ours = match record::read(boxes.home(), name) {
        Ok(rec) => entry
            .made
            .iter()
            .any(|(n, id)| n == name && id.as_str() == &*rec.id),
        // Half made: an environment or directory under the name without a record.
        Err(_) => dirs.dir.exists() || boxes.store().is_ok_and(|s| s.env(name).is_ok()),
    };
    if !ours {
        return None;
    }
    if dry_run {
        return Some(PruneOutcome::WouldRemove);
    }
    let mut notes = Vec::new();
    super::removal::remove_candidate(boxes, name, &mut notes);
    Some(if notes.iter().any(|n| n.contains("could not remove")) {
        PruneOutcome::Kept(notes.join("; "))
    } else {
        PruneOutcome::Removed
    })
}
