//! The local provider: boxes as Linux namespaces on this host, each run by its supervisor
//! process ([`crate::supervisor`]), reached through its socket ([`crate::client`]).

use agentbox_core::home::Home;

use crate::client::Client;
use crate::proto::{ProcInfo, Reply, Request, SyncedRepo};
use agentbox_boxes::provider::{CheckedOut, Collected, Command, Health, OnBox, Provider, Started};
use agentbox_boxes::{BoxError, Result};

/// Boxes of one agentbox home, run on this host.
pub struct LocalProvider {
    home: Home,
    /// The agentbox binary supervisors run as (`agentbox __supervise BOX`).
    exe: std::path::PathBuf,
}

impl LocalProvider {
    /// The local provider of `home`, run by this binary (the agentbox binary).
    pub fn new(home: Home) -> LocalProvider {
        let exe = std::env::current_exe().unwrap_or_else(|_| "agentbox".into());
        LocalProvider::with_binary(home, exe)
    }

    /// The local provider of `home` whose supervisors are `exe` (the agentbox binary), for a
    /// program that is not it (a test of the provider).
    pub fn with_binary(home: Home, exe: std::path::PathBuf) -> LocalProvider {
        LocalProvider { home, exe }
    }

    fn connect(&self, name: &str, start: bool) -> Result<Option<Client>> {
        Client::connect_using(&self.home, name, start, &self.exe)
    }

    /// The running supervisor of box `name` (`None`: not running, or not a box).
    fn running(&self, name: &str) -> Result<Option<Client>> {
        if !agentbox_boxes::records::record::BoxDirs::new(&self.home, name)
            .record()
            .exists()
        {
            return Ok(None);
        }
        self.connect(name, false)
    }

    /// The supervisor of box `name`, started (with the box) when it is not running.
    fn started(&self, name: &str) -> Result<Client> {
        self.connect(name, true)?
            .ok_or_else(|| BoxError::Supervisor(format!("box {name:?} did not start")))
    }

    /// One request to the running box (the supervisor serves one per connection).
    fn ask(&self, name: &str, req: &Request) -> Result<OnBox<Reply>> {
        match self.running(name)? {
            Some(c) => Ok(OnBox::Running(c.request(req)?)),
            None => Ok(OnBox::Stopped),
        }
    }
}

/// How long `destroy` waits for its removal process to hold the store lock: past it (a
/// `prune` holding the lock, say) it returns anyway.
const HOLD_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Wait, at most `bound`, for a line (or the end) on `out`.
fn wait_for_line(out: std::process::ChildStdout, bound: std::time::Duration) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut line = String::new();
        let _ = std::io::BufReader::new(out).read_line(&mut line);
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(bound);
}

fn unexpected(r: &Reply) -> BoxError {
    BoxError::Supervisor(format!("unexpected reply from the supervisor: {r:?}"))
}

