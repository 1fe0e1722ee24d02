//! Terminals attached to a session: each is one connection (its control messages) plus the
//! stream socket it sent (the bytes both ways; see [`crate::proto::Request::Attach`]).
//!
//! Per attached terminal, one thread writes what the session shows to it and one copies
//! its input to the session's terminal; the connection's own thread reads its control
//! messages (resizes). Output is queued per terminal, at most [`BACKLOG`] bytes: a terminal
//! that falls further behind (a slow link, a stopped client) is sent a fresh redraw of the
//! screen instead of the bytes it missed, so that a slow client never holds up the session,
//! the other clients, or more of the supervisor's memory.

use std::sync::Condvar;

use super::sessions::{find, remove, Session};
use super::sink::{Job, Outbox, Sink};
use super::*;

use agentbox_sandbox::proto::WinSize;

/// `Attach`: serve one terminal until it detaches (closes its socket or its connection).
pub(super) fn attach(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    name: Option<String>,
    size: Option<WinSize>,
    history: bool,
    mut fds: Vec<OwnedFd>,
) -> Result<()> {
    let data = match (fds.pop(), fds.is_empty()) {
        (Some(d), true) => d,
        _ => {
            return Err(BoxError::Supervisor(
                "an attach carries one descriptor: its stream socket".into(),
            ))
        }
    };
    let session = find(shared, name.as_deref())?;
    // The most recent attach's size is the session's.
    if let Some(size) = size {
        session.resize(size);
    }
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    let sink = Arc::new(Sink {
        id,
        tty: size.is_some(),
        data,
        conn: conn.try_clone()?,
        out: Mutex::new(Outbox::default()),
        ready: Condvar::new(),
    });
    let info = {
        // The redraw and registration under one lock: every byte after the redraw's screen
        // is queued after it.
        let mut st = lock(&session.state);
        let redraw = st.screen.redraw(sink.tty, history);
        lock(&sink.out).bytes = redraw;
        if let Some(reply) = st.exit_reply() {
            sink.exit(reply);
            st.exit_seen = true;
        }
        st.clients.push(sink.clone());
        session.info(&st)
    };
    reply(conn, &Reply::Attached { session: info }, &[]);
    {
        let (session, sink) = (session.clone(), sink.clone());
        let shared = shared.clone();
        std::thread::spawn(move || {
            write_loop(&session, &sink);
            if lock(&sink.out).closed {
                detach(&shared, &session, sink.id);
            }
        });
    }
    {
        let (session, sink) = (session.clone(), sink.clone());
        let shared = shared.clone();
        std::thread::spawn(move || {
            input_loop(&session, &sink);
            detach(&shared, &session, sink.id);
        });
    }
    loop {
        match ipc::recv::<Request>(conn) {
            Ok((Request::Resize { size }, _)) => {
                if sink.tty {
                    session.resize(size);
                }
            }
            Ok(_) => {}
            Err(ipc::IpcError::Malformed(_)) => {}
            Err(_) => break,
        }
    }
    detach(shared, &session, id);
    Ok(())
}

/// Send the terminal what the session shows, until it detaches or has been told of the
/// end.
fn write_loop(session: &Session, sink: &Sink) {
    loop {
        match sink.next_job() {
            Job::Done => return,
            Job::Bytes(b) => {
                if send_all(&sink.data, &b).is_err() {
                    sink.close();
                    return;
                }
            }
            Job::Resync => {
                let mut st = lock(&session.state);
                let redraw = st.screen.redraw(sink.tty, false);
                let mut out = lock(&sink.out);
                out.bytes = redraw;
                out.resync = false;
            }
            Job::Exit(reply) => {
                // The output is all out: the stream ends, then the connection hears why.
                let _ = rustix::net::shutdown(&sink.data, rustix::net::Shutdown::Write);
                let _ = ipc::send(&sink.conn, &reply, &[]);
                return;
            }
        }
    }
}

/// Copy the terminal's input to the session's terminal, until the terminal detaches.
fn input_loop(session: &Session, sink: &Sink) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match rustix::io::read(&sink.data, &mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        };
        // Looked up each time: a relaunch gives the session a new terminal.
        let master = lock(&session.state).master();
        if let Some(master) = master {
            if write_all(&master, &buf[..n]).is_err() {
                // The process is going; its end will be said.
                continue;
            }
        }
    }
}

/// Forget attached terminal `id` (once; from whichever of its threads notices first). An
/// exited session whose end a terminal saw goes once none is attached.
fn detach(shared: &Shared, session: &Arc<Session>, id: u64) {
    let gone = {
        let mut st = lock(&session.state);
        let Some(pos) = st.clients.iter().position(|c| c.id == id) else {
            return;
        };
        let sink = st.clients.remove(pos);
        sink.close();
        st.clients.is_empty() && st.exit_seen && st.exited()
    };
    if gone {
        remove(shared, session);
    }
}

fn send_all(fd: &OwnedFd, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        match rustix::net::send(fd, bytes, rustix::net::SendFlags::NOSIGNAL) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn write_all(fd: &OwnedFd, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        match rustix::io::write(fd, bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
