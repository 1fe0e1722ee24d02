//! The in-box bridge of a Docker box (`agentbox __relay-bridge`, run by the host's relay as
//! one long `docker exec`, see `agentbox_provider_docker::relay`): it makes the box's
//! relay socket where the in-box `agentbox` looks for it, as in a local box, and carries
//! each connection's request over its stdout to the host and the host's answer from its
//! stdin back — the answer's output written to the descriptors the caller passed, then
//! its status as the supervisor's `Exited` reply.
//!
//! It runs with the box's privileges and decides nothing: the host checks every request.
//! It ends when its stdin ends (the host's relay is gone).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use agentbox_boxes::records::record;
use agentbox_provider_docker::relay::frame::{self, Frame, Kind};
use agentbox_provider_local::proto::{Reply, Request};
use agentbox_sandbox::ipc;

/// The most output bytes the bridge takes in one frame from the host.
const MAX_FROM_HOST: usize = 1 << 20;

/// What the host sends.
const BOX_TAKES: &[Kind] = &[Kind::Out, Kind::Err, Kind::Exit];

/// A caller waiting for its answer: its connection, stdout and stderr.
struct Waiting {
    conn: OwnedFd,
    stdout: std::fs::File,
    stderr: std::fs::File,
}

type Table = Arc<Mutex<HashMap<u32, Waiting>>>;

/// Run the bridge; the process's exit status.
pub fn main() -> i32 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("agentbox bridge: {e}");
            1
        }
    }
}

fn run() -> std::io::Result<()> {
    let dir = std::path::Path::new(agentbox_boxes::types::INBOX_DIR);
    fs_err::create_dir_all(dir)?;
    let path = dir.join(record::INBOX_SOCKET);
    // A socket left by an earlier bridge (its container was stopped under it).
    let _ = fs_err::remove_file(&path);
    let listener = rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::bind(&listener, &rustix::net::SocketAddrUnix::new(&path)?)?;
    // Any user of the box may ask, as in a local box.
    fs_err::set_permissions(
        &path,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o777),
    )?;
    rustix::net::listen(&listener, 64)?;
    // Which socket is this bridge's: a later bridge may have replaced it by the time this
    // one ends, and that one's must stay.
    let own = std::os::unix::fs::MetadataExt::ino(&fs_err::symlink_metadata(&path)?);
    let table: Table = Arc::default();
    let out = Arc::new(Mutex::new(std::io::stdout()));
    {
        let (table, out) = (Arc::clone(&table), Arc::clone(&out));
        std::thread::spawn(move || accept(listener, table, out));
    }
    let result = from_host(&table);
    if fs_err::symlink_metadata(&path).is_ok_and(|m| std::os::unix::fs::MetadataExt::ino(&m) == own)
    {
        let _ = fs_err::remove_file(&path);
    }
    result
}

/// Take connections, each request sent to the host as a call of its own number.
fn accept(listener: OwnedFd, table: Table, out: Arc<Mutex<std::io::Stdout>>) {
    let mut next: u32 = 0;
    loop {
        let conn = match rustix::net::accept_with(&listener, rustix::net::SocketFlags::CLOEXEC) {
            Ok(c) => c,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                eprintln!("agentbox bridge: accept: {e}");
                return;
            }
        };
        next = next.wrapping_add(1);
        let id = next;
        let (table, out) = (Arc::clone(&table), Arc::clone(&out));
        std::thread::spawn(move || forward(id, conn, &table, &out));
    }
}

/// Read connection `id`'s one request and send it to the host.
fn forward(id: u32, conn: OwnedFd, table: &Table, out: &Mutex<std::io::Stdout>) {
    let refuse = |conn: &OwnedFd, why: &str| {
        let error = agentbox_boxes::relay::wire::WireError::Other {
            message: why.to_owned(),
            hint: Some("inside a box, agentbox sends only the in-box requests".into()),
            code: agentbox_core::exit::ExitCode::Usage.into(),
        };
        let _ = ipc::send(conn, &Reply::Error { error }, &[]);
    };
    let (request, fds) = match ipc::recv::<Request>(&conn) {
        Ok(r) => r,
        Err(e) => return refuse(&conn, &format!("unreadable request: {e}")),
    };
    let fds: std::result::Result<[OwnedFd; 3], _> = fds.try_into();
    let (Request::Relay { call }, Ok([_stdin, stdout, stderr])) = (request, fds) else {
        return refuse(&conn, "only the in-box agentbox's requests, with stdin, stdout and stderr, are answered in a Docker box");
    };
    let payload = match serde_json::to_vec(&call) {
        Ok(p) => p,
        Err(e) => return refuse(&conn, &e.to_string()),
    };
    lock(table).insert(
        id,
        Waiting {
            conn,
            stdout: stdout.into(),
            stderr: stderr.into(),
        },
    );
    let mut o = out
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let sent = o
        .write_all(&frame::encode(id, Kind::Call, &payload))
        .and_then(|()| o.flush());
    if sent.is_err() {
        lock(table).remove(&id);
    }
}

fn lock(table: &Table) -> std::sync::MutexGuard<'_, HashMap<u32, Waiting>> {
    table
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The host's answers, to their callers, until stdin ends.
fn from_host(table: &Table) -> std::io::Result<()> {
    let mut reader = frame::Reader::new(BOX_TAKES, MAX_FROM_HOST);
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match stdin.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        for f in reader.feed(&buf[..n]) {
            let Frame::Whole {
                conn,
                kind,
                payload,
            } = f
            else {
                eprintln!("agentbox bridge: skipped a frame from the host: {f:?}");
                continue;
            };
            // A caller that went away is no error: its answer is dropped. Written outside
            // the table's lock: a caller that does not read blocks only its own answer's
            // stream, not the other callers' registration.
            match kind {
                Kind::Out | Kind::Err => {
                    let target = lock(table).get(&conn).and_then(|w| match kind {
                        Kind::Out => w.stdout.try_clone().ok(),
                        _ => w.stderr.try_clone().ok(),
                    });
                    if let Some(mut f) = target {
                        let _ = f.write_all(&payload);
                    }
                }
                Kind::Exit => {
                    if let Some(w) = lock(table).remove(&conn) {
                        let reply = Reply::Exited {
                            status: frame::exit_status(&payload),
                            node: None,
                            killed_by_checkout: false,
                            capture_error: None,
                            killed_because: None,
                        };
                        let _ = ipc::send(&w.conn, &reply, &[]);
                    }
                }
                Kind::Call => {}
            }
        }
    }
}