impl Provider for LocalProvider {
    fn kind(&self) -> &'static str {
        agentbox_boxes::records::record::LOCAL_PROVIDER
    }

    fn is_running(&self, name: &str) -> Result<bool> {
        Ok(crate::client::is_running(&self.home, name))
    }

    fn start(&self, name: &str) -> Result<()> {
        // A supervisor killed a moment ago may still accept connections while its last
        // threads exit; asking again reaches its successor.
        let connect = || {
            self.connect(name, true)?
                .ok_or_else(|| BoxError::Supervisor(format!("box {name:?} did not start")))
        };
        if connect()?.request(&Request::Ping).is_err() {
            std::thread::sleep(std::time::Duration::from_millis(100));
            connect()?.request(&Request::Ping)?;
        }
        Ok(())
    }

    fn stop(&self, name: &str) -> Result<bool> {
        let Some(c) = self.running(name)? else {
            return Ok(false);
        };
        let mut timer = agentbox_core::timing::Timer::start("stop");
        // The supervisor answers, then ends; the box's processes die with it.
        let _ = c.request(&Request::Stop);
        timer.lap("answered");
        crate::supervisor::wait_gone(&self.home, name)?;
        timer.lap("supervisor gone");
        Ok(true)
    }

    fn forget(&self, name: &str) {
        crate::supervisor::remove_cgroup(&self.home, name);
    }

    /// In a process of its own (`agentbox __remove-discarded ENTRY`, in its own session):
    /// `destroy` returns once the box is gone, not once its last file is unlinked. It
    /// returns once that process holds the store lock (it says so on its stdout), so that
    /// an `fsck` or `prune` run right after waits for the removal instead of reporting the
    /// area as a stopped one. When that process cannot start, here.
    fn remove_discarded(
        &self,
        store: &agentbox_store::Store,
        discarded: &agentbox_store::discard::Discarded,
    ) -> Result<()> {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        let spawned = Command::new(&self.exe)
            .arg("__remove-discarded")
            .arg(discarded.entry())
            .env("AGENTBOX_HOME", self.home.root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        match spawned {
            Ok(mut child) => {
                if let Some(out) = child.stdout.take() {
                    wait_for_line(out, HOLD_WAIT);
                }
                // Reaped when it ends, should this process outlive it (a test, a library
                // caller); a CLI that exits first leaves it to init.
                std::thread::spawn(move || child.wait());
                Ok(())
            }
            Err(_) => Ok(store.remove_discarded(discarded.entry())?),
        }
    }

    fn broker(
        &self,
        name: &str,
        spec: &agentbox_broker::Spec,
    ) -> Result<agentbox_broker::Endpoint> {
        let req = Request::Broker { spec: spec.clone() };
        match self.started(name)?.request(&req)? {
            Reply::Broker { endpoint } => Ok(endpoint),
            other => Err(unexpected(&other)),
        }
    }

    fn prune(
        &self,
        store: &agentbox_store::Store,
        grace: std::time::Duration,
        dry_run: bool,
    ) -> Result<Vec<agentbox_boxes::types::BoxLeftover>> {
        use agentbox_boxes::types::{BoxLeftover, PruneOutcome};
        Ok(crate::prune::find(&self.home, store, grace)?
            .iter()
            .map(|l| BoxLeftover {
                kind: l.kind.to_owned(),
                what: l.what.clone(),
                target: l.target.clone(),
                outcome: if dry_run {
                    PruneOutcome::WouldRemove
                } else {
                    match crate::prune::remove(&self.home, store, l) {
                        Ok(()) => PruneOutcome::Removed,
                        Err(e) => PruneOutcome::Kept(e.to_string()),
                    }
                },
            })
            .collect())
    }

    fn commit(
        &self,
        name: &str,
        message: &str,
        command: Option<&str>,
    ) -> Result<OnBox<Option<String>>> {
        let req = Request::Commit {
            message: message.to_owned(),
            command: command.map(str::to_owned),
        };
        match self.ask(name, &req)? {
            OnBox::Running(Reply::Node { node, .. }) => Ok(OnBox::Running(node)),
            OnBox::Running(other) => Err(unexpected(&other)),
            OnBox::Stopped => Ok(OnBox::Stopped),
        }
    }

    fn checkout(
        &self,
        name: &str,
        reference: &str,
        keep_processes: bool,
    ) -> Result<OnBox<CheckedOut>> {
        let req = Request::Checkout {
            reference: reference.to_owned(),
            keep_processes,
        };
        match self.ask(name, &req)? {
            OnBox::Running(Reply::Node {
                node: Some(node),
                killed,
            }) => Ok(OnBox::Running(CheckedOut { node, killed })),
            OnBox::Running(other) => Err(unexpected(&other)),
            OnBox::Stopped => Ok(OnBox::Stopped),
        }
    }

    fn sync(&self, name: &str) -> Result<Vec<SyncedRepo>> {
        let c = self.started(name)?;
        match c.request(&Request::Sync)? {
            Reply::Synced { repos } => Ok(repos),
            other => Err(unexpected(&other)),
        }
    }

    fn dirty(&self, name: &str) -> Result<OnBox<Vec<Option<Vec<String>>>>> {
        match self.ask(name, &Request::Dirty)? {
            OnBox::Running(Reply::Dirty { repos }) => Ok(OnBox::Running(repos)),
            OnBox::Running(other) => Err(unexpected(&other)),
            OnBox::Stopped => Ok(OnBox::Stopped),
        }
    }

    fn processes(&self, name: &str) -> Result<OnBox<Vec<ProcInfo>>> {
        match self.ask(name, &Request::Ps)? {
            OnBox::Running(Reply::Procs { procs, exited }) => {
                Ok(OnBox::Running(procs.into_iter().chain(exited).collect()))
            }
            OnBox::Running(other) => Err(unexpected(&other)),
            OnBox::Stopped => Ok(OnBox::Stopped),
        }
    }

    fn kill(&self, name: &str, target: u64, signal: i32) -> Result<OnBox<()>> {
        match self.ask(name, &Request::Kill { target, signal })? {
            OnBox::Running(Reply::Ok) => Ok(OnBox::Running(())),
            OnBox::Running(other) => Err(unexpected(&other)),
            OnBox::Stopped => Ok(OnBox::Stopped),
        }
    }

    fn health(&self, name: &str) -> Result<OnBox<Health>> {
        match self.ask(name, &Request::Health)? {
            OnBox::Running(Reply::Health {
                capture,
                scratch,
                pids_limit,
                box_root,
            }) => Ok(OnBox::Running(Health {
                capture,
                scratch,
                pids_limit,
                box_root,
            })),
            OnBox::Running(other) => Err(unexpected(&other)),
            OnBox::Stopped => Ok(OnBox::Stopped),
        }
    }

    fn exec(&self, name: &str, command: Command) -> Result<crate::client::ExecOutcome> {
        let c = self.started(name)?;
        crate::client::exec(
            &c,
            command.argv,
            command.env,
            command.workdir,
            command.kind,
            command.capture,
            command.tty,
        )
    }

    fn spawn(&self, name: &str, command: Command) -> Result<Started> {
        let c = self.started(name)?;
        match c.request(&Request::Spawn {
            argv: command.argv,
            env: command.env,
            cwd: command.workdir,
        })? {
            Reply::Started { id, pid } => Ok(Started {
                id,
                pid,
                log: agentbox_boxes::records::record::BoxDirs::new(&self.home, name).log(id),
            }),
            other => Err(unexpected(&other)),
        }
    }

    /// From the box's directory on the host, where its supervisor writes it.
    fn read_log(&self, name: &str, id: u64, offset: u64, max: usize) -> Result<Option<Vec<u8>>> {
        use std::io::{Read, Seek, SeekFrom};
        let path = agentbox_boxes::records::record::BoxDirs::new(&self.home, name).log(id);
        let mut f = match fs_err::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        f.seek(SeekFrom::Start(offset))?;
        let mut out = Vec::new();
        f.take(max as u64).read_to_end(&mut out)?;
        Ok(Some(out))
    }

    fn start_session(
        &self,
        name: &str,
        spec: agentbox_boxes::sessions::SessionSpec,
    ) -> Result<agentbox_boxes::sessions::SessionInfo> {
        let c = self.started(name)?;
        match c.request(&Request::SessionStart {
            name: spec.name,
            argv: spec.argv,
            env: spec.env,
            cwd: spec.workdir,
            size: spec.size,
            supervise: spec.supervise,
        })? {
            Reply::Session { session } => Ok(session),
            other => Err(unexpected(&other)),
        }
    }

    fn sessions(
        &self,
        name: &str,
        prune: bool,
    ) -> Result<
        OnBox<(
            Vec<agentbox_boxes::sessions::SessionInfo>,
            Vec<agentbox_boxes::sessions::SessionInfo>,
        )>,
    > {
        match self.ask(name, &Request::Sessions { prune })? {
            OnBox::Running(Reply::Sessions { sessions, pruned }) => {
                Ok(OnBox::Running((sessions, pruned)))
            }
            OnBox::Running(other) => Err(unexpected(&other)),
            OnBox::Stopped => Ok(OnBox::Stopped),
        }
    }

    fn attach(
        &self,
        name: &str,
        session: Option<&str>,
        opts: &agentbox_boxes::sessions::AttachOpts,
    ) -> Result<agentbox_boxes::sessions::AttachOutcome> {
        let c = self
            .running(name)?
            .ok_or_else(|| BoxError::NotRunning { name: name.into() })?;
        crate::attach::attach(c, name, session, opts)
    }

    fn piped(
        &self,
        name: &str,
        argv: Vec<String>,
        cwd: &str,
        capture: bool,
        stdin: std::os::fd::OwnedFd,
        stdout: std::os::fd::OwnedFd,
    ) -> Result<Collected> {
        let c = self.started(name)?;
        let (outcome, output) =
            crate::client::exec_piped(&c, argv, Some(cwd.to_owned()), capture, stdin, stdout)?;
        Ok(Collected {
            status: outcome.status,
            output,
            node: outcome.node,
        })
    }

    fn collect(
        &self,
        name: &str,
        argv: Vec<String>,
        cwd: &str,
        capture: bool,
    ) -> Result<Collected> {
        let c = self.started(name)?;
        let (outcome, output) =
            crate::client::exec_collect(&c, argv, Some(cwd.to_owned()), capture)?;
        Ok(Collected {
            status: outcome.status,
            output,
            node: outcome.node,
        })
    }
}
