//! How a detached process started by agentbox (a box's supervisor) tells its starter why it
//! could not start: a pipe whose write end the child inherits (its number in
//! [`STARTUP_FD_ENV`]), on which the child writes one report before it exits. The starter
//! reads it once the child has ended; a child that started fine closes the pipe with
//! nothing on it.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The environment variable naming the descriptor a started child writes its failure to.
pub const STARTUP_FD_ENV: &str = "AGENTBOX_STARTUP_FD";

/// The most a report may hold (one error with its hint).
const MAX_REPORT: u64 = 64 << 10;

/// The starter's side.
pub struct StartupPipe {
    read: OwnedFd,
    write: Option<OwnedFd>,
}

impl StartupPipe {
    /// A pipe whose write end a child spawned next inherits (the read end is close-on-exec).
    pub fn new() -> std::io::Result<StartupPipe> {
        let (read, write) = rustix::pipe::pipe()?;
        rustix::io::fcntl_setfd(&read, rustix::io::FdFlags::CLOEXEC)?;
        Ok(StartupPipe {
            read,
            write: Some(write),
        })
    }

    /// The descriptor number to put in [`STARTUP_FD_ENV`] for the child.
    pub fn child_fd(&self) -> i32 {
        self.write.as_ref().map_or(-1, |w| w.as_raw_fd())
    }

    /// Close this process's copy of the write end (after the child is spawned), so the
    /// pipe ends when the child's copies do.
    pub fn spawned(&mut self) {
        self.write = None;
    }

    /// What the child reported (`None`: nothing, it started). Call once the child ended.
    pub fn report(self) -> Option<String> {
        let mut text = String::new();
        let mut f = std::fs::File::from(self.read);
        let _ = (&mut f).take(MAX_REPORT).read_to_string(&mut text);
        let text = text.trim().to_owned();
        (!text.is_empty()).then_some(text)
    }
}

/// The child's side: the starter's pipe, if this process was started with one. Taken once
/// and made close-on-exec at once, so nothing this process starts inherits it.
pub fn take_pipe() -> Option<std::fs::File> {
    let n: i32 = std::env::var(STARTUP_FD_ENV).ok()?.parse().ok()?;
    std::env::remove_var(STARTUP_FD_ENV);
    if n < 3 {
        return None;
    }
    // SAFETY: the starter passed this descriptor for us alone (see `StartupPipe`); it is
    // taken once, here, before any other code could use the number.
    let fd = unsafe { OwnedFd::from_raw_fd(n) };
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC).ok()?;
    Some(std::fs::File::from(fd))
}

/// Write `report` to the starter's pipe (taken with [`take_pipe`]).
pub fn report(pipe: &mut std::fs::File, report: &str) {
    let _ = pipe.write_all(report.as_bytes());
}
