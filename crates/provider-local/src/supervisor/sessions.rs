//! The box's sessions (see `agentbox_boxes::sessions`): processes on a terminal the
//! supervisor owns. The terminal's master side is never handed to a caller: the supervisor
//! reads it for the session's whole life (one thread per launch), feeds a VT parser
//! ([`super::screen`]) and copies the bytes to the terminals attached ([`super::attach`]).
//!
//! Lifetime: a session is in the table from its start until it is removed — after its
//! process exited, once a terminal that saw the exit detaches, or by a prune. A checkout
//! kills its process with every other one of the box; a supervised session is then started
//! again (same command, environment and directory, a new terminal of the new box), its
//! screen and attached terminals kept.
//!
//! Locks: the table's before a session's state, never the other way round; a session's
//! state before an attached terminal's outbox.

use super::screen::Screen;
use super::sink::Sink;
use super::*;

use agentbox_boxes::sessions::{
    check_name, clamp_size, default_name, SessionError, SessionInfo, SessionState, DEFAULT_SIZE,
    MAX_SESSIONS,
};
use agentbox_sandbox::proto::WinSize;

/// The box's sessions by name.
pub(super) type SessionTable = Mutex<BTreeMap<String, Arc<Session>>>;

/// How long an ended process's last output is waited for (the terminal's other side can
/// stay open in a process it left behind).
const DRAIN: Duration = Duration::from_millis(500);

pub(super) struct Session {
    pub(super) name: String,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: Option<Workdir>,
    supervise: bool,
    started: chrono::DateTime<Utc>,
    pub(super) state: Mutex<State>,
}

pub(super) struct State {
    pub(super) screen: Screen,
    run: Run,
    launches: u32,
    /// The terminals attached now.
    pub(super) clients: Vec<Arc<Sink>>,
    /// A terminal was attached when (or after) the process ended: once none is, the
    /// session goes.
    pub(super) exit_seen: bool,
}

/// The session's process.
enum Run {
    /// Being started (a first launch, or a relaunch after a checkout).
    Starting { id: u64 },
    Running {
        id: u64,
        pid: i32,
        master: Arc<OwnedFd>,
    },
    Exited {
        id: u64,
        status: i32,
        by_checkout: bool,
        ended: chrono::DateTime<Utc>,
        error: Option<String>,
    },
}

impl State {
    /// The terminal's master side while the process runs.
    pub(super) fn master(&self) -> Option<Arc<OwnedFd>> {
        match &self.run {
            Run::Running { master, .. } => Some(master.clone()),
            _ => None,
        }
    }

    /// How the process ended, as attached terminals are told (`None`: it has not); a
    /// relaunch that failed says why in `killed_because`.
    pub(super) fn exit_reply(&self) -> Option<Reply> {
        match &self.run {
            Run::Exited {
                status,
                by_checkout,
                error,
                ..
            } => Some(Reply::Exited {
                status: *status,
                node: None,
                killed_by_checkout: *by_checkout,
                capture_error: None,
                killed_because: error.clone(),
            }),
            _ => None,
        }
    }

    pub(super) fn exited(&self) -> bool {
        matches!(self.run, Run::Exited { .. })
    }
}

impl Session {
    /// What a listing says about it, from its locked state.
    pub(super) fn info(&self, st: &State) -> SessionInfo {
        let (id, pid, state, ended, status, by_checkout, error) = match &st.run {
            Run::Starting { id } => (*id, None, SessionState::Running, None, None, false, None),
            Run::Running { id, pid, .. } => (
                *id,
                Some(*pid),
                SessionState::Running,
                None,
                None,
                false,
                None,
            ),
            Run::Exited {
                id,
                status,
                by_checkout,
                ended,
                error,
            } => (
                *id,
                None,
                SessionState::Exited,
                Some(*ended),
                Some(*status),
                *by_checkout,
                error.clone(),
            ),
        };
        SessionInfo {
            name: self.name.clone(),
            argv: self.argv.clone(),
            state,
            id,
            pid,
            started: self.started,
            ended,
            status,
            killed_by_checkout: by_checkout,
            error,
            clients: st.clients.len(),
            supervise: self.supervise,
            launches: st.launches,
            size: st.screen.size(),
        }
    }

