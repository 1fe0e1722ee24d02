//! One attached terminal as a session sees it: its sockets and its output queue, at most
//! [`BACKLOG`] bytes before it is sent a redraw instead (see [`super::attach`]).

use std::sync::Condvar;

use super::*;

/// Most bytes queued for one attached terminal before it is sent a redraw instead.
pub(super) const BACKLOG: usize = 1 << 20;

/// One attached terminal: its queue and its sockets.
pub(super) struct Sink {
    pub(super) id: u64,
    pub(super) tty: bool,
    /// The stream socket: the session's output to it, its input from it.
    pub(super) data: OwnedFd,
    /// The connection, where the process's end is said.
    pub(super) conn: OwnedFd,
    pub(super) out: Mutex<Outbox>,
    pub(super) ready: Condvar,
}

#[derive(Default)]
pub(super) struct Outbox {
    pub(super) bytes: Vec<u8>,
    /// It fell behind: what it missed is replaced by a redraw.
    pub(super) resync: bool,
    /// The process ended: said once the bytes before it are sent.
    pub(super) exit: Option<Reply>,
    /// Detached: nothing more is sent.
    pub(super) closed: bool,
}

/// What the writer thread does next.
pub(super) enum Job {
    Bytes(Vec<u8>),
    Resync,
    Exit(Reply),
    Done,
}

impl Sink {
    /// Queue output (called with the session's state locked, so that queues get bytes in
    /// the order the screen did).
    pub(super) fn push(&self, bytes: &[u8]) {
        let mut out = lock(&self.out);
        if out.closed || out.resync {
            // A redraw is coming, made from a screen that holds these bytes.
            return;
        }
        if out.bytes.len() + bytes.len() > BACKLOG {
            out.bytes = Vec::new();
            out.resync = true;
        } else {
            out.bytes.extend_from_slice(bytes);
        }
        self.ready.notify_one();
    }

    /// Say how the session's process ended, after the output queued before.
    pub(super) fn exit(&self, reply: Reply) {
        let mut out = lock(&self.out);
        out.exit = Some(reply);
        self.ready.notify_one();
    }

    /// Stop serving it: its threads end (the sockets are shut down under them).
    pub(super) fn close(&self) {
        lock(&self.out).closed = true;
        self.ready.notify_one();
        let _ = rustix::net::shutdown(&self.data, rustix::net::Shutdown::Both);
    }

    pub(super) fn next_job(&self) -> Job {
        let mut out = lock(&self.out);
        loop {
            if out.closed {
                return Job::Done;
            }
            if out.resync {
                return Job::Resync;
            }
            if !out.bytes.is_empty() {
                return Job::Bytes(std::mem::take(&mut out.bytes));
            }
            if let Some(r) = out.exit.take() {
                return Job::Exit(r);
            }
            out = self.ready.wait(out).unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink() -> Sink {
        let (a, b) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .expect("socketpair");
        Sink {
            id: 1,
            tty: true,
            data: a,
            conn: b,
            out: Mutex::new(Outbox::default()),
            ready: Condvar::new(),
        }
    }

    #[test]
    fn a_terminal_that_falls_behind_gets_a_redraw_instead_of_a_backlog() {
        let s = sink();
        s.push(b"abc");
        s.push(b"def");
        assert!(matches!(s.next_job(), Job::Bytes(b) if b == b"abcdef"));
        let chunk = vec![b'x'; BACKLOG / 4];
        for _ in 0..8 {
            s.push(&chunk);
        }
        // Never more than the backlog queued; what it missed is replaced by a redraw.
        assert!(lock(&s.out).bytes.len() <= BACKLOG);
        assert!(matches!(s.next_job(), Job::Resync));
        s.exit(Reply::Ok);
        s.close();
        assert!(matches!(s.next_job(), Job::Done));
    }

    #[test]
    fn the_end_is_said_after_the_output_before_it() {
        let s = sink();
        s.push(b"last words");
        s.exit(Reply::Ok);
        assert!(matches!(s.next_job(), Job::Bytes(b) if b == b"last words"));
        assert!(matches!(s.next_job(), Job::Exit(Reply::Ok)));
    }
}
