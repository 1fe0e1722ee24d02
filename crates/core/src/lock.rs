//! Advisory file locks (`flock`) with a recorded holder.
//!
//! A lock is a file; holding it means holding a `flock` on an open description of it. The
//! kernel drops the lock when the process dies, so a crash never leaves a stale lock. The
//! holder writes `pid <n>: <what it is doing>` into the lock file after acquiring it so that a
//! process that finds the lock taken can say who holds it.

use std::io::{Seek, Write};
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

use crate::{Error, Result};

/// A held lock; released on drop.
#[derive(Debug)]
pub struct FileLock {
    file: fs_err::File,
    path: PathBuf,
}

/// How to wait for a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Exclusive; fail at once with [`Error::Locked`] if taken.
    TryExclusive,
    /// Exclusive; wait until free.
    Exclusive,
    /// Shared; wait until no exclusive holder.
    Shared,
}

impl FileLock {
    /// Acquire the lock at `path` (created if missing). `what` describes the protected
    /// resource for error messages; `doing` is recorded as the holder's activity.
    pub fn acquire(path: &Path, mode: Mode, what: &str, doing: &str) -> Result<FileLock> {
        let mut file = fs_err::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let op = match mode {
            Mode::TryExclusive => FlockOperation::NonBlockingLockExclusive,
            Mode::Exclusive => FlockOperation::LockExclusive,
            Mode::Shared => FlockOperation::LockShared,
        };
        if let Err(e) = flock(&file, op) {
            if e == rustix::io::Errno::WOULDBLOCK {
                let holder = std::fs::read_to_string(path)
                    .ok()
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "another process".to_owned());
                return Err(Error::Locked {
                    what: what.to_owned(),
                    holder,
                    path: path.to_owned(),
                });
            }
            return Err(Error::Io(std::io::Error::new(
                std::io::Error::from(e).kind(),
                format!("flock {}: {e}", path.display()),
            )));
        }
        if mode != Mode::Shared {
            // Best effort: the description only serves error messages.
            let _ = file.set_len(0);
            let _ = file.rewind();
            let _ = writeln!(file, "pid {} ({doing})", std::process::id());
        }
        Ok(FileLock {
            file,
            path: path.to_owned(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = flock(&self.file, FlockOperation::Unlock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_exclusive_names_the_holder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("lock");
        let _held = FileLock::acquire(&p, Mode::TryExclusive, "env demo", "commit").expect("first");
        let err = FileLock::acquire(&p, Mode::TryExclusive, "env demo", "commit")
            .expect_err("second must fail");
        let msg = err.to_string();
        assert!(msg.contains("env demo"), "{msg}");
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
    }
}
