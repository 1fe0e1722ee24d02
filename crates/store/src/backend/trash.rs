//! Old work areas, removed on another thread.
//!
//! A checkout throws away the box's work area: the upper directory holding everything the
//! box wrote since its last checkout (a `node_modules` of 10,000 files, already copied
//! into the layers of its nodes). Removing it is one `unlink` per file, and freshly written
//! files often wait for their data to reach the disk first: seconds, tens of seconds on a
//! busy disk. A reset only renames the work area aside (O(1)) and the box runs again at
//! once; the old work area is removed here, meanwhile.
//!
//! Invariants:
//!
//! * An old work area is named `work.old-<id>` beside the live one, and nothing reads it:
//!   a process that ends (or is killed) before its removal finished leaves it under that
//!   name, and the environment's next reset (or its removal, which takes its whole
//!   directory) removes it.
//! * Within one process, at most one thread removes a given old work area.
//! * Dropping the [`Trash`] waits for the removals still running, so a short-lived process
//!   (a checkout of a stopped box) ends with the old work area gone; a long-lived one (a
//!   box's supervisor) does not wait at all.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::JoinHandle;

use crate::Result;

/// The name prefix of an old work area, beside the live one.
pub(super) const OLD_WORK_PREFIX: &str = "work.old-";

/// One thread removing old work areas.
#[derive(Debug)]
struct Removal {
    paths: Vec<PathBuf>,
    thread: JoinHandle<()>,
}

/// Removals of old work areas running on other threads.
#[derive(Debug, Default)]
pub(crate) struct Trash {
    running: Mutex<Vec<Removal>>,
}

impl Trash {
    /// Move the work area `work` aside (when it exists) and start removing it, together with
    /// the old work areas an earlier process left beside it. Returns once `work` is gone.
    pub(super) fn discard(&self, work: &Path) -> Result<()> {
        let mut old = set_aside(work)?;
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.retain(|r| !r.thread.is_finished());
        old.retain(|p| !running.iter().any(|r| r.paths.contains(p)));
        if old.is_empty() {
            return Ok(());
        }
        let paths = old.clone();
        // Errors are left to the next reset: the old areas keep their names, and nothing
        // depends on their being gone.
        let spawned = std::thread::Builder::new()
            .name("remove old work".into())
            .spawn(move || {
                for p in &paths {
                    let _ = crate::bundle::fsutil::remove_any(p);
                }
            });
        match spawned {
            Ok(thread) => running.push(Removal { paths: old, thread }),
            // No thread to be had: removed here, as it was before.
            Err(_) => {
                drop(running);
                for p in &old {
                    remove_now(p)?;
                }
            }
        }
        Ok(())
    }
}

impl Drop for Trash {
    fn drop(&mut self) {
        let running = std::mem::take(self.running.get_mut().unwrap_or_else(|p| p.into_inner()));
        for r in running {
            let _ = r.thread.join();
        }
    }
}

fn remove_now(p: &Path) -> Result<()> {
    crate::bundle::fsutil::remove_any(p).map_err(|e| crate::Error::Io(crate::store::io_at(p, e)))
}

/// Rename `work` to a fresh `work.old-<id>` beside it (a crash never leaves a half-removed
/// work area under the live name) and list every old work area there, that one included.
pub(super) fn set_aside(work: &Path) -> Result<Vec<PathBuf>> {
    let Some(env_dir) = work.parent() else {
        return Ok(Vec::new());
    };
    if work.exists() {
        let old = env_dir.join(format!("{OLD_WORK_PREFIX}{}", agentbox_core::id::new_id()));
        fs_err::rename(work, &old)?;
    }
    let mut old = Vec::new();
    for entry in fs_err::read_dir(env_dir)? {
        let entry = entry?;
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(OLD_WORK_PREFIX)
        {
            old.push(entry.path());
        }
    }
    Ok(old)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .expect("read the env dir")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn the_work_area_is_gone_at_once_and_its_old_copies_once_removed() {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let env = tmp.path();
        let work = env.join("work");
        for i in 0..200 {
            let d = work.join(format!("upper/node_modules/p{i}"));
            std::fs::create_dir_all(&d).expect("mkdir");
            std::fs::write(d.join("index.js"), "x").expect("write");
        }
        // What a process killed during an earlier removal left.
        std::fs::create_dir_all(env.join("work.old-left/upper/x")).expect("mkdir");
        std::fs::write(env.join("env.json"), "{}").expect("write");
        let trash = Trash::default();
        trash.discard(&work).expect("discard");
        assert!(!work.exists());
        // A second discard meanwhile (nothing to set aside) neither fails nor races.
        trash.discard(&work).expect("discard again");
        drop(trash);
        assert_eq!(names(env), vec!["env.json".to_owned()]);
    }
}
