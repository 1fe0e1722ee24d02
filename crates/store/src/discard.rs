//! Removing an environment without waiting for its working files to be deleted.
//!
//! Deleting a working area costs one unlink per file it holds: about 5 s on ext4 for a box
//! that installed 10,000 files of `node_modules`. [`Store::discard_env`] makes the
//! environment disappear at once instead: its working area is renamed into `tmp/` (one
//! rename on the store's own filesystem) and its state removed. [`Store::remove_discarded`]
//! deletes the files afterwards, in a process of its own when the caller can start one
//! (the local provider does: `agentbox destroy` returns before the files are gone).
//!
//! Invariant: a discarded area is `tmp/discarded-<env>-<id>` and nothing names it. A removal
//! holds the store lock shared, like every operation that writes, so while the lock is
//! exclusive a discarded area is a leftover like any other entry of `tmp/`: one whose
//! removal was stopped (a crash, a kill) is reported by `fsck` and removed by `prune`.

use std::path::PathBuf;

use crate::backend::WorkDirs;
use crate::store::Store;
use crate::{Error, Result};

/// How the name of every discarded working area in `tmp/` starts.
pub const PREFIX: &str = "discarded-";

/// A working area moved aside by [`Store::discard_env`], still to be deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discarded {
    entry: String,
}

impl Discarded {
    /// Its name in the store's `tmp/`: what [`Store::remove_discarded`] takes (from another
    /// process too).
    pub fn entry(&self) -> &str {
        &self.entry
    }
}

/// Whether `entry` can be the name of a discarded area: the prefix, then one path
/// component. Checked before anything is deleted, since the name may come from a command
/// line.
pub fn is_discarded_entry(entry: &str) -> bool {
    entry.len() > PREFIX.len()
        && entry.starts_with(PREFIX)
        && !entry.contains('/')
        && !entry.contains('\0')
}

impl Store {
    /// Remove environment `name` but leave the deletion of its working files to
    /// [`Store::remove_discarded`]: unmount, move the working area into `tmp/`, remove its
    /// state. Returns the area to delete (`None` when there was none, or when it could not
    /// be moved and was deleted here). Its nodes stay until GC finds them unreferenced.
    pub fn discard_env(&self, name: &str) -> Result<Option<Discarded>> {
        let state = self.env(name)?;
        let _g = self.lock_env(name, "remove")?;
        let mut timer = agentbox_core::timing::Timer::start("remove environment");
        let dirs = self.work_dirs(&state);
        self.backend.unmount(&dirs)?;
        timer.lap("unmount");
        let tmp = self.layout.tmp();
        fs_err::create_dir_all(&tmp)?;
        let entry = format!("{PREFIX}{name}-{}", agentbox_core::id::new_id());
        let discarded = match std::fs::rename(&dirs.work, tmp.join(&entry)) {
            Ok(()) => Some(Discarded { entry }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            // A working area that cannot be moved (EXDEV from a quota project, say) is
            // deleted here, as it always was.
            Err(_) => {
                self.backend.remove_work(&dirs)?;
                None
            }
        };
        timer.lap("working files set aside");
        // env.json goes first: without it the environment no longer exists.
        fs_err::remove_file(self.layout.env_state(name))?;
        fs_err::remove_dir_all(self.layout.env_dir(name))?;
        Ok(discarded)
    }

    /// Delete the working area `entry` of `tmp/` that [`Store::discard_env`] set aside
    /// (nothing when it is gone already: `prune` may have been first).
    pub fn remove_discarded(&self, entry: &str) -> Result<()> {
        self.remove_discarded_then(entry, || ())
    }

    /// [`Store::remove_discarded`], calling `held` once the store lock is held: from then
    /// on no `fsck` or `prune` can mistake the area for the leftover of a stopped removal,
    /// since they wait for the lock. A removal in a process of its own tells its starter
    /// so through `held`, and `destroy` returns only then.
    pub fn remove_discarded_then(&self, entry: &str, held: impl FnOnce()) -> Result<()> {
        if !is_discarded_entry(entry) {
            return Err(Error::Backend {
                path: self.layout.tmp().join(entry),
                message: "not a discarded working area".into(),
            });
        }
        let _held = self.hold("delete a destroyed environment's files")?;
        held();
        agentbox_core::failpoint::hit("discard:before-remove");
        let mut timer = agentbox_core::timing::Timer::start("remove discarded");
        let work: PathBuf = self.layout.tmp().join(entry);
        if work.symlink_metadata().is_ok() {
            // The backend's own removal: on btrfs the area holds subvolumes.
            self.backend.remove_work(&WorkDirs {
                work,
                mountpoint: None,
                base: None,
                box_stopped: false,
            })?;
        }
        timer.lap("working files");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_discarded_name_of_one_component_is_accepted() {
        assert!(is_discarded_entry("discarded-box-1-0123abcd"));
        assert!(!is_discarded_entry("discarded-"));
        assert!(!is_discarded_entry("import-0123"));
        assert!(!is_discarded_entry("discarded-x/../../etc"));
        assert!(!is_discarded_entry("../discarded-x"));
    }
}
