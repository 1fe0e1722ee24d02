//! The table of a Docker box's background processes, kept on the host: what the host
//! asked to run (the argv shown is the host's, never read back from the box), under which
//! id, in which run of which container, and — once seen — how each ended. What a process
//! writes (its log, its PID, its status) stays in the box ([`crate::spawn`]).
//!
//! On disk: `docker-procs.json` in the box's directory, changed only under
//! `docker-procs.lock` there. Ids are never given twice in a box's life (the next id is
//! kept with the table), so an id in the box's files names one process. At most
//! [`RECENT_EXITS`] ended processes are kept (the oldest ends go first).

use std::path::PathBuf;

use agentbox_boxes::records::record::BoxDirs;
use agentbox_boxes::types::{ProcExit, RECENT_EXITS};
use agentbox_boxes::Result;
use agentbox_core::home::Home;
use agentbox_core::lock::{FileLock, Mode};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One background process.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    pub id: u64,
    pub argv: Vec<String>,
    pub started: DateTime<Utc>,
    /// The id of the container it was started in.
    pub container: String,
    /// When that container's run it was started in began (the engine's `StartedAt`).
    pub run: Option<String>,
    /// The engine's id of the exec that runs it (with the wrapper that records its end).
    pub exec: String,
    /// Its PID in the box (0 until the box said).
    pub pid: i32,
    /// How it ended (`None`: not seen ended yet).
    pub exit: Option<ProcExit>,
}

/// A box's table.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Table {
    /// The id the next process gets (ids start at 1).
    pub next: u64,
    pub procs: Vec<Entry>,
}

impl Table {
    /// A fresh id.
    pub fn allocate(&mut self) -> u64 {
        self.next = self.next.max(1);
        let id = self.next;
        self.next += 1;
        id
    }

    /// Entry `id`.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut Entry> {
        self.procs.iter_mut().find(|e| e.id == id)
    }

    /// Forget the ended processes beyond the last [`RECENT_EXITS`] (by when they ended).
    pub fn trim(&mut self) {
        let mut ended: Vec<(DateTime<Utc>, u64)> = self
            .procs
            .iter()
            .filter_map(|e| e.exit.as_ref().map(|x| (x.ended, e.id)))
            .collect();
        if ended.len() <= RECENT_EXITS {
            return;
        }
        ended.sort();
        let drop: Vec<u64> = ended[..ended.len() - RECENT_EXITS]
            .iter()
            .map(|(_, id)| *id)
            .collect();
        self.procs.retain(|e| !drop.contains(&e.id));
    }
}

fn path(home: &Home, name: &str) -> PathBuf {
    BoxDirs::new(home, name).dir.join("docker-procs.json")
}

/// Box `name`'s table, held (for reading or changing) while the guard lives.
pub struct Held {
    pub table: Table,
    path: PathBuf,
    _lock: FileLock,
}

impl Held {
    /// Write the table back.
    pub fn save(&mut self) -> Result<()> {
        self.table.trim();
        agentbox_core::atomic::write_json(&self.path, &self.table)?;
        Ok(())
    }
}

/// Box `name`'s table, locked (`doing`: what for, as a waiter is told).
pub fn hold(home: &Home, name: &str, doing: &str) -> Result<Held> {
    let dir = BoxDirs::new(home, name).dir;
    fs_err::create_dir_all(&dir)?;
    let lock = FileLock::acquire(
        &dir.join("docker-procs.lock"),
        Mode::Exclusive,
        &format!("the processes of box {name:?}"),
        doing,
    )?;
    let path = path(home, name);
    let table = agentbox_core::atomic::read_json_opt(&path)?.unwrap_or_default();
    Ok(Held {
        table,
        path,
        _lock: lock,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(id: u64, secs: i64) -> Entry {
        Entry {
            id,
            argv: vec!["true".into()],
            started: DateTime::from_timestamp(0, 0).expect("time"),
            container: "c".into(),
            run: None,
            exec: "e".into(),
            pid: 7,
            exit: Some(ProcExit {
                status: 0,
                ended: DateTime::from_timestamp(secs, 0).expect("time"),
                killed_by_checkout: false,
                output: Vec::new(),
            }),
        }
    }

    #[test]
    fn ids_are_never_given_twice_and_only_the_last_ends_are_kept() {
        let dir = tempfile::tempdir().expect("tmp");
        let home = Home::at(dir.path().join("home"));
        let mut held = hold(&home, "b", "test").expect("hold");
        assert_eq!(held.table.allocate(), 1);
        assert_eq!(held.table.allocate(), 2);
        // Ended out of id order: the earliest ends go.
        for i in 0..(RECENT_EXITS as u64 + 3) {
            let id = held.table.allocate();
            held.table.procs.push(ended(id, 1000 - i as i64));
        }
        let mut running = ended(held.table.allocate(), 0);
        running.exit = None;
        held.table.procs.push(running.clone());
        held.save().expect("save");
        drop(held);
        let held = hold(&home, "b", "test").expect("again");
        assert_eq!(held.table.procs.len(), RECENT_EXITS + 1);
        assert!(held.table.procs.contains(&running), "a running one stays");
        let kept: Vec<u64> = held.table.procs.iter().map(|e| e.id).collect();
        // The three that ended first (the last three given, at times 1000 - 20..22).
        for gone in [
            RECENT_EXITS as u64 + 3,
            RECENT_EXITS as u64 + 4,
            RECENT_EXITS as u64 + 5,
        ] {
            assert!(!kept.contains(&gone), "{kept:?}");
        }
        assert_eq!(held.table.next, RECENT_EXITS as u64 + 7);
    }
}
