//! The caller's terminal while a command runs on one in a box: raw mode (every key goes to
//! the box's program, which echoes), restored when the command ends; the window's size,
//! given to the box's terminal when it is made and followed while the command runs.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use rustix::termios::{self, Termios};

/// Whether standard input and standard output are both terminals.
pub fn both_terminals() -> bool {
    termios::isatty(rustix::stdio::stdin()) && termios::isatty(rustix::stdio::stdout())
}

/// The size of the terminal on standard output as (rows, columns); 24x80 when it has none.
pub fn size() -> (u16, u16) {
    match termios::tcgetwinsize(rustix::stdio::stdout()) {
        Ok(w) if w.ws_row > 0 && w.ws_col > 0 => (w.ws_row, w.ws_col),
        _ => (24, 80),
    }
}

/// Standard input in raw mode until dropped (nothing when it is no terminal).
pub struct RawMode {
    saved: Option<Termios>,
}

impl RawMode {
    pub fn enter() -> RawMode {
        let fd = rustix::stdio::stdin();
        let Ok(saved) = termios::tcgetattr(fd) else {
            return RawMode { saved: None };
        };
        let mut raw = saved.clone();
        raw.make_raw();
        if termios::tcsetattr(fd, termios::OptionalActions::Flush, &raw).is_err() {
            return RawMode { saved: None };
        }
        RawMode { saved: Some(saved) }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let fd: BorrowedFd<'_> = rustix::stdio::stdin();
            let _ = termios::tcsetattr(fd, termios::OptionalActions::Flush, saved);
        }
    }
}

/// How often the caller's terminal size is looked at while a command runs on one.
const SIZE_LOOK: std::time::Duration = std::time::Duration::from_millis(100);

/// The caller's terminal size kept current (as [`agentbox_docker::exec::ExecSpec::tty_size`]
/// takes it) by a thread of its own until dropped: looked at every [`SIZE_LOOK`], which
/// needs no signal handler.
pub struct SizeFollower {
    pub size: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SizeFollower {
    pub fn start() -> SizeFollower {
        let (rows, cols) = size();
        let size = Arc::new(AtomicU32::new(agentbox_docker::exec::pack_size(rows, cols)));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (size, stop) = (Arc::clone(&size), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(SIZE_LOOK);
                    let (rows, cols) = self::size();
                    size.store(
                        agentbox_docker::exec::pack_size(rows, cols),
                        Ordering::Relaxed,
                    );
                }
            })
        };
        SizeFollower {
            size,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for SizeFollower {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
