//! The per-box supervisor: a detached host process (`agentbox __supervise BOX`) that owns the
//! box's namespaces (through its PID 1), the process table, auto-capture, the logs of
//! spawned processes and the socket the CLI talks to.
//!
//! Threads: the main thread starts (and restarts) the box, because the box's launcher dies
//! with the thread that forked it; one thread accepts connections and one serves each;
//! one reads PID 1's events per box generation. `ops` serialises everything that changes
//! the box's tree or history (auto-capture, commit, checkout, stop).

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agentbox_core::home::Home;
use agentbox_core::lock::{FileLock, Mode};
use agentbox_sandbox::ipc;
use agentbox_sandbox::launch::{launch, Running};
use agentbox_sandbox::net::Pasta;
use agentbox_sandbox::proto::{Bind, BoxSpec, FromInit, Network, ToInit};
use agentbox_store::{CommitOpts, Store};
use chrono::Utc;

use crate::proto::{
    ProcExit, ProcInfo, ProcKind, Reply, Request, ScratchUse, SyncedRepo, Workdir,
    EXIT_OUTPUT_LINES, RECENT_EXITS,
};
use crate::record::{self, BoxDirs, BoxRecord, SupervisorInfo, WORKSPACE};
use crate::{BoxError, Result};

/// Where the agentbox binary appears inside every box.
pub const BOX_BINARY: &str = "/run/agentbox/bin/agentbox";

/// Set for an `agentbox` the supervisor runs on behalf of a command inside box `NAME`: the
/// CLI then allows only that box's own history commands.
pub const INBOX_ENV: &str = "AGENTBOX_INBOX_BOX";

/// How a process ended, as told to whoever waits for it.
#[derive(Debug, Clone, Copy)]
struct ExitNote {
    status: i32,
    by_checkout: bool,
}

struct ProcEntry {
    info: ProcInfo,
    exit_tx: Option<Sender<ExitNote>>,
}

/// PID 1's answer to a spawn: the box PID and any descriptors, or the error and the status
/// a shell would give it.
type SpawnOutcome = std::result::Result<(i32, Vec<OwnedFd>), (String, i32)>;

/// A spawn sent to PID 1 and not yet answered.
struct Pending {
    /// The process's PID and descriptors, or why it did not start and the shell status.
    started: Sender<SpawnOutcome>,
    info: ProcInfo,
    exit_tx: Option<Sender<ExitNote>>,
}

struct Generation {
    running: Running,
    /// The private network's `pasta` (`Network::Private` only); killed after the box.
    pasta: Option<Pasta>,
    ctl: Arc<OwnedFd>,
    number: u64,
    /// Where this generation's writes land (watched by auto-capture).
    upper: PathBuf,
}

type LaunchReply = Sender<Result<()>>;

