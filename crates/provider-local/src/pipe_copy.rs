//! Copying between a pipe a box writes to or reads from and a host descriptor, on a thread of
//! the host process: the box gets the pipe's other end, never the host descriptor itself.
//!
//! Used where a host descriptor must not reach a box: the user's terminal (a box process that
//! kept it could read what the user types at the host shell later, or inject into it), and
//! the files box output is spooled to on the host (bounded, so a box cannot fill the host's
//! disk with an answer).
//!
//! A box process may keep its end of a pipe open after the command the host waited for ended
//! (a daemon it started): the copy must not wait for it. So a copy is told when the command
//! ended, and then stops as soon as the pipe has nothing more to give at once.

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use rustix::event::{poll, PollFd, PollFlags};

/// How long a copy waits for more data between checks of whether the command ended.
const TICK: rustix::event::Timespec = rustix::event::Timespec {
    tv_sec: 0,
    tv_nsec: 50_000_000,
};

/// What a copy from a pipe did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    /// Bytes written to the destination.
    pub bytes: u64,
    /// The source had more than the limit: the copy stopped there and closed the pipe (the
    /// writer gets `EPIPE`).
    pub over_limit: bool,
}

/// A thread copying everything read from a pipe into a writer (which it gives back).
pub struct FromPipe<W> {
    ended: Arc<AtomicBool>,
    thread: JoinHandle<std::io::Result<(Copied, W)>>,
}

impl<W: Write + Send + 'static> FromPipe<W> {
    /// Copy from `source` (a pipe's read end) into `dest` until the pipe ends, `limit`
    /// bytes were exceeded, or [`FromPipe::finish`] was called and the pipe is empty.
    pub fn spawn(
        source: OwnedFd,
        mut dest: W,
        limit: Option<u64>,
        flush_each: bool,
    ) -> FromPipe<W> {
        let ended = Arc::new(AtomicBool::new(false));
        let seen = ended.clone();
        let thread = std::thread::spawn(move || {
            let mut copied = Copied {
                bytes: 0,
                over_limit: false,
            };
            let mut buf = vec![0u8; 64 << 10];
            let mut file = std::fs::File::from(source);
            loop {
                let ready = {
                    let mut fds = [PollFd::new(&file, PollFlags::IN)];
                    match poll(&mut fds, Some(&TICK)) {
                        Ok(n) => n > 0,
                        Err(rustix::io::Errno::INTR) => false,
                        Err(e) => return Err(e.into()),
                    }
                };
                if !ready {
                    if seen.load(Ordering::Acquire) {
                        // The command ended and nothing more came: whoever still holds the
                        // pipe's other end is not waited for.
                        return Ok((copied, dest));
                    }
                    continue;
                }
                let n = match file.read(&mut buf) {
                    Ok(0) => return Ok((copied, dest)),
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                let room = limit.map_or(n as u64, |l| (l - copied.bytes).min(n as u64));
                dest.write_all(&buf[..room as usize])?;
                if flush_each {
                    dest.flush()?;
                }
                copied.bytes += room;
                if room < n as u64 {
                    copied.over_limit = true;
                    return Ok((copied, dest));
                }
            }
        });
        FromPipe { ended, thread }
    }

    /// The command writing to the pipe ended: copy what is still in the pipe, then stop.
    pub fn finish(self) -> std::io::Result<(Copied, W)> {
        self.ended.store(true, Ordering::Release);
        self.thread
            .join()
            .map_err(|_| std::io::Error::other("a pipe copy thread panicked"))?
    }
}

/// A writer keeping the first `cap` bytes written to it and dropping the rest (so a writer
/// on the other side of a pipe is never stopped, and never fills anything).
pub struct Capped {
    pub kept: Vec<u8>,
    cap: usize,
}

impl Capped {
    pub fn new(cap: usize) -> Capped {
        Capped {
            kept: Vec::new(),
            cap,
        }
    }
}

impl Write for Capped {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let room = self.cap.saturating_sub(self.kept.len()).min(b.len());
        self.kept.extend_from_slice(&b[..room]);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A pipe: `(read end, write end)`, both close-on-exec.
pub fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// A thread copying `source` (the caller's standard input) into a pipe's write end until the
/// source ends or the pipe's reader goes. The thread is not joined: it may be blocked reading
/// a terminal when the command ends, and ends with the process.
pub fn to_pipe<R: Read + Send + 'static>(mut source: R, dest: OwnedFd) {
    std::thread::spawn(move || {
        let mut out = std::fs::File::from(dest);
        let mut buf = [0u8; 8192];
        loop {
            match source.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    if out.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
        }
    });
}

/// Whether `fd` is a terminal (any kind: a pseudo-terminal's either side, a console, a
/// serial line): it answers the terminal attributes request.
pub fn is_terminal(fd: impl AsFd) -> bool {
    rustix::termios::isatty(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_stops_at_its_limit_and_when_the_pipe_ends() {
        let (r, w) = pipe().expect("pipe");
        let out = Arc::new(std::sync::Mutex::new(Vec::new()));
        struct Shared(Arc<std::sync::Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("lock").extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let copy = FromPipe::spawn(r, Shared(out.clone()), Some(5), false);
        let mut w = std::fs::File::from(w);
        w.write_all(b"0123456789").expect("write");
        drop(w);
        let (done, _) = copy.finish().expect("copy");
        assert_eq!(
            done,
            Copied {
                bytes: 5,
                over_limit: true
            }
        );
        assert_eq!(&*out.lock().expect("lock"), b"01234");

        let (r, w) = pipe().expect("pipe");
        let copy = FromPipe::spawn(r, Vec::new(), None, false);
        let mut w = std::fs::File::from(w);
        w.write_all(b"abc").expect("write");
        drop(w);
        let (done, got) = copy.finish().expect("copy");
        assert_eq!(
            done,
            Copied {
                bytes: 3,
                over_limit: false
            }
        );
        assert_eq!(got, b"abc");
    }

    #[test]
    fn a_capped_writer_keeps_the_start_and_accepts_everything() {
        let mut c = Capped::new(4);
        assert_eq!(c.write(b"abcdef").expect("write"), 6);
        assert_eq!(c.write(b"gh").expect("write"), 2);
        assert_eq!(c.kept, b"abcd");
    }

    #[test]
    fn a_finished_copy_does_not_wait_for_a_writer_that_stays() {
        let (r, w) = pipe().expect("pipe");
        let copy = FromPipe::spawn(r, Vec::new(), None, false);
        let mut w = std::fs::File::from(w);
        w.write_all(b"abc").expect("write");
        // `w` stays open, as a daemon of the box would keep it.
        let (done, _) = copy.finish().expect("copy");
        assert_eq!(done.bytes, 3);
        drop(w);
    }
}