    /// Give the session's terminal a new size (the most recent attached terminal's): the
    /// screen and the terminal the process has (which signals it `SIGWINCH`).
    pub(super) fn resize(&self, size: WinSize) {
        let size = clamp_size(size);
        let mut st = lock(&self.state);
        if st.screen.size() == size {
            return;
        }
        st.screen.resize(size);
        if let Some(master) = st.master() {
            let _ = rustix::termios::tcsetwinsize(
                &*master,
                rustix::termios::Winsize {
                    ws_row: size.rows,
                    ws_col: size.cols,
                    ws_xpixel: 0,
                    ws_ypixel: 0,
                },
            );
        }
    }

    /// Bytes the process wrote: into the screen and to every attached terminal. With none
    /// attached, the questions it asks its terminal are answered here.
    fn output(&self, bytes: &[u8], master: &OwnedFd) {
        let replies = {
            let mut st = lock(&self.state);
            let answer = st.clients.is_empty();
            let replies = st.screen.feed(bytes, answer);
            for c in &st.clients {
                c.push(bytes);
            }
            replies
        };
        if !replies.is_empty() {
            write_if_ready(master, &replies);
        }
    }

    /// Text of the supervisor's own, shown in the session.
    fn note(&self, text: &str) {
        let mut st = lock(&self.state);
        let bytes = st.screen.note(text);
        for c in &st.clients {
            c.push(&bytes);
        }
    }

    /// The process ended for good: attached terminals are told; the session stays listed
    /// until one that saw it detaches, or a prune.
    fn ended(&self, id: u64, status: i32, by_checkout: bool, error: Option<String>) {
        let mut st = lock(&self.state);
        st.run = Run::Exited {
            id,
            status,
            by_checkout,
            ended: Utc::now(),
            error,
        };
        st.exit_seen = !st.clients.is_empty();
        if let Some(reply) = st.exit_reply() {
            for c in &st.clients {
                c.exit(reply.clone());
            }
        }
    }
}

/// Write `bytes` to the terminal when it takes them now; dropped otherwise (answers to a
/// program that does not read its input must not block the reader of its output).
fn write_if_ready(master: &OwnedFd, bytes: &[u8]) {
    let mut fds = [rustix::event::PollFd::new(
        master,
        rustix::event::PollFlags::OUT,
    )];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    if matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(1)) {
        let _ = rustix::io::write(master, bytes);
    }
}

/// `SessionStart`: reserve the name, start the process, answer `Session`.
#[allow(clippy::too_many_arguments)]
pub(super) fn start_session(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    name: Option<String>,
    argv: Vec<String>,
    mut env: Vec<(String, String)>,
    cwd: Option<Workdir>,
    size: Option<WinSize>,
    supervise: bool,
) -> Result<()> {
    if argv.is_empty() {
        return Err(BoxError::Command {
            message: "a session needs a command".into(),
            status: 2,
        });
    }
    if let Some(n) = &name {
        check_name(n)?;
    }
    // The terminal attached terminals show is an emulator of the usual kind.
    if !env.iter().any(|(k, _)| k == "TERM") {
        env.push(("TERM".into(), "xterm-256color".into()));
    }
    let session = {
        let mut table = lock(&shared.sessions);
        if table.len() >= MAX_SESSIONS {
            return Err(SessionError::TooMany {
                name: shared.name.clone(),
            }
            .into());
        }
        let name = match name {
            Some(n) if table.contains_key(&n) => {
                return Err(SessionError::Exists {
                    name: shared.name.clone(),
                    session: n,
                }
                .into())
            }
            Some(n) => n,
            None => default_name(&argv, |n| table.contains_key(n)),
        };
        let session = Arc::new(Session {
            name: name.clone(),
            argv,
            env,
            cwd,
            supervise,
            started: Utc::now(),
            state: Mutex::new(State {
                screen: Screen::new(size.map_or(DEFAULT_SIZE, clamp_size)),
                run: Run::Starting { id: 0 },
                launches: 0,
                clients: Vec::new(),
                exit_seen: false,
            }),
        });
        // Reserved before the process starts: two starts never take one name.
        table.insert(name, session.clone());
        session
    };
    if let Err(e) = launch(shared, &session) {
        remove(shared, &session);
        return Err(e);
    }
    let info = session.info(&lock(&session.state));
    reply(conn, &Reply::Session { session: info }, &[]);
    Ok(())
}