struct Shared {
    name: String,
    home: Home,
    store: Store,
    rec: BoxRecord,
    dirs: BoxDirs,
    exe: PathBuf,
    box_: Mutex<Option<Generation>>,
    procs: Mutex<BTreeMap<i32, ProcEntry>>,
    /// The last [`RECENT_EXITS`] background processes that ended, oldest first.
    exited: Mutex<std::collections::VecDeque<ProcInfo>>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_id: AtomicU64,
    generation: AtomicU64,
    ops: Mutex<()>,
    launch_tx: Mutex<Sender<LaunchReply>>,
    stopping: std::sync::atomic::AtomicBool,
    /// Auto-capture's state, as the capture thread last reported it.
    capture: Mutex<crate::capture::CaptureHealth>,
    /// See [`BoxDirs::from_box`].
    spool: PathBuf,
    /// The process limit the box's cgroup enforces (0: none), set at each launch.
    pids_limit: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking handler thread must not take the whole box down with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Run the supervisor of box `name` until it is stopped. Detaches from the caller's session.
pub fn run(home: Home, name: &str) -> Result<()> {
    let _ = rustix::process::setsid();
    let dirs = BoxDirs::new(&home, name);
    let rec = record::read(&home, name)?;
    // One supervisor per box: the lock is held for the process's lifetime.
    let _lock = lock_box(&dirs, name)?;
    let store = Store::open(&home.store_dir())?;
    let exe = std::env::current_exe()?;
    fs_err::create_dir_all(dirs.logs())?;
    let spool = dirs.from_box();
    fs_err::create_dir_all(&spool)?;
    let (launch_tx, launch_rx) = channel::<LaunchReply>();
    let shared = Arc::new(Shared {
        name: name.to_owned(),
        home,
        store,
        rec,
        dirs: dirs.clone(),
        exe,
        box_: Mutex::new(None),
        procs: Mutex::new(BTreeMap::new()),
        exited: Mutex::new(Default::default()),
        pending: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(1),
        generation: AtomicU64::new(0),
        ops: Mutex::new(()),
        launch_tx: Mutex::new(launch_tx),
        stopping: std::sync::atomic::AtomicBool::new(false),
        capture: Mutex::new(Default::default()),
        spool,
        pids_limit: AtomicU64::new(0),
    });
    fs_err::create_dir_all(dirs.inbox())?;
    start_box(&shared)?;
    let listener = listen(&dirs.socket())?;
    let inbox = listen(&dirs.inbox().join(record::INBOX_SOCKET))?;
    agentbox_core::atomic::write_json(
        &dirs.supervisor(),
        &SupervisorInfo {
            pid: std::process::id(),
            started: Utc::now(),
        },
    )?;
    eprintln!(
        "supervisor of box {name:?} ready (pid {})",
        std::process::id()
    );
    {
        let shared = shared.clone();
        std::thread::spawn(move || accept_loop(shared, listener, false));
    }
    {
        let shared = shared.clone();
        std::thread::spawn(move || accept_loop(shared, inbox, true));
    }
    if shared.rec.capture {
        let shared = shared.clone();
        std::thread::spawn(move || {
            let ignore = record::ignore_set(&shared.rec);
            crate::capture::run(&*shared, &ignore)
        });
    }
    launcher_loop(&shared, launch_rx);
    Ok(())
}

/// Take the box's supervisor lock. A supervisor that was just stopped may still be exiting:
/// wait for it a few seconds before giving up.
fn lock_box(dirs: &BoxDirs, name: &str) -> Result<FileLock> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match FileLock::acquire(
            &dirs.lock(),
            Mode::TryExclusive,
            &format!("box {name:?}"),
            "supervise",
        ) {
            Ok(l) => return Ok(l),
            Err(agentbox_core::Error::Locked { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Wait until no supervisor of the box runs (its lock is free).
pub fn wait_gone(home: &Home, name: &str) -> Result<()> {
    let dirs = BoxDirs::new(home, name);
    drop(FileLock::acquire(
        &dirs.lock(),
        Mode::Exclusive,
        &format!("box {name:?}"),
        "wait",
    )?);
    Ok(())
}

fn listen(path: &std::path::Path) -> Result<OwnedFd> {
    let _ = fs_err::remove_file(path);
    let sock = rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| BoxError::io(path, e.into()))?;
    let addr = rustix::net::SocketAddrUnix::new(path).map_err(|e| BoxError::io(path, e.into()))?;
    rustix::net::bind(&sock, &addr).map_err(|e| BoxError::io(path, e.into()))?;
    rustix::net::listen(&sock, 64).map_err(|e| BoxError::io(path, e.into()))?;
    Ok(sock)
}

/// The main thread: (re)starts the box whenever asked, so that the box's launcher has a
/// parent thread that lives as long as the supervisor.
fn launcher_loop(shared: &Arc<Shared>, rx: Receiver<LaunchReply>) {
    while let Ok(reply) = rx.recv() {
        let _ = reply.send(start_box(shared));
    }
}

/// Start the box (a new generation: its PID 1 and, on a private network, its `pasta`).
/// Runs on the main thread, which the box's launcher and `pasta` die with.
fn start_box(shared: &Arc<Shared>) -> Result<()> {
    // Before anything runs: a missing `pasta` or a taken port is the user's to fix.
    let pasta_bin = match shared.rec.network {
        Network::Private => {
            let bin = agentbox_sandbox::net::preflight(
                &format!("box {:?}", shared.name),
                shared.rec.rootless,
            )?;
            agentbox_sandbox::net::check_ports(&shared.name, &shared.rec.publish)?;
            Some(bin)
        }
        _ => None,
    };
    let layers = shared.store.box_layers(&shared.name)?;
    let upper = layers.upper.clone();
    fs_err::create_dir_all(shared.dirs.scratch())?;
    let (base, hide) = match &shared.rec.image {
        Some(image) => (crate::images::rootfs(&shared.home, image), Vec::new()),
        // A rootless box has its own /root and /home (the host's are never bound).
        None if shared.rec.rootless => (
            PathBuf::from("/"),
            crate::hostdata::hidden_paths(&shared.home, &shared.rec)
                .into_iter()
                .filter(|p| p != Path::new("/root") && p != Path::new("/home"))
                .collect(),
        ),
        None => (
            PathBuf::from("/"),
            crate::hostdata::hidden_paths(&shared.home, &shared.rec),
        ),
    };
    let mut binds = vec![
        Bind {
            src: shared.exe.clone(),
            dst: PathBuf::from(BOX_BINARY),
            readonly: true,
        },
        Bind {
            src: shared.dirs.inbox(),
            dst: PathBuf::from(record::INBOX_DIR),
            readonly: true,
        },
    ];
    for git in &shared.rec.repos {
        // Each repository's objects, shared read-only: the box's own repository borrows
        // them.
        binds.push(Bind {
            src: git.objects.clone(),
            dst: git.box_objects.clone(),
            readonly: true,
        });
    }
    let spec = BoxSpec {
        hostname: shared.name.clone(),
        base,
        lowers: layers.lowers,
        upper: layers.upper,
        workdir: layers.workdir,
        scratch: shared.dirs.scratch(),
        hide,
        network: shared.rec.network,
        binds,
        rootless: shared.rec.rootless,
        ids: (!shared.rec.rootless).then(agentbox_sandbox::proto::IdRange::for_root_boxes),
        tmpfs: agentbox_sandbox::proto::TmpfsSizes::for_memory(
            shared.rec.limits.memory_bytes,
            host_ram(),
        ),
    };
    let log = fs_err::OpenOptions::new()
        .create(true)
        .append(true)
        .open(shared.dirs.supervisor_log())?
        .into_parts()
        .0;
    let cgroup = box_cgroup(shared)?;
    let running = launch(&shared.exe, &spec, Some(log), |pid| match &cgroup {
        Some(cg) => cg.add(pid).map_err(|e| e.to_string()),
        None => Ok(()),
    })
    .map_err(|e| BoxError::Sandbox {
        name: shared.name.clone(),
        message: e.to_string(),
    })?;
    let ctl = Arc::new(
        running
            .ctl
            .try_clone()
            .map_err(|e| BoxError::io(&shared.dirs.dir, e))?,
    );
    let pasta = match &pasta_bin {
        Some(bin) => match Pasta::attach(
            bin,
            &shared.name,
            running.launcher.id(),
            shared.rec.rootless,
            &shared.rec.publish,
            &shared.dirs.pasta_log(),
        ) {
            Ok(p) => Some(p),
            Err(e) => {
                running.kill();
                return Err(e.into());
            }
        },
        None => None,
    };
    let number = shared.generation.fetch_add(1, Ordering::SeqCst) + 1;
    {
        let shared = shared.clone();
        let ctl = ctl.clone();
        std::thread::spawn(move || read_events(shared, ctl, number));
    }
    *lock(&shared.box_) = Some(Generation {
        running,
        pasta,
        ctl,
        number,
        upper,
    });
    Ok(())
}

/// How full the running box's private tmpfs mounts are, seen through its PID 1's root
/// (`statvfs` only: nothing of the box is read or followed beyond the mount points, which
/// the box cannot replace without mount rights).
fn scratch_use(shared: &Shared) -> Vec<ScratchUse> {
    let Some(pid1) = lock(&shared.box_).as_ref().map(|g| g.running.pid1_host) else {
        return Vec::new();
    };
    ["/tmp", "/run", "/dev/shm"]
        .iter()
        .filter_map(|inside| {
            let at = PathBuf::from(format!("/proc/{pid1}/root{inside}"));
            let st = rustix::fs::statvfs(&at).ok()?;
            let block = st.f_frsize;
            Some(ScratchUse {
                path: (*inside).to_owned(),
                used_bytes: st.f_blocks.saturating_sub(st.f_bfree) * block,
                size_bytes: st.f_blocks * block,
            })
        })
        .collect()
}

/// The host's RAM in bytes (0 when the kernel does not say).
fn host_ram() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let kib = m.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
            kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// The process limit of a box whose owner set none (`--pids`, `box.pids` raise or lower
/// it): a fork bomb in a box stops there instead of exhausting the host's PIDs.
pub const DEFAULT_PIDS: u64 = 4096;

/// The box's cgroup, with its limits applied — and, where the owner set no process limit,
/// [`DEFAULT_PIDS`] (only where the machine can enforce it: a default never keeps a box
/// from starting). `None` where cgroups are unavailable and no limit was asked for (a limit
/// that was asked for and cannot be enforced is an error, never ignored).
fn box_cgroup(shared: &Shared) -> Result<Option<crate::cgroup::BoxCgroup>> {
    let name = record::cgroup_name(&shared.home, &shared.name);
    let asked = &shared.rec.limits;
    if asked.pids.is_none() {
        let mut with_default = asked.clone();
        with_default.pids = Some(DEFAULT_PIDS);
        if let Ok(cg) = crate::cgroup::BoxCgroup::create(&name, &with_default) {
            shared.pids_limit.store(DEFAULT_PIDS, Ordering::SeqCst);
            return Ok(Some(cg));
        }
    }
    shared
        .pids_limit
        .store(asked.pids.unwrap_or(0), Ordering::SeqCst);
    match crate::cgroup::BoxCgroup::create(&name, asked) {
        Ok(cg) => Ok(Some(cg)),
        Err(e) if e.is_unavailable() => Ok(None),
        Err(e) => Err(BoxError::Sandbox {
            name: shared.name.clone(),
            message: e.to_string(),
        }),
    }
}

/// Remove the box's cgroup (after its processes are gone).
pub fn remove_cgroup(home: &Home, name: &str) {
    match crate::cgroup::BoxCgroup::open(&record::cgroup_name(home, name)) {
        Ok(Some(cg)) => {
            if let Err(e) = cg.remove() {
                eprintln!("removing the box's cgroup: {e}");
            }
        }
        Ok(None) => {}
        Err(e) => eprintln!("finding the box's cgroup: {e}"),
    }
}

/// Ask the main thread to start the box again, and wait.
fn restart_box(shared: &Shared) -> Result<()> {
    let (tx, rx) = channel();
    lock(&shared.launch_tx)
        .send(tx)
        .map_err(|_| BoxError::Supervisor("the supervisor is shutting down".into()))?;
    rx.recv()
        .map_err(|_| BoxError::Supervisor("the supervisor is shutting down".into()))?
}

/// Kill every process of the box (and the box's PID 1); tell their waiters. Returns how many
/// tracked processes were running.
fn kill_box(shared: &Shared, by_checkout: bool) -> usize {
    let gen = lock(&shared.box_).take();
    let procs = std::mem::take(&mut *lock(&shared.procs));
    if let Some(mut g) = gen {
        g.running.kill();
        // After the box: its published ports close once nothing in it can answer.
        if let Some(p) = g.pasta.as_mut() {
            p.kill();
        }
    }
    let n = procs.len();
    for (_, p) in procs {
        let note = ExitNote {
            status: 128 + libc::SIGKILL,
            by_checkout,
        };
        note_exit(shared, p.info, note);
        if let Some(tx) = p.exit_tx {
            let _ = tx.send(note);
        }
    }
    n
}

/// Remember how a background process ended, for `ps` (foreground commands told their
/// caller already). The oldest beyond [`RECENT_EXITS`] is forgotten.
fn note_exit(shared: &Shared, mut info: ProcInfo, note: ExitNote) {
    if info.kind != ProcKind::Spawn {
        return;
    }
    info.exit = Some(ProcExit {
        status: note.status,
        ended: Utc::now(),
        killed_by_checkout: note.by_checkout,
        output: first_lines(&shared.dirs.log(info.id), EXIT_OUTPUT_LINES),
    });
    let mut exited = lock(&shared.exited);
    exited.push_back(info);
    while exited.len() > RECENT_EXITS {
        exited.pop_front();
    }
}

/// The first `n` lines of the file at `path` (a process's log), each cut to a line's
/// worth of characters; none when it cannot be read. Only its start is read: a log can be
/// large.
fn first_lines(path: &Path, n: usize) -> Vec<String> {
    use std::io::Read;
    const HEAD: u64 = 16 * 1024;
    const WIDTH: usize = 200;
    let mut head = Vec::new();
    let read = fs_err::File::open(path).and_then(|f| f.take(HEAD).read_to_end(&mut head));
    if read.is_err() {
        return Vec::new();
    }
    String::from_utf8_lossy(&head)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(n)
        .map(|l| {
            let mut l = l.trim_end().to_owned();
            if let Some((cut, _)) = l.char_indices().nth(WIDTH) {
                l.truncate(cut);
                l.push('…');
            }
            l
        })
        .collect()
}

fn read_events(shared: Arc<Shared>, ctl: Arc<OwnedFd>, number: u64) {
    loop {
        match ipc::recv::<FromInit>(&*ctl) {
            Ok((FromInit::Started { id, pid }, fds)) => {
                if let Some(p) = lock(&shared.pending).remove(&id) {
                    let mut info = p.info;
                    info.pid = pid;
                    lock(&shared.procs).insert(
                        pid,
                        ProcEntry {
                            info,
                            exit_tx: p.exit_tx,
                        },
                    );
                    let _ = p.started.send(Ok((pid, fds)));
                }
            }
            Ok((FromInit::Failed { id, error, status }, _)) => {
                if let Some(p) = lock(&shared.pending).remove(&id) {
                    let _ = p.started.send(Err((error, status)));
                }
            }
            Ok((FromInit::Exited { pid, code, signal }, _)) => {
                let ended = lock(&shared.procs).remove(&pid);
                if let Some(p) = ended {
                    let note = ExitNote {
                        status: FromInit::status(code, signal),
                        by_checkout: false,
                    };
                    // Before the waiter hears of it: a `ps` after `spawn` reports the
                    // exit shows it.
                    note_exit(&shared, p.info, note);
                    if let Some(tx) = p.exit_tx {
                        let _ = tx.send(note);
                    }
                }
            }
            Ok(_) => {}
            Err(ipc::IpcError::Malformed(e)) => eprintln!("ignoring a malformed event: {e}"),
            Err(_) => {
                // PID 1 is gone. Unless this generation was replaced on purpose, the box died
                // under us (killed from outside): end the supervisor so the next command
                // starts a fresh one.
                let current = lock(&shared.box_).as_ref().map(|g| g.number);
                if current == Some(number) {
                    eprintln!("the box's PID 1 ended unexpectedly; supervisor exits");
                    shutdown(&shared);
                }
                return;
            }
        }
    }
}

fn shutdown(shared: &Shared) -> ! {
    shared.stopping.store(true, Ordering::SeqCst);
    kill_box(shared, false);
    remove_cgroup(&shared.home, &shared.name);
    let _ = fs_err::remove_file(shared.dirs.socket());
    let _ = fs_err::remove_file(shared.dirs.supervisor());
    std::process::exit(0)
}

/// Accept connections; `inbox` marks the socket reachable from inside the box.
/// Most connections served at once on the box's in-box socket: each one is a thread of the
/// supervisor, and the box must not be able to exhaust the supervisor's threads or
/// descriptors. Beyond it a connection is answered with an error and closed.
const INBOX_CONNECTIONS: usize = 64;
/// The same for the host's socket (reachable only by the box's owner).
const HOST_CONNECTIONS: usize = 1024;
/// How long a new connection may take to send its request: idle connections do not hold a
/// slot for long.
const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a refused connection's request is waited for.
const REFUSAL_READ: Duration = Duration::from_millis(50);

/// One served connection, counted until dropped.
struct Slot(Arc<AtomicU64>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_loop(shared: Arc<Shared>, listener: OwnedFd, inbox: bool) {
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
                            message: format!(
                                "box {:?}: too many connections to its supervisor (at most {limit} at once)",
                                shared.name
                            ),
                            hint: Some("close idle connections and try again".into()),
                            code: 1,
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

fn reply(conn: &OwnedFd, r: &Reply, fds: &[BorrowedFd<'_>]) {
    let _ = ipc::send(conn, r, fds);
}

fn error_reply(e: &BoxError) -> Reply {
    Reply::Error {
        message: e.to_string(),
        hint: e.hint(),
        code: e.exit_code(),
    }
}

fn serve(shared: Arc<Shared>, conn: OwnedFd, inbox: bool) {
    use rustix::net::sockopt::{set_socket_timeout, Timeout};
    let _ = set_socket_timeout(&conn, Timeout::Recv, Some(FIRST_REQUEST_TIMEOUT));
    let Ok((req, fds)) = ipc::recv::<Request>(&conn) else {
        return;
    };
    // Later messages on the connection (signals for a running command) come when they come.
    let _ = set_socket_timeout(&conn, Timeout::Recv, None);
    // Inside the box, only the box's own CLI commands are served.
    let result = match req {
        Request::Cli { args } if inbox => cli_for_box(&shared, &conn, args, fds),
        Request::Ping if inbox => {
            reply(&conn, &Reply::Ok, &[]);
            Ok(())
        }
        _ if inbox => Err(BoxError::Supervisor(
            "only agentbox commands are served inside a box".into(),
        )),
        Request::Cli { .. } => Err(BoxError::Supervisor(
            "CLI forwarding is for commands inside the box".into(),
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
                            node: Some(node.id),
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
            let _ops = lock(&shared.ops);
            reply(&conn, &Reply::Ok, &[]);
            shutdown(&shared);
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
        Request::Signal { .. } => Err(BoxError::Supervisor(
            "a signal can only follow an exec on the same connection".into(),
        )),
    };
    if let Err(e) = result {
        reply(&conn, &error_reply(&e), &[]);
    }
}

/// The environment of a command: the caller's allow-listed variables, the box's own, then
/// the request's extras; `PATH` gains the directory of the box's agentbox binary.
fn command_env(shared: &Shared, given: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    // Commands run as the box's root; the caller's own HOME, USER and LOGNAME describe a
    // host account the box does not have.
    env.insert("HOME".into(), "/root".into());
    env.insert("USER".into(), "root".into());
    env.insert("LOGNAME".into(), "root".into());
    env.insert(
        "PATH".into(),
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
    );
    for (k, v) in given {
        env.insert(k, v);
    }
    for kv in &shared.rec.env {
        if let Some((k, v)) = kv.split_once('=') {
            env.insert(k.to_owned(), v.to_owned());
        }
    }
    env.insert("AGENTBOX_BOX".into(), shared.name.clone());
    if let Some(path) = env.get_mut("PATH") {
        *path = format!("/run/agentbox/bin:{path}");
    }
    env.into_iter().collect()
}

/// Send a spawn to PID 1 and wait for its answer.
fn start_process(
    shared: &Shared,
    info: ProcInfo,
    env: Vec<(String, String)>,
    cwd: Option<Workdir>,
    pty: Option<agentbox_sandbox::proto::WinSize>,
    fds: &[BorrowedFd<'_>],
    exit_tx: Option<Sender<ExitNote>>,
) -> Result<(i32, Vec<OwnedFd>)> {
    let ctl = current_ctl(shared)?;
    let id = info.id;
    let argv = info.argv.clone();
    let (tx, rx) = channel();
    lock(&shared.pending).insert(
        id,
        Pending {
            started: tx,
            info,
            exit_tx,
        },
    );
    let cwd = cwd.unwrap_or_else(|| Workdir::default_for(WORKSPACE));
    let msg = ToInit::Spawn {
        id,
        argv,
        env: command_env(shared, env),
        cwd: cwd.path,
        pty,
        exact_cwd: cwd.explicit,
    };
    if let Err(e) = ipc::send(&*ctl, &msg, fds) {
        lock(&shared.pending).remove(&id);
        return Err(BoxError::Supervisor(format!(
            "the box did not take the command: {e}"
        )));
    }
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(started)) => Ok(started),
        Ok(Err((message, status))) => Err(BoxError::Command { message, status }),
        Err(_) => {
            lock(&shared.pending).remove(&id);
            Err(BoxError::Supervisor(
                "the box did not start the command".into(),
            ))
        }
    }
}

/// The running box's control socket, waiting out a restart (a checkout in progress).
fn current_ctl(shared: &Shared) -> Result<Arc<OwnedFd>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(ctl) = lock(&shared.box_).as_ref().map(|g| g.ctl.clone()) {
            return Ok(ctl);
        }
        if std::time::Instant::now() > deadline {
            return Err(BoxError::Supervisor(
                "the box did not come back from a restart within 30 s".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn new_info(shared: &Shared, kind: ProcKind, argv: Vec<String>) -> ProcInfo {
    ProcInfo {
        id: shared.next_id.fetch_add(1, Ordering::SeqCst),
        pid: 0,
        kind,
        argv,
        started: Utc::now(),
        exit: None,
    }
}

#[allow(clippy::too_many_arguments)]
fn exec(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: Option<Workdir>,
    tty: Option<agentbox_sandbox::proto::WinSize>,
    kind: ProcKind,
    capture: bool,
    fds: Vec<OwnedFd>,
) -> Result<()> {
    if tty.is_none() && fds.len() != 3 {
        return Err(BoxError::Supervisor(format!(
            "exec needs the caller's stdin, stdout and stderr (got {} descriptors)",
            fds.len()
        )));
    }
    let label = match kind {
        ProcKind::Shell => "shell session".to_owned(),
        _ => crate::render_command(&argv),
    };
    let info = new_info(shared, kind, argv);
    let id = info.id;
    let oom_before = oom_kills(shared);
    let (exit_tx, exit_rx) = channel();
    let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
    let (pid, master) = start_process(shared, info, env, cwd, tty, &borrowed, Some(exit_tx))?;
    drop(fds);
    let attached: Vec<BorrowedFd<'_>> = master.iter().map(|f| f.as_fd()).collect();
    reply(conn, &Reply::Started { id, pid }, &attached);
    drop(master);
    // Signals from the caller; a caller that goes away hangs the command up, as a terminal
    // would.
    if let Ok(conn2) = conn.try_clone() {
        let shared = shared.clone();
        std::thread::spawn(move || loop {
            let signal = match ipc::recv::<Request>(&conn2) {
                Ok((Request::Signal { signal }, _)) => signal,
                Ok(_) => continue,
                Err(_) => libc::SIGHUP,
            };
            let ctl = lock(&shared.box_).as_ref().map(|g| g.ctl.clone());
            // The same process, not a later one that reused its PID.
            if lock(&shared.procs)
                .get(&pid)
                .is_none_or(|p| p.info.id != id)
            {
                return;
            }
            if let Some(ctl) = ctl {
                let _ = ipc::send(&*ctl, &ToInit::Signal { pid, signal }, &[]);
            }
            if signal == libc::SIGHUP {
                return;
            }
        });
    }
    let note = exit_rx.recv().unwrap_or(ExitNote {
        status: 128 + libc::SIGKILL,
        by_checkout: false,
    });
    // A SIGKILL while the box's OOM killer struck: the memory limit, not a checkout or a
    // `kill -9`, ended it.
    let killed_because = match (oom_before, note.status == 128 + libc::SIGKILL) {
        (Some(before), true) if !note.by_checkout && oom_kills(shared) > Some(before) => {
            shared.rec.limits.memory_bytes.map(|limit| {
                format!(
                    "the box ran out of memory (limit {}; --memory raises it)",
                    crate::cgroup::size_text(limit)
                )
            })
        }
        _ => None,
    };
    let (node, capture_error) = if capture && shared.rec.capture && !note.by_checkout {
        match auto_capture(shared, &label, Some(&label)) {
            Ok(node) => (node, None),
            Err(e) => (None, Some(e.to_string())),
        }
    } else {
        (None, None)
    };
    reply(
        conn,
        &Reply::Exited {
            status: note.status,
            node,
            killed_by_checkout: note.by_checkout,
            capture_error,
            killed_because,
        },
        &[],
    );
    Ok(())
}

/// The box's OOM-kill count (see [`crate::cgroup::BoxCgroup::oom_kills`]); `None` for a
/// box without a memory limit, whose commands the box's OOM killer never ends.
fn oom_kills(shared: &Shared) -> Option<u64> {
    shared.rec.limits.memory_bytes?;
    crate::cgroup::BoxCgroup::open(&record::cgroup_name(&shared.home, &shared.name))
        .ok()
        .flatten()?
        .oom_kills()
}

/// Commit the box if something not ignored changed; the node gets `message` and `command`.
/// Every attempt's outcome is recorded for `status`; a failure is logged once (until an
/// attempt succeeds again).
fn auto_capture(shared: &Shared, message: &str, command: Option<&str>) -> Result<Option<String>> {
    let result = try_auto_capture(shared, message, command);
    let mut health = lock(&shared.capture);
    match &result {
        Ok(_) => {
            if health.failure.is_some() {
                eprintln!("auto-capture: working again");
            }
            health.record(Ok(()));
        }
        Err(e) => {
            let text = e.to_string();
            if health.failure.as_deref() != Some(text.as_str()) {
                eprintln!("auto-capture: capturing the changes ({message}) failed: {text}");
            }
            health.record(Err(text));
        }
    }
    result
}

fn try_auto_capture(
    shared: &Shared,
    message: &str,
    command: Option<&str>,
) -> Result<Option<String>> {
    let _ops = lock(&shared.ops);
    if !changed_since_head(shared)? {
        return Ok(None);
    }
    let node = shared.store.commit(
        &shared.name,
        CommitOpts {
            message: message.to_owned(),
            command: command.map(str::to_owned),
            metadata: git_metadata(shared),
        },
    )?;
    after_node(shared);
    // Automatic nodes accumulate: thin old ones (stable positions; tags, branch points and
    // the newest `keep` stay). Only once the history is longer than what is kept anyway.
    let keep = shared.rec.keep.unwrap_or(record::DEFAULT_KEEP);
    if node.seq > keep {
        if let Err(e) = shared.store.retain(&shared.name, keep) {
            eprintln!("retention after an automatic node failed: {e}");
        }
    }
    Ok(Some(node.id))
}

/// Whether the box's tree differs from HEAD in a path that is not ignored.
///
/// The upper directory's marks say which entries were touched since the last commit, in one
/// `lstat` each. When only directories were touched, that is not proof of a change:
/// overlayfs writes its own attributes on a merged directory (`overlay.origin`,
/// `overlay.impure`) the first time the box looks into it after a restart on a new lower,
/// which moves the directory's ctime. Those cases are settled by comparing the tree with
/// HEAD's, so such a restart makes no node.
fn changed_since_head(shared: &Shared) -> Result<bool> {
    let ignore = record::ignore_set(&shared.rec);
    let changed = shared.store.changed_paths(&shared.name)?;
    let counted = record::counted_changes(&ignore, &changed);
    if counted.is_empty() {
        return Ok(false);
    }
    let only_dirs = counted
        .iter()
        .all(|p| changed.iter().any(|(c, dir)| *dir && c == p));
    if !only_dirs {
        return Ok(true);
    }
    let head = shared.store.resolve(&shared.name, "HEAD")?;
    Ok(shared
        .store
        .diff(&shared.name, &head, None)?
        .iter()
        .any(|c| !ignore.is_ignored(&c.path)))
}

fn spawn_bg(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: Option<Workdir>,
) -> Result<()> {
    let command = crate::render_command(&argv);
    let info = new_info(shared, ProcKind::Spawn, argv);
    let id = info.id;
    let log_path = shared.dirs.log(id);
    let log = fs_err::File::create(&log_path)?.into_parts().0;
    let null = fs_err::File::open("/dev/null")?.into_parts().0;
    let fds = [null.as_fd(), log.as_fd(), log.as_fd()];
    let (exit_tx, exit_rx) = channel();
    let (pid, _) = start_process(shared, info, env, cwd, None, &fds, Some(exit_tx))?;
    // A process that fails at once (a bad argument, a port taken) must not be reported as
    // started: give it a moment. One still running after it counts as started; one that
    // ended cleanly is no failure (`ps` shows its exit).
    match exit_rx.recv_timeout(SPAWN_SETTLE) {
        Ok(note) if note.status != 0 => Err(BoxError::SpawnExited {
            name: shared.name.clone(),
            id,
            command,
            status: note.status,
            output: first_lines(&log_path, EXIT_OUTPUT_LINES),
        }),
        _ => {
            reply(conn, &Reply::Started { id, pid }, &[]);
            Ok(())
        }
    }
}

/// How long `spawn` waits to see whether the process fails at once.
const SPAWN_SETTLE: Duration = Duration::from_millis(300);

fn kill_one(shared: &Shared, conn: &OwnedFd, target: u64, signal: i32) -> Result<()> {
    // An id (as spawn and ps print it) first; a PID inside the box only when no id matches.
    let procs = lock(&shared.procs);
    let pid = procs
        .values()
        .find(|p| p.info.id == target)
        .or_else(|| procs.values().find(|p| p.info.pid as u64 == target))
        .map(|p| p.info.pid)
        .ok_or_else(|| BoxError::NoSuchProcess {
            name: shared.name.clone(),
            target,
        })?;
    drop(procs);
    let ctl = lock(&shared.box_).as_ref().map(|g| g.ctl.clone());
    if let Some(ctl) = ctl {
        ipc::send(&*ctl, &ToInit::Signal { pid, signal }, &[])
            .map_err(|e| BoxError::Supervisor(e.to_string()))?;
    }
    reply(conn, &Reply::Ok, &[]);
    Ok(())
}

/// Run `agentbox ARGS` on the host for a command inside the box, with its stdio. The CLI
/// sees [`INBOX_ENV`] and refuses anything but this box's own history commands.
/// The supervisor's environment variables the host side of an in-box command keeps.
const RELAYED_ENV: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "SSH_AUTH_SOCK",
    "GIT_SSH_COMMAND",
    "GIT_CONFIG_GLOBAL",
    "XDG_CONFIG_HOME",
    "LANG",
];

/// Options an in-box command may never give: they choose what the host side acts on
/// (another agentbox home — a fake store built in the box's layer — or another box).
const RELAY_REFUSED: &[&str] = &["--home", "--box", "-b"];

/// The in-box relay's argument policy: refuses [`RELAY_REFUSED`] in any spelling
/// (`--home X`, `--home=X`, `-bX`, an abbreviation clap would accept), anywhere in the
/// command line — clap takes global options after the subcommand too.
fn relay_policy(args: &[String]) -> std::result::Result<(), String> {
    for a in args.iter().take_while(|a| *a != "--") {
        let refused = match a.strip_prefix("--") {
            // `--home`, `--home=X`, and any prefix clap might expand (`--ho`).
            Some(long) => {
                let name = long.split('=').next().unwrap_or(long);
                name.len() >= 2
                    && RELAY_REFUSED
                        .iter()
                        .filter_map(|r| r.strip_prefix("--"))
                        .any(|r| r.starts_with(name))
            }
            // `-b`, `-bNAME`, and bundles such as `-xb`.
            None => a.len() > 1 && a.starts_with('-') && a[1..].contains('b'),
        };
        if refused {
            return Err(format!("{a:?} is not allowed inside a box"));
        }
    }
    Ok(())
}

fn cli_for_box(
    shared: &Shared,
    conn: &OwnedFd,
    args: Vec<String>,
    fds: Vec<OwnedFd>,
) -> Result<()> {
    let [stdin, stdout, stderr]: [OwnedFd; 3] = fds.try_into().map_err(|_| {
        BoxError::Supervisor("agentbox in a box must pass its stdin, stdout and stderr".into())
    })?;
    if let Err(e) = relay_policy(&args) {
        // Told on the caller's own stderr, with the usage exit status, before anything runs.
        let mut err = fs_err::File::from_parts(std::fs::File::from(stderr), "stderr");
        let _ = std::io::Write::write_all(
            &mut err,
            format!(
                "agentbox: error: {}\n  hint: inside a box, agentbox acts on this box only, with the host's own settings\n",
                e.to_string().escape_debug()
            )
            .as_bytes(),
        );
        reply(
            conn,
            &Reply::Exited {
                status: 2,
                node: None,
                killed_by_checkout: false,
                capture_error: None,
                killed_because: None,
            },
            &[],
        );
        return Ok(());
    }
    let mut cmd = std::process::Command::new(&shared.exe);
    cmd.args(args)
        .env_clear()
        .env("AGENTBOX_HOME", shared.home.root())
        .env(INBOX_ENV, &shared.name)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin");
    // `push` and `pull` run git on the host with the user's configuration and credentials
    // (global git config, credential helpers, ssh agent): this command runs on the host and
    // only its output reaches the box, so they never enter it.
    for var in RELAYED_ENV {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    let status = cmd.stdin(stdin).stdout(stdout).stderr(stderr).status()?;
    use std::os::unix::process::ExitStatusExt;
    let status = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    reply(
        conn,
        &Reply::Exited {
            status,
            node: None,
            killed_by_checkout: false,
            capture_error: None,
            killed_because: None,
        },
        &[],
    );
    Ok(())
}

fn checkout(shared: &Arc<Shared>, conn: &OwnedFd, reference: &str) -> Result<()> {
    let _ops = lock(&shared.ops);
    // Resolve first: a bad reference must not kill anything.
    shared.store.resolve(&shared.name, reference)?;
    let killed = kill_box(shared, true);
    let result = shared.store.checkout(&shared.name, reference);
    // Whatever happened, the box runs again (on the old tree if the checkout failed).
    let restarted = restart_box(shared);
    let node = result?;
    restarted?;
    // The box's repository came back with the tree: its branch moved with it.
    after_node(shared);
    reply(
        conn,
        &Reply::Node {
            node: Some(node.id),
            killed,
        },
        &[],
    );
    Ok(())
}

impl crate::capture::Capturer for Shared {
    fn layer_dir(&self) -> Option<(u64, PathBuf)> {
        lock(&self.box_)
            .as_ref()
            .map(|g| (g.number, g.upper.clone()))
    }

    fn capture(&self) -> std::result::Result<(), String> {
        // Label the node with what was running: background processes first (they are the
        // usual authors of unattended changes), else the foreground commands.
        let label = {
            let procs = lock(&self.procs);
            let mut spawned = procs.values().filter(|p| p.info.kind == ProcKind::Spawn);
            let mut others = procs.values().filter(|p| p.info.kind != ProcKind::Spawn);
            match (spawned.next(), others.next()) {
                (Some(p), _) => format!(
                    "auto: while {} ran{}",
                    crate::render_command(&p.info.argv),
                    match spawned.count() {
                        0 => String::new(),
                        n => format!(" (and {n} more)"),
                    }
                ),
                (None, Some(p)) => format!("auto: during {}", crate::render_command(&p.info.argv)),
                (None, None) => "auto: changes".to_owned(),
            }
        };
        auto_capture(self, &label, None)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn alive(&self) -> bool {
        !self.stopping.load(Ordering::SeqCst)
    }

    fn report(&self, health: &crate::capture::CaptureHealth) {
        lock(&self.capture).update_watcher(health);
    }
}

/// `checkout --keep-processes`: make the running box's tree that of `reference` by writing
/// the differences through the box's root, then record the result as a new node (a child of
/// HEAD, with the reference's tree). The processes keep running and see the change.
fn restore_in_place(shared: &Arc<Shared>, conn: &OwnedFd, reference: &str) -> Result<()> {
    use agentbox_store::fsops::diff::ChangeKind;
    let _ops = lock(&shared.ops);
    let target = shared
        .store
        .node(&shared.store.resolve(&shared.name, reference)?)?;
    let tree = shared.store.node_tree(&target)?;
    // From the target to the working tree: what to undo.
    let changes = shared.store.diff(&shared.name, &target.id, None)?;
    let pid1 = lock(&shared.box_)
        .as_ref()
        .map(|g| g.running.pid1_host)
        .ok_or_else(|| BoxError::Supervisor("the box is restarting; try again".into()))?;
    let ids = agentbox_sandbox::idmap::of_process(pid1);
    // Writes through the box's root are made as box root where its layers are idmapped
    // (as host root they could not be mapped); only this thread, only until the node.
    let acting = ids
        .map(agentbox_sandbox::idmap::ActingAsBoxRoot::start)
        .transpose()
        .map_err(BoxError::Supervisor)?;
    let root = crate::restore::BoxRoot::of_pid(pid1, ids)?;
    let failed =
        |path: &std::path::Path, e: std::io::Error| BoxError::io(&PathBuf::from("/").join(path), e);
    // Paths only in the working tree go, deepest first.
    for c in changes.iter().rev().filter(|c| c.kind == ChangeKind::Added) {
        root.remove(&c.path).map_err(|e| failed(&c.path, e))?;
    }
    // The rest takes the target's entry, parents first.
    let mut dirs = Vec::new();
    for c in changes.iter().filter(|c| c.kind != ChangeKind::Added) {
        let Some(e) = tree.entries.get(&c.path) else {
            continue;
        };
        root.put(&c.path, &e.src, &e.meta)
            .map_err(|err| failed(&c.path, err))?;
        if let Some(parent) = c.path.parent() {
            dirs.push(parent.to_owned());
        }
        if e.meta.kind == agentbox_store::fsops::Kind::Dir {
            dirs.push(c.path.clone());
        }
    }
    dirs.sort();
    dirs.dedup();
    for d in dirs.iter().rev() {
        if let Some(e) = tree.entries.get(d) {
            root.settle_dir(d, &e.meta).map_err(|err| failed(d, err))?;
        }
    }
    drop(acting);
    let node = shared.store.commit(
        &shared.name,
        CommitOpts {
            message: format!(
                "restored {} (processes kept)",
                &target.id[..12.min(target.id.len())]
            ),
            command: None,
            metadata: git_metadata(shared),
        },
    )?;
    after_node(shared);
    reply(
        conn,
        &Reply::Node {
            node: Some(node.id),
            killed: 0,
        },
        &[],
    );
    Ok(())
}

/// How long a git command agentbox runs inside a box (a status, a bundle) may take.
const BOX_GIT_TIMEOUT: Duration = Duration::from_secs(600);

/// The supervisor runs agentbox's git commands on the box's repositories as box processes
/// (see [`crate::boxgit`]): through PID 1, like any command, so they get the box's
/// namespaces, capabilities and system-call filter.
impl crate::boxgit::BoxRunner for Shared {
    fn run(&self, argv: &[String], cwd: &str, out: &std::fs::File) -> Result<crate::boxgit::Ran> {
        use std::io::{Read, Seek};
        let null = fs_err::File::open("/dev/null")?.into_parts().0;
        let mut err = tempfile::tempfile_in(self.spool())?;
        let info = new_info(self, ProcKind::Exec, argv.to_vec());
        let (exit_tx, exit_rx) = channel();
        let env = vec![
            ("LC_ALL".to_owned(), "C".to_owned()),
            ("GIT_TERMINAL_PROMPT".to_owned(), "0".to_owned()),
        ];
        let fds = [null.as_fd(), out.as_fd(), err.as_fd()];
        let started = start_process(
            self,
            info,
            env,
            Some(Workdir::default_for(cwd)),
            None,
            &fds,
            Some(exit_tx),
        );
        let pid = match started {
            Ok((pid, _)) => pid,
            Err(BoxError::Command { message, status }) => {
                return Ok(crate::boxgit::Ran {
                    status,
                    stderr: message,
                })
            }
            Err(e) => return Err(e),
        };
        let status = match exit_rx.recv_timeout(BOX_GIT_TIMEOUT) {
            Ok(note) => note.status,
            Err(_) => {
                if let Some(ctl) = lock(&self.box_).as_ref().map(|g| g.ctl.clone()) {
                    let _ = ipc::send(
                        &*ctl,
                        &ToInit::Signal {
                            pid,
                            signal: libc::SIGKILL,
                        },
                        &[],
                    );
                }
                return Err(BoxError::Supervisor(format!(
                    "{} did not finish within {} s in the box",
                    crate::render_command(argv),
                    BOX_GIT_TIMEOUT.as_secs()
                )));
            }
        };
        err.rewind()?;
        let mut raw = Vec::new();
        err.take(64 << 10).read_to_end(&mut raw)?;
        Ok(crate::boxgit::Ran {
            status,
            stderr: String::from_utf8_lossy(&raw).into_owned(),
        })
    }

    fn spool(&self) -> &Path {
        &self.spool
    }

    fn box_name(&self) -> &str {
        &self.name
    }
}

/// Each box repository's uncommitted paths, looked at inside the box (`None` where git
/// could not tell).
fn dirty_inside(shared: &Shared) -> Vec<Option<Vec<String>>> {
    shared
        .rec
        .repos
        .iter()
        .map(|git| match crate::boxgit::dirty(shared, git) {
            Ok(paths) => Some(paths),
            Err(e) => {
                eprintln!("cannot list uncommitted paths: {e}");
                None
            }
        })
        .collect()
}

/// A node's record of the box's branches: `{"git": [{"sub": …, "branch": …, "tip": …}, …]}`,
/// the tips read inside the box.
fn git_metadata(shared: &Shared) -> BTreeMap<String, serde_json::Value> {
    let mut meta = BTreeMap::new();
    let tips: Vec<serde_json::Value> = shared
        .rec
        .repos
        .iter()
        .filter_map(|git| {
            let tip = crate::boxgit::tip(shared, git)
                .map_err(|e| eprintln!("cannot read the box's branch: {e}"))
                .ok()??;
            Some(serde_json::json!({ "sub": git.sub, "branch": git.branch, "tip": tip }))
        })
        .collect();
    if !tips.is_empty() {
        meta.insert("git".to_owned(), serde_json::Value::Array(tips));
    }
    meta
}

/// Bring every box branch into its host repository (see [`crate::boxgit::sync`]); returns
/// each branch's tip there. Every repository is attempted; the first failure is returned.
fn sync_git(shared: &Shared) -> Result<Vec<SyncedRepo>> {
    let mut out = Vec::new();
    let mut failed = None;
    for git in &shared.rec.repos {
        match crate::boxgit::sync(shared, git) {
            Ok(tip) => out.push(SyncedRepo {
                sub: git.sub.clone(),
                repo: git.repo.clone(),
                branch: git.branch.clone(),
                tip,
            }),
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// After a node: the host's copy of the box's branch follows (failures are logged; the
/// node stands).
fn after_node(shared: &Shared) {
    if let Err(e) = sync_git(shared) {
        eprintln!("syncing the box's branch into the host repository failed: {e}");
    }
}
