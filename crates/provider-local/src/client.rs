//! The CLI side of a box: starting its supervisor on demand, requests, and running a
//! command in the foreground (descriptor passing, signal forwarding, a PTY relay).

pub use agentbox_boxes::types::ExecOutcome;
use std::io::{IsTerminal, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentbox_core::home::Home;
use agentbox_sandbox::ipc;
use agentbox_sandbox::proto::{Network, WinSize};
use std::os::unix::process::CommandExt;

use crate::proto::{ProcKind, Reply, Request, Workdir};
use agentbox_boxes::records::record::{self, BoxDirs};
use agentbox_boxes::{BoxError, Result};

/// A connection to one box's supervisor.
pub struct Client {
    pub(crate) sock: OwnedFd,
}

fn connect_once(path: &std::path::Path) -> std::io::Result<OwnedFd> {
    let sock = rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    let addr = rustix::net::SocketAddrUnix::new(path)?;
    rustix::net::connect(&sock, &addr)?;
    Ok(sock)
}

/// Whether box `name`'s supervisor is running (its socket answers, or it holds the box's
/// supervisor lock).
pub fn is_running(home: &Home, name: &str) -> bool {
    let dirs = BoxDirs::new(home, name);
    connect_once(&dirs.socket()).is_ok() || supervisor_alive(&dirs)
}

/// Whether a supervisor process holds the box: the lock it keeps for its whole life is
/// taken. Unlike the socket, this cannot give a false "not running" while a supervisor is
/// starting up or its socket is slow to answer.
fn supervisor_alive(dirs: &BoxDirs) -> bool {
    matches!(
        agentbox_core::lock::FileLock::acquire(
            &dirs.lock(),
            agentbox_core::lock::Mode::TryExclusive,
            "box",
            "probe",
        ),
        Err(agentbox_core::Error::Locked { .. })
    )
}

/// The socket of a supervisor that holds the box's lock, waited for a few seconds;
/// `None` when the supervisor ended meanwhile (it was stopping).
fn wait_for_socket(dirs: &BoxDirs, name: &str) -> Result<Option<Client>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(sock) = connect_once(&dirs.socket()) {
            return Ok(Some(Client { sock }));
        }
        if !supervisor_alive(dirs) {
            return Ok(None);
        }
        if Instant::now() > deadline {
            return Err(BoxError::Supervisor(format!(
                "box {name:?} is held by a supervisor that does not answer on {} (see {})",
                dirs.socket().display(),
                dirs.supervisor_log().display()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Start the broker of box `rec`, whose supervisor this process just started (the record's
/// `broker` flag), with this process's credentials. A box that was asked for a broker runs
/// with it or not at all: when it cannot be started the box is stopped again, and the next
/// command that starts it tries again.
fn start_recorded_broker(home: &Home, rec: &record::BoxRecord, dirs: &BoxDirs) -> Result<()> {
    let started = agentbox_boxes::agents::broker::spec_from_caller(home, rec).and_then(|spec| {
        let c = Client {
            sock: connect_once(&dirs.socket())?,
        };
        match c.request(&Request::Broker { spec })? {
            Reply::Broker { .. } => Ok(()),
            other => Err(BoxError::Supervisor(format!(
                "unexpected reply from the supervisor: {other:?}"
            ))),
        }
    });
    if let Err(e) = started {
        if let Ok(sock) = connect_once(&dirs.socket()) {
            let _ = (Client { sock }).request(&Request::Stop);
        }
        return Err(e);
    }
    Ok(())
}

/// Why a supervisor could not start, as it reports it on its startup pipe (JSON).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct StartFailure {
    pub error: agentbox_boxes::relay::wire::WireError,
}

impl Client {
    /// Connect to `name`'s supervisor, starting it (and the box) when it is not running and
    /// `start` is set. `Ok(None)` when it is not running and `start` is not set.
    pub fn connect(home: &Home, name: &str, start: bool) -> Result<Option<Client>> {
        Client::connect_using(home, name, start, &std::env::current_exe()?)
    }

    /// [`Client::connect`], starting a supervisor as `exe __supervise NAME` (the agentbox
    /// binary; a library's caller names it).
    pub fn connect_using(
        home: &Home,
        name: &str,
        start: bool,
        exe: &std::path::Path,
    ) -> Result<Option<Client>> {
        let rec = record::read(home, name)?;
        let dirs = BoxDirs::new(home, name);
        if let Ok(sock) = connect_once(&dirs.socket()) {
            return Ok(Some(Client { sock }));
        }
        if supervisor_alive(&dirs) {
            // A supervisor holds the box (it is starting, or busy): the box runs, and
            // nothing may act on its tree behind the supervisor's back.
            if let Some(client) = wait_for_socket(&dirs, name)? {
                return Ok(Some(client));
            }
        }
        if !start {
            return Ok(None);
        }
        if rec.network == Network::Private {
            // The supervisor checks again; checked here, the error keeps its exit code and
            // hint rather than arriving as a line of the supervisor's log.
            agentbox_sandbox::net::preflight(&format!("box {name:?}"), rec.rootless)?;
            agentbox_sandbox::net::check_ports(name, &rec.publish)?;
        }
        let log = fs_err::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dirs.supervisor_log())?
            .into_parts()
            .0;
        // The supervisor writes why it could not start on this pipe (see
        // `agentbox_sandbox::startup`); the log keeps the details.
        let mut startup = agentbox_sandbox::startup::StartupPipe::new()?;
        let mut supervise = Command::new(exe);
        // The supervisor (and the box's first process, which inherits its environment) never
        // holds a real credential in its environment: a broker gets it over the socket.
        for k in agentbox_broker::CREDENTIAL_ENV {
            supervise.env_remove(k);
        }
        let mut child = supervise
            .arg("__supervise")
            .arg(name)
            .env("AGENTBOX_HOME", home.root())
            .env(
                agentbox_sandbox::startup::STARTUP_FD_ENV,
                startup.child_fd().to_string(),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .map_err(|e| BoxError::SupervisorStart {
                name: name.into(),
                message: e.to_string(),
            })?;
        startup.spawned();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(sock) = connect_once(&dirs.socket()) {
                // Reaped by nobody: the supervisor outlives us, in its own session.
                drop(child);
                if rec.broker {
                    start_recorded_broker(home, &rec, &dirs)?;
                }
                return Ok(Some(Client { sock }));
            }
            if let Ok(Some(status)) = child.try_wait() {
                // Another supervisor may have won the race for the lock.
                if let Ok(sock) = connect_once(&dirs.socket()) {
                    return Ok(Some(Client { sock }));
                }
                return Err(match startup.report() {
                    Some(report) => match serde_json::from_str::<StartFailure>(&report) {
                        // The supervisor's own error names the box.
                        Ok(f) => f.error.into(),
                        Err(_) => BoxError::SupervisorStart {
                            name: name.into(),
                            message: report,
                        },
                    },
                    None => BoxError::SupervisorStart {
                        name: name.into(),
                        message: format!(
                            "it exited with {status} (see {})",
                            dirs.supervisor_log().display()
                        ),
                    },
                });
            }
            if Instant::now() > deadline {
                return Err(BoxError::SupervisorStart {
                    name: name.into(),
                    message: "it did not answer within 30 s".into(),
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Connect to the supervisor of the box this process runs in, when it runs in one.
    pub fn inside_box() -> Option<Client> {
        std::env::var_os("AGENTBOX_BOX")?;
        let path =
            std::path::Path::new(agentbox_boxes::types::INBOX_DIR).join(record::INBOX_SOCKET);
        connect_once(&path).ok().map(|sock| Client { sock })
    }

    /// From inside a box: run `agentbox ARGS` through the supervisor, with this process's
    /// stdio. Returns the exit status.
    /// Send one in-box request (see [`agentbox_boxes::relay`]) with this process's stdin, stdout
    /// and stderr, where the host writes its answer; the command's exit status.
    pub fn relay(&self, call: agentbox_boxes::relay::RelayCall) -> Result<i32> {
        let (i, o, e) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
        self.send(&Request::Relay { call }, &[i.as_fd(), o.as_fd(), e.as_fd()])?;
        loop {
            if let (Reply::Exited { status, .. }, _) = self.recv()? {
                return Ok(status);
            }
        }
    }

    /// [`Client::relay`] with the given descriptors as the request's stdin, stdout and
    /// stderr (a program that reads the host's answer itself).
    pub fn relay_with(
        &self,
        call: agentbox_boxes::relay::RelayCall,
        fds: [BorrowedFd<'_>; 3],
    ) -> Result<i32> {
        self.send(&Request::Relay { call }, &fds)?;
        loop {
            if let (Reply::Exited { status, .. }, _) = self.recv()? {
                return Ok(status);
            }
        }
    }

    /// Send one request and read one reply.
    pub fn request(&self, req: &Request) -> Result<Reply> {
        self.send(req, &[])?;
        self.recv().map(|(r, _)| r)
    }

    pub(crate) fn send(&self, req: &Request, fds: &[BorrowedFd<'_>]) -> Result<()> {
        ipc::send(&self.sock, req, fds).map_err(|e| {
            // A supervisor that refuses a connection (too many open) answers at once and
            // closes: its answer says more than the failed send.
            match self.recv() {
                Err(refused @ BoxError::Remote { .. }) => refused,
                _ => BoxError::Supervisor(e.to_string()),
            }
        })
    }

    pub(crate) fn recv(&self) -> Result<(Reply, Vec<OwnedFd>)> {
        match ipc::recv::<Reply>(&self.sock) {
            Ok((Reply::Error { error }, _)) => Err(error.into()),
            Ok(r) => Ok(r),
            Err(ipc::IpcError::Closed) => Err(BoxError::Supervisor(
                "the supervisor closed the connection (the box was stopped?)".into(),
            )),
            Err(e) => Err(BoxError::Supervisor(e.to_string())),
        }
    }
}

pub use agentbox_boxes::records::record::caller_env;

/// Run `argv` in the box in the foreground: a PTY when stdin is a terminal, otherwise the
/// caller's own descriptors. Signals the CLI receives are forwarded to the command.
pub fn exec(
    client: &Client,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: Option<Workdir>,
    kind: ProcKind,
    capture: bool,
    force_tty: Option<bool>,
) -> Result<ExecOutcome> {
    let stdin = std::io::stdin();
    // A terminal only when both ends are one: output redirected to a file must not get a
    // terminal's line endings.
    let tty = force_tty.unwrap_or_else(|| stdin.is_terminal() && std::io::stdout().is_terminal());
    let size = if tty {
        rustix::termios::tcgetwinsize(stdin.as_fd())
            .ok()
            .filter(|w| w.ws_row > 0 && w.ws_col > 0)
            .map(|w| WinSize {
                rows: w.ws_row,
                cols: w.ws_col,
            })
            .or(Some(WinSize { rows: 24, cols: 80 }))
    } else {
        None
    };
    // Catch signals before the command starts, so none arriving early kills us instead of
    // reaching it; they are delivered once it runs.
    let signals = catch_signals(size.is_some())?;
    let req = Request::Exec {
        argv,
        env,
        cwd,
        tty: size,
        kind,
        capture,
    };
    let relays = if size.is_some() {
        client.send(&req, &[])?;
        Vec::new()
    } else {
        let (fds, relays) = box_stdio()?;
        client.send(&req, &[fds[0].as_fd(), fds[1].as_fd(), fds[2].as_fd()])?;
        // Our copies of the box's ends go, so the box's last close is seen as the end.
        drop(fds);
        relays
    };
    let (_, mut fds) = client.recv()?;
    let master = if size.is_some() {
        Some(
            fds.pop()
                .ok_or_else(|| BoxError::Supervisor("no terminal came back from the box".into()))?,
        )
    } else {
        None
    };
    forward_signals(client, signals)?;
    let relayed = match &master {
        Some(m) => Some(relay(m)?),
        None => None,
    };
    loop {
        if let Some(outcome) = exited(client.recv()?.0) {
            if let Some((_raw, drained)) = &relayed {
                // Let the last output through before the terminal is restored.
                let _ = drained.recv_timeout(Duration::from_millis(500));
            }
            for relay in relays {
                relay.finish()?;
            }
            return Ok(outcome);
        }
    }
}

/// The standard input, output and error a command run without a PTY gets, and the copies
/// that relay them: the caller's own descriptors where they are files, pipes or sockets, but
/// never a terminal. A box process given the user's terminal could keep it after the
/// command ends (a daemon holding the descriptor) and read what the user types at the host
/// shell afterwards, or write into it; so a terminal end is replaced by a pipe this process
/// copies to or from while the command runs. Standard input from a terminal this process
/// does not have in the foreground (`exec … &`) is not read at all (the box gets
/// `/dev/null`), as reading it would stop this process.
type Relay = crate::pipe_copy::FromPipe<Box<dyn Write + Send>>;

fn box_stdio() -> Result<([OwnedFd; 3], Vec<Relay>)> {
    use crate::pipe_copy::{is_terminal, pipe, to_pipe, FromPipe};
    let stdin = std::io::stdin();
    let input = if !is_terminal(&stdin) {
        stdin.as_fd().try_clone_to_owned()?
    } else if in_foreground(&stdin) {
        let (r, w) = pipe()?;
        to_pipe(stdin, w);
        r
    } else {
        fs_err::File::open("/dev/null")?.into_parts().0.into()
    };
    let mut relays = Vec::new();
    let mut output = |fd: BorrowedFd<'_>, dest: Box<dyn Write + Send>| -> Result<OwnedFd> {
        if !is_terminal(fd) {
            return Ok(fd.try_clone_to_owned()?);
        }
        let (r, w) = pipe()?;
        relays.push(FromPipe::spawn(r, dest, None, true));
        Ok(w)
    };
    let out = output(std::io::stdout().as_fd(), Box::new(std::io::stdout()))?;
    let err = output(std::io::stderr().as_fd(), Box::new(std::io::stderr()))?;
    Ok(([input, out, err], relays))
}

/// Whether terminal `tty` has this process's process group in the foreground.
fn in_foreground(tty: impl AsFd) -> bool {
    rustix::termios::tcgetpgrp(tty).ok() == Some(rustix::process::getpgrp())
}

/// The outcome an `Exited` reply carries (`None`: another reply).
fn exited(reply: Reply) -> Option<ExecOutcome> {
    match reply {
        Reply::Exited {
            status,
            node,
            killed_by_checkout,
            capture_error,
            killed_because,
        } => Some(ExecOutcome {
            status,
            node,
            killed_by_checkout,
            capture_error,
            killed_because,
        }),
        _ => None,
    }
}

/// Run `argv` in the box with no input and its output (stdout and stderr together)
/// collected: for commands agentbox runs in a box on the user's behalf, in the C locale so
/// their messages can be read. With `capture`, a change it makes becomes a node as for
/// `exec`.
pub fn exec_collect(
    client: &Client,
    argv: Vec<String>,
    cwd: Option<String>,
    capture: bool,
) -> Result<(ExecOutcome, String)> {
    use crate::pipe_copy::{pipe, Capped, FromPipe};
    let null = fs_err::File::open("/dev/null")?;
    // Through a pipe whose start this process keeps: the box never writes a host file, and
    // a command that says more than that is read on, not stored.
    let (r, out) = pipe()?;
    let collect = FromPipe::spawn(r, Capped::new(COLLECT_LIMIT), None, false);
    let req = Request::Exec {
        argv,
        env: caller_env(&["LC_ALL=C".to_owned()]),
        cwd: cwd.map(Workdir::default_for),
        tty: None,
        kind: ProcKind::Exec,
        capture,
    };
    client.send(&req, &[null.as_fd(), out.as_fd(), out.as_fd()])?;
    drop(out);
    loop {
        if let Some(outcome) = exited(client.recv()?.0) {
            let (_, said) = collect.finish()?;
            return Ok((outcome, String::from_utf8_lossy(&said.kept).into_owned()));
        }
    }
}

/// Run `argv` in the box with `stdin` and `stdout` as its standard input and output (the
/// caller holds the pipes' other ends); its standard error collected (bounded). Both ends
/// given are closed here once the supervisor has them, so that the caller sees the end of
/// the command's output and the command the end of its input.
pub fn exec_piped(
    client: &Client,
    argv: Vec<String>,
    cwd: Option<String>,
    capture: bool,
    stdin: OwnedFd,
    stdout: OwnedFd,
) -> Result<(ExecOutcome, String)> {
    use crate::pipe_copy::{pipe, Capped, FromPipe};
    let (r, err) = pipe()?;
    let collect = FromPipe::spawn(r, Capped::new(COLLECT_LIMIT), None, false);
    let req = Request::Exec {
        argv,
        env: caller_env(&["LC_ALL=C".to_owned()]),
        cwd: cwd.map(Workdir::default_for),
        tty: None,
        kind: ProcKind::Exec,
        capture,
    };
    client.send(&req, &[stdin.as_fd(), stdout.as_fd(), err.as_fd()])?;
    drop((stdin, stdout, err));
    loop {
        if let Some(outcome) = exited(client.recv()?.0) {
            let (_, said) = collect.finish()?;
            return Ok((outcome, String::from_utf8_lossy(&said.kept).into_owned()));
        }
    }
}

/// The most of a collected command's output kept (16 MiB).
const COLLECT_LIMIT: usize = 16 << 20;

/// The signals forwarded to a foreground command: SIGTERM, SIGHUP, SIGUSR1/2, and without
/// a PTY also SIGINT and SIGQUIT (with one, Ctrl-C travels as a byte through the terminal).
fn catch_signals(tty: bool) -> Result<signal_hook::iterator::Signals> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
    let mut sigs = vec![SIGTERM, SIGHUP, SIGUSR1, SIGUSR2];
    if !tty {
        sigs.extend([SIGINT, SIGQUIT]);
    }
    Ok(signal_hook::iterator::Signals::new(&sigs)?)
}

/// Forward caught signals to the command.
fn forward_signals(client: &Client, mut signals: signal_hook::iterator::Signals) -> Result<()> {
    let sock = client.sock.try_clone()?;
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if ipc::send(&sock, &Request::Signal { signal }, &[]).is_err() {
                return;
            }
        }
    });
    Ok(())
}

/// Restores the terminal's mode when dropped.
pub(crate) struct RawMode {
    saved: rustix::termios::Termios,
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(
            std::io::stdin(),
            rustix::termios::OptionalActions::Now,
            &self.saved,
        );
    }
}

/// Put the caller's terminal (its standard input) in raw mode until the guard is dropped;
/// `None` when standard input is no terminal.
pub(crate) fn raw_mode() -> Result<Option<RawMode>> {
    let stdin = std::io::stdin();
    Ok(match rustix::termios::tcgetattr(&stdin) {
        Ok(saved) => {
            let mut t = saved.clone();
            t.make_raw();
            rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &t)
                .map_err(std::io::Error::from)?;
            Some(RawMode { saved })
        }
        Err(_) => None,
    })
}

/// Put the caller's terminal in raw mode and copy bytes both ways between it and the box's
/// terminal; window size changes follow.
fn relay(master: &OwnedFd) -> Result<(Option<RawMode>, std::sync::mpsc::Receiver<()>)> {
    let raw = raw_mode()?;
    let to_box = master.try_clone()?;
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        let mut input = std::io::stdin();
        let mut out = std::fs::File::from(to_box);
        while let Ok(n) = input.read(&mut buf) {
            if n == 0 || out.write_all(&buf[..n]).is_err() {
                return;
            }
        }
    });
    let from_box = master.try_clone()?;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _done = done_tx;
        let mut buf = [0u8; 8192];
        let mut input = std::fs::File::from(from_box);
        let mut out = std::io::stdout();
        // EIO once the last process holding the terminal's other side is gone.
        while let Ok(n) = input.read(&mut buf) {
            if n == 0 || out.write_all(&buf[..n]).is_err() || out.flush().is_err() {
                return;
            }
        }
    });
    let winch = master.try_clone()?;
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGWINCH])?;
    std::thread::spawn(move || {
        for _ in signals.forever() {
            if let Ok(ws) = rustix::termios::tcgetwinsize(std::io::stdin()) {
                let _ = rustix::termios::tcsetwinsize(&winch, ws);
            }
        }
    });
    Ok((raw, done_rx))
}
