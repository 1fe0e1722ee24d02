//! The supervisor's sockets: accepting connections (bounded, for the in-box socket) and
//! serving each request.

use super::*;

/// Accept connections; `inbox` marks the socket reachable from inside the box.
/// Most connections served at once on the box's in-box socket: each one is a thread of the
/// supervisor, and the box must not be able to exhaust the supervisor's threads or
/// descriptors. Beyond it a connection is answered with an error and closed.
pub(super) const INBOX_CONNECTIONS: usize = 64;

/// The same for the host's socket (reachable only by the box's owner).
pub(super) const HOST_CONNECTIONS: usize = 1024;

/// How long a new connection may take to send its request: idle connections do not hold a
/// slot for long.
pub(super) const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a refused connection's request is waited for.
pub(super) const REFUSAL_READ: Duration = Duration::from_millis(50);

/// One served connection, counted until dropped.
pub(super) struct Slot(Arc<AtomicU64>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(super) fn accept_loop(shared: Arc<Shared>, listener: OwnedFd, inbox: bool) {
    let limit = if inbox {
        INBOX_CONNECTIONS
    } else {
        HOST_CONNECTIONS
    } as u64;
    let open = Arc::new(AtomicU64::new(0));
    loop {
        match rustix::net::accept_with(&listener, rustix::net::SocketFlags::CLOEXEC) {
            Ok(conn) => {
                if open.fetch_add(1, Ordering::SeqCst) >= limit {
                    open.fetch_sub(1, Ordering::SeqCst);
                    // The request is read (briefly: a silent client costs the in-box accept
                    // loop at most this long), since a unix socket closed with unread data
                    // resets its peer, which would lose the answer.
                    use rustix::net::sockopt::{set_socket_timeout, Timeout};
                    let _ = set_socket_timeout(&conn, Timeout::Recv, Some(REFUSAL_READ));
                    let _ = ipc::recv::<Request>(&conn);
                    reply(
                        &conn,
                        &Reply::Error {
                            error: agentbox_boxes::relay::wire::WireError::Other {
                                message: format!(
                                    "box {:?}: too many connections to its supervisor (at most {limit} at once)",
                                    shared.name
                                ),
                                hint: Some("close idle connections and try again".into()),
                                code: agentbox_core::exit::ExitCode::Failure.into(),
                            },
                        },
                        &[],
                    );
                    continue;
                }
                let slot = Slot(open.clone());
                let shared = shared.clone();
                std::thread::spawn(move || {
                    serve(shared, conn, inbox);
                    drop(slot);
                });
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                eprintln!("accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// How long a stop waits for an operation under way (a commit, a checkout) to finish.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// `m` locked, or `None` once `grace` passed without it coming free.
fn lock_within<T>(m: &Mutex<T>, grace: Duration) -> Option<MutexGuard<'_, T>> {
    let until = std::time::Instant::now() + grace;
    loop {
        match m.try_lock() {
            Ok(g) => return Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if std::time::Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(std::sync::TryLockError::WouldBlock) => return None,
        }
    }
}

pub(super) fn reply(conn: &OwnedFd, r: &Reply, fds: &[BorrowedFd<'_>]) {
    let _ = ipc::send(conn, r, fds);
}

pub(super) fn error_reply(e: &BoxError) -> Reply {
    Reply::Error { error: e.into() }
}

pub(super) fn serve(shared: Arc<Shared>, conn: OwnedFd, inbox: bool) {
    use rustix::net::sockopt::{set_socket_timeout, Timeout};
    let _ = set_socket_timeout(&conn, Timeout::Recv, Some(FIRST_REQUEST_TIMEOUT));
    let Ok((req, fds)) = ipc::recv::<Request>(&conn) else {
        return;
    };
    // Later messages on the connection (signals for a running command) come when they come.
    let _ = set_socket_timeout(&conn, Timeout::Recv, None);
    // Inside the box, only the box's own CLI commands are served.
    let result = match req {
        Request::Relay { call } if inbox => relay(&shared, &conn, call, fds),
        Request::Ping if inbox => {
            reply(&conn, &Reply::Ok, &[]);
            Ok(())
        }
        _ if inbox => Err(BoxError::Supervisor(
            "only agentbox commands are served inside a box".into(),
        )),
        Request::Relay { .. } => Err(BoxError::Supervisor(
            "relayed requests come from inside the box".into(),
        )),
        Request::Exec {
            argv,
            env,
            cwd,
            tty,
            kind,
            capture,
        } => exec(&shared, &conn, argv, env, cwd, tty, kind, capture, fds),
        Request::Spawn { argv, env, cwd } => spawn_bg(&shared, &conn, argv, env, cwd),
        Request::Ps => {
            let procs = lock(&shared.procs)
                .values()
                .map(|p| p.info.clone())
                .collect();
            let exited = lock(&shared.exited).iter().cloned().collect();
            reply(&conn, &Reply::Procs { procs, exited }, &[]);
            Ok(())
        }
        Request::Kill { target, signal } => kill_one(&shared, &conn, target, signal),
        Request::Commit { message, command } => {
            let _ops = lock(&shared.ops);
            shared
                .store
                .commit(
                    &shared.name,
                    CommitOpts {
                        message,
                        command,
                        metadata: git_metadata(&shared),
                    },
                )
                .map_err(BoxError::from)
                .map(|node| {
                    after_node(&shared);
                    reply(
                        &conn,
                        &Reply::Node {
                            node: Some(node.id.into_string()),
                            killed: 0,
                        },
                        &[],
                    )
                })
        }
        Request::Checkout {
            reference,
            keep_processes: false,
        } => checkout(&shared, &conn, &reference),
        Request::Checkout {
            reference,
            keep_processes: true,
        } => restore_in_place(&shared, &conn, &reference),
        Request::Stop => {
            // Nothing new starts (the capture loop ends at its next look); an operation
            // under way gets a bounded time to finish, then the box stops anyway: the store
            // finishes or undoes whatever a stop in the middle leaves (as after a crash),
            // and a stop must not wait behind a box that keeps its supervisor busy.
            let mut timer = agentbox_core::timing::Timer::start("stop");
            shared.stopping.store(true, Ordering::SeqCst);
            let _ops = lock_within(&shared.ops, STOP_GRACE);
            timer.lap("operation under way");
            reply(&conn, &Reply::Ok, &[]);
            shutdown(&shared, timer);
        }
        Request::Ping => {
            reply(&conn, &Reply::Ok, &[]);
            Ok(())
        }
        Request::Sync => {
            let _ops = lock(&shared.ops);
            sync_git(&shared).map(|repos| reply(&conn, &Reply::Synced { repos }, &[]))
        }
        Request::Dirty => {
            let repos = dirty_inside(&shared);
            reply(&conn, &Reply::Dirty { repos }, &[]);
            Ok(())
        }
        Request::Health => {
            let capture = shared
                .rec
                .capture
                .then(|| lock(&shared.capture).effective());
            let pids_limit = match shared.pids_limit.load(Ordering::SeqCst) {
                0 => None,
                n => Some(n),
            };
            reply(
                &conn,
                &Reply::Health {
                    capture,
                    scratch: scratch_use(&shared),
                    pids_limit,
                    box_root: lock(&shared.box_)
                        .as_ref()
                        .and_then(|g| agentbox_sandbox::idmap::of_process(g.running.pid1_host)),
                },
                &[],
            );
            Ok(())
        }
        Request::Broker { spec } => broker::start_or_update(&shared, &conn, spec),
        Request::Signal { .. } => Err(BoxError::Supervisor(
            "a signal can only follow an exec on the same connection".into(),
        )),
        Request::SessionStart {
            name,
            argv,
            env,
            cwd,
            size,
            supervise,
        } => sessions::start_session(&shared, &conn, name, argv, env, cwd, size, supervise),
        Request::Sessions { prune } => sessions::list(&shared, &conn, prune),
        Request::Attach {
            session,
            size,
            history,
        } => attach::attach(&shared, &conn, session, size, history, fds),
        Request::Resize { .. } => Err(BoxError::Supervisor(
            "a resize can only follow an attach on the same connection".into(),
        )),
    };
    if let Err(e) = result {
        reply(&conn, &error_reply(&e), &[]);
    }
}
