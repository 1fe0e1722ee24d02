//! The per-box supervisor: a detached host process (`agentbox __supervise BOX`) that owns the
//! box's namespaces (through its PID 1), the process table, auto-capture, the logs of
//! spawned processes and the socket the CLI talks to.
//!
//! Threads: the main thread starts (and restarts) the box, because the box's launcher dies
//! with the thread that forked it; one thread accepts connections and one serves each;
//! one reads PID 1's events per box generation. `ops` serialises everything that changes
//! the box's tree or history (auto-capture, commit, checkout, stop).
//!
//! One concern per file: this one holds the shared state and the supervisor's lifetime;
//! [`generation`] the box's (re)starts and PID 1's events, [`server`] the sockets,
//! [`procs`] the box's processes, [`history`] auto-capture and checkout, [`relay`] the
//! in-box `agentbox`, [`repos`] the box's repositories, [`sessions`] the box's sessions
//! (with [`screen`], their terminals' state, and [`attach`], the terminals attached).

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
use agentbox_boxes::records::record::{self, BoxDirs, BoxRecord, SupervisorInfo, WORKSPACE};
use agentbox_boxes::{BoxError, Result};

mod attach;
mod broker;
mod foreground;
mod generation;
mod history;
mod prestager;
mod procs;
mod quiet;
mod relay;
mod repos;
mod screen;
mod server;
mod sessions;
mod sink;

pub use self::generation::{remove_cgroup, DEFAULT_PIDS};
use self::{generation::*, history::*, procs::*, relay::*, repos::*, server::*};

/// Where the agentbox binary appears inside every box.
pub use agentbox_boxes::records::record::BOX_BINARY;

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
    /// The use of its in-memory mounts right after it started (see [`quiet`]).
    scratch: Option<quiet::ScratchMarks>,
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
    /// The capture loop's watcher of the box's layer, which the check after each command
    /// reads for the paths that changed (see [`crate::layer_watch`]).
    watch: crate::layer_watch::LayerWatch,
    /// See [`BoxDirs::from_box`].
    spool: PathBuf,
    /// Answers the in-box `agentbox` (see [`agentbox_boxes::relay`]).
    relay: Arc<dyn agentbox_boxes::relay::RelayHandler>,
    /// The process limit the box's cgroup enforces (0: none), set at each launch.
    pids_limit: AtomicU64,
    /// The box's sessions (see [`sessions`]).
    sessions: sessions::SessionTable,
    /// The host paths shown below hidden ones (`BoxSpec::show`), set at each launch.
    shown: Mutex<Vec<PathBuf>>,
    /// Variables pointing the shown toolchains at their homes (`HostView::env`), set at
    /// each launch.
    tool_env: Mutex<Vec<(String, String)>>,
    /// The base's scan for files others may not read, kept across the box's restarts (a
    /// checkout restarts the box; the host's files did not change with it).
    unreadable: Mutex<agentbox_boxes::hostview::UnreadableScan>,
    /// The box's credential broker, once the owner asked for it (see [`broker`]).
    broker: Mutex<Option<broker::BrokerState>>,
    /// The foreground commands running, for what auto-capture may do meanwhile.
    foreground: foreground::ForegroundTable,
    /// Whether prestaging is on ([`prestager::enabled`]), and whether a command's runs.
    prestage_on: bool,
    prestaging: std::sync::atomic::AtomicBool,
    /// Whether a quiet box's node is taken by handing its layer over ([`quiet`]).
    quiet_handoff: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking handler thread must not take the whole box down with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Run the supervisor of box `name` until it is stopped, answering the in-box `agentbox`
/// with `relay`. Detaches from the caller's session.
pub fn run(
    home: Home,
    name: &str,
    relay: Arc<dyn agentbox_boxes::relay::RelayHandler>,
) -> Result<()> {
    let _ = rustix::process::setsid();
    let dirs = BoxDirs::new(&home, name);
    let rec = record::read(&home, name)?;
    // One supervisor per box: the lock is held for the process's lifetime.
    let _lock = lock_box(&dirs, name)?;
    let store = Store::open(&home.store_dir())?;
    let store_kind = store.backend().kind();
    let rec_rootless = rec.rootless;
    let prestage_on = prestager::enabled(store_kind);
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
        watch: Default::default(),
        spool,
        relay,
        pids_limit: AtomicU64::new(0),
        sessions: Mutex::new(BTreeMap::new()),
        shown: Mutex::new(Vec::new()),
        tool_env: Mutex::new(Vec::new()),
        unreadable: Mutex::default(),
        broker: Mutex::new(None),
        foreground: Default::default(),
        prestage_on,
        prestaging: Default::default(),
        quiet_handoff: quiet::enabled(store_kind, rec_rootless),
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

fn shutdown(shared: &Shared, mut timer: agentbox_core::timing::Timer) -> ! {
    shared.stopping.store(true, Ordering::SeqCst);
    kill_box(shared, false);
    timer.lap("kill the box");
    remove_cgroup(&shared.home, &shared.name);
    timer.lap("cgroup");
    let _ = fs_err::remove_file(shared.dirs.socket());
    let _ = fs_err::remove_file(shared.dirs.supervisor());
    let _ = fs_err::remove_file(shared.dirs.inbox().join(agentbox_broker::SOCKET_NAME));
    std::process::exit(0)
}