/// Start the session's command on a new terminal of the running box, and the threads that
/// read the terminal and wait for the process.
fn launch(shared: &Arc<Shared>, session: &Arc<Session>) -> Result<()> {
    let info = new_info(shared, ProcKind::Session, session.argv.clone());
    let id = info.id;
    let size = {
        let mut st = lock(&session.state);
        st.run = Run::Starting { id };
        st.screen.size()
    };
    let (exit_tx, exit_rx) = channel();
    let (pid, mut fds) = start_process(
        shared,
        info,
        session.env.clone(),
        session.cwd.clone(),
        Some(size),
        &[],
        Some(exit_tx),
    )?;
    let master = Arc::new(
        fds.pop()
            .ok_or_else(|| BoxError::Supervisor("the box gave the session no terminal".into()))?,
    );
    {
        let mut st = lock(&session.state);
        st.launches += 1;
        st.run = Run::Running {
            id,
            pid,
            master: master.clone(),
        };
    }
    let (done_tx, done_rx) = channel::<()>();
    {
        let session = session.clone();
        std::thread::spawn(move || {
            read_terminal(&session, &master);
            drop(done_tx);
        });
    }
    {
        let shared = shared.clone();
        let session = session.clone();
        std::thread::spawn(move || wait_exit(&shared, &session, id, &exit_rx, &done_rx));
    }
    Ok(())
}

/// Read the terminal until its other side is closed everywhere (EIO).
fn read_terminal(session: &Session, master: &OwnedFd) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match rustix::io::read(master, &mut buf) {
            Ok(0) => return,
            Ok(n) => session.output(&buf[..n], master),
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
    }
}

/// Wait for the session's process to end; relaunch it when a checkout killed it and it is
/// supervised, else record the end.
fn wait_exit(
    shared: &Arc<Shared>,
    session: &Arc<Session>,
    id: u64,
    exit_rx: &Receiver<ExitNote>,
    done_rx: &Receiver<()>,
) {
    let note = exit_rx.recv().unwrap_or(ExitNote {
        status: 128 + libc::SIGKILL,
        by_checkout: false,
    });
    // Its last output first.
    let _ = done_rx.recv_timeout(DRAIN);
    if note.by_checkout && session.supervise && !shared.stopping.load(Ordering::SeqCst) {
        let launches = lock(&session.state).launches;
        session.note(&format!(
            "the box was rolled back; relaunching {} (launch {})",
            agentbox_boxes::types::render_command(&session.argv),
            launches + 1
        ));
        match launch(shared, session) {
            Ok(()) => return,
            Err(e) => {
                let status = match &e {
                    BoxError::Command { status, .. } => *status,
                    _ => 126,
                };
                let why = format!("relaunching it failed: {e}");
                session.note(&why);
                session.ended(id, status, false, Some(why));
                return;
            }
        }
    }
    session.ended(id, note.status, note.by_checkout, None);
}

/// Take `session` out of the table (when it is still the one under its name).
pub(super) fn remove(shared: &Shared, session: &Arc<Session>) {
    let mut table = lock(&shared.sessions);
    if table
        .get(&session.name)
        .is_some_and(|s| Arc::ptr_eq(s, session))
    {
        table.remove(&session.name);
    }
}

/// The session `name` names, or the box's only one.
pub(super) fn find(shared: &Shared, name: Option<&str>) -> Result<Arc<Session>> {
    let table = lock(&shared.sessions);
    match name {
        Some(n) => table.get(n).cloned().ok_or_else(|| {
            SessionError::NoSuchSession {
                name: shared.name.clone(),
                session: n.to_owned(),
            }
            .into()
        }),
        None => {
            let mut all = table.values();
            match (all.next(), all.next()) {
                (Some(only), None) => Ok(only.clone()),
                (None, _) => Err(SessionError::NoSessions {
                    name: shared.name.clone(),
                }
                .into()),
                (Some(_), Some(_)) => Err(SessionError::WhichSession {
                    name: shared.name.clone(),
                    candidates: table.keys().cloned().collect(),
                }
                .into()),
            }
        }
    }
}

/// `Sessions`: every session (after, with `prune`, removing the exited ones no terminal is
/// attached to).
pub(super) fn list(shared: &Shared, conn: &OwnedFd, prune: bool) -> Result<()> {
    let mut pruned = Vec::new();
    let mut table = lock(&shared.sessions);
    if prune {
        table.retain(|_, s| {
            let st = lock(&s.state);
            let gone = st.exited() && st.clients.is_empty();
            if gone {
                pruned.push(s.info(&st));
            }
            !gone
        });
    }
    let sessions = table.values().map(|s| s.info(&lock(&s.state))).collect();
    drop(table);
    reply(conn, &Reply::Sessions { sessions, pruned }, &[]);
    Ok(())
}
