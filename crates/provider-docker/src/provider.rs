//! [`DockerProvider`]: the engines it talks to (connected on first use, one connection per
//! engine for the provider's life) and the [`Provider`] implementation, which hands each
//! operation to the module of its concern.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agentbox_boxes::provider::{
    CheckedOut, Collected, Command, Health, NewBox, NewTree, OnBox, Provider, Started, Trees,
};
use agentbox_boxes::records::record::{self, BoxDirs, BoxRecord};
use agentbox_boxes::types::{BoxLeftover, ExecOutcome, ProcInfo, SyncedRepo};
use agentbox_boxes::{BoxError, Result};
use agentbox_core::home::Home;
use agentbox_core::lock::{FileLock, Mode};
use agentbox_docker::endpoint::{self, Lookup};
use agentbox_docker::Engine;

use crate::errors::remote;
use crate::names;

/// The provider's name, as box records keep it.
pub const KIND: &str = "docker";

/// How long a stop waits after `SIGTERM` before the engine kills the box's processes.
const STOP_GRACE_SECS: i32 = 10;

/// What names an engine: a box record's `engine` (`None`: the default resolution), and for
/// a configured name, the project whose configuration it is looked up in.
type EngineKey = (Option<String>, Option<PathBuf>);

/// Boxes of one agentbox home as containers on Docker engines.
pub struct DockerProvider {
    pub(crate) home: Home,
    /// Connected engines, by what named them (see [`EngineKey`]).
    engines: Mutex<HashMap<EngineKey, Arc<Engine>>>,
    /// The agentbox binary that runs a box's relay ([`crate::relay::keeper`]); `None`: boxes
    /// get no in-box `agentbox`.
    pub(crate) relay: Option<PathBuf>,
}

impl DockerProvider {
    /// The Docker provider of `home`. Nothing is connected until a box needs its engine.
    pub fn new(home: Home) -> DockerProvider {
        DockerProvider {
            home,
            engines: Mutex::new(HashMap::new()),
            relay: None,
        }
    }

    /// This provider, running each box's relay (the in-box `agentbox`'s host end) as
    /// `program __docker-relay BOX` ([`crate::relay::keeper`]).
    pub fn with_relay(mut self, program: PathBuf) -> DockerProvider {
        self.relay = Some(program);
        self
    }

    /// The engine `given` names (`--docker-host`: a URL or a configured name; `None`:
    /// `DOCKER_HOST`, the docker context, the default socket), connected; a name is looked
    /// up in `docker.hosts` of the user's configuration for project `project` (the user's
    /// own layers: global, and the user's layer of that project).
    pub fn engine(&self, given: Option<&str>, project: Option<&Path>) -> Result<Arc<Engine>> {
        self.try_engine(given, project)?.map_err(|(_, e)| remote(e))
    }

    /// [`Self::engine`], telling a connection that failed (`Err((URL, why))`: the engine
    /// it resolved to does not answer, say) from an engine that cannot be named at all.
    pub(crate) fn try_engine(
        &self,
        given: Option<&str>,
        project: Option<&Path>,
    ) -> Result<std::result::Result<Arc<Engine>, (String, agentbox_docker::DockerError)>> {
        // A URL is the same engine from every project.
        let project = project.filter(|_| given.is_some_and(|g| !g.contains("://")));
        let key = (given.map(str::to_owned), project.map(Path::to_path_buf));
        if let Some(e) = self.lock_engines().get(&key) {
            return Ok(Ok(Arc::clone(e)));
        }
        let env = |k: &str| std::env::var(k).ok();
        // Only a name is looked up (a URL, or no flag, needs no configuration).
        let named = match given {
            Some(g) if !g.contains("://") => {
                agentbox_boxes::config::Config::load(&self.home, project)
                    .map_err(|e| BoxError::Config(Box::new(e)))?
                    .effective()
                    .docker_hosts
            }
            _ => Default::default(),
        };
        let lookup = Lookup {
            given,
            named: &named,
            env: &env,
            docker_config: endpoint::docker_config_dir(&env),
        };
        let ep = endpoint::resolve(&lookup).map_err(remote)?;
        let url = ep.host.clone();
        // Connected outside the lock: an unreachable engine takes seconds to say so.
        let engine = match Engine::connect(ep) {
            Ok(e) => Arc::new(e),
            Err(e) => return Ok(Err((url, e))),
        };
        Ok(Ok(Arc::clone(
            self.lock_engines().entry(key).or_insert(engine),
        )))
    }

    fn lock_engines(&self) -> std::sync::MutexGuard<'_, HashMap<EngineKey, Arc<Engine>>> {
        // A panic while holding it leaves a map that is still whole.
        self.engines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Box `name`'s record and engine, whoever owns the container of its name: only for
    /// what never acts on that container unless it is this home's ([`Self::boxed`] is the
    /// gate for everything else).
    fn record_and_engine(&self, name: &str) -> Result<(BoxRecord, Arc<Engine>)> {
        let rec = record::read(&self.home, name)?;
        if rec.provider != KIND {
            return Err(BoxError::OtherProvider {
                name: name.to_owned(),
                provider: rec.provider,
            });
        }
        let engine = self.engine(rec.engine.as_deref(), rec.project.as_deref())?;
        Ok((rec, engine))
    }

    /// Whether `info` (a container of a box's name) was made by this home.
    fn own(&self, info: &agentbox_docker::container::ContainerInfo) -> bool {
        info.labels.get(names::HOME_LABEL) == Some(&names::home_key(&self.home))
    }

    /// Box `name`'s record and engine.
    pub(crate) fn boxed(&self, name: &str) -> Result<(BoxRecord, Arc<Engine>)> {
        let (rec, engine) = self.record_and_engine(name)?;
        // A container of the box's name made by another agentbox home (its own box of the
        // same name, after this one's container went) is never this box's: acting on it
        // would read, run in or remove another home's box.
        let container = names::container(name);
        if let Some(c) = engine.container(&container).map_err(remote)? {
            if !self.own(&c) {
                return Err(BoxError::Remote {
                    message: format!(
                        "box {name:?}: container {container} on {} belongs to another agentbox home",
                        engine.endpoint().shown()
                    ),
                    hint: Some(format!(
                        "destroy this box (agentbox destroy {name}: that container is left alone), or remove that container once its owner no longer needs it"
                    )),
                    code: agentbox_core::exit::ExitCode::Refused.into(),
                });
            }
        }
        Ok((rec, engine))
    }

    /// Whether box `name`'s container runs (a container that is gone does not).
    pub(crate) fn running(&self, engine: &Engine, name: &str) -> Result<bool> {
        Ok(engine
            .container(&names::container(name))
            .map_err(remote)?
            .is_some_and(|c| c.running))
    }

    /// Start box `rec`'s container unless it runs, made again from HEAD's image when it is
    /// gone ([`crate::remake`]).
    pub(crate) fn ensure_started(&self, engine: &Engine, rec: &BoxRecord) -> Result<()> {
        let name = rec.name.as_str();
        crate::remake::restore_if_gone(self, engine, rec)?;
        if !self.running(engine, name)? {
            engine
                .start_container(&names::container(name))
                .map_err(remote)?;
        }
        self.ensure_relay(name, false);
        Ok(())
    }

    /// Copy the in-box binary into container `container` (made, not started), when this
    /// provider runs relays and a static binary is found; best effort (the relay copies it
    /// later when missing). Done before the container runs: an upload into a running
    /// container can meet a `docker commit` that pauses it, and the engine then waits on
    /// both for good.
    pub(crate) fn stage_inbox(&self, engine: &Engine, name: &str) {
        if self.relay.is_none() {
            return;
        }
        let spool = BoxDirs::new(&self.home, name).dir;
        if let Ok(bin) = crate::relay::inbox_bin::find() {
            let _ =
                crate::relay::inbox_bin::ensure_with(engine, &names::container(name), bin, &spool);
        }
    }

    /// Start box `name`'s relay unless it runs; a box whose relay cannot start still runs
    /// (without an in-box `agentbox`), which is said when `tell` (at its creation: not on
    /// every command, whose output is the box's).
    pub(crate) fn ensure_relay(&self, name: &str, tell: bool) {
        if let Err(e) = crate::relay::keeper::ensure(self, name) {
            if !tell {
                return;
            }
            eprintln!(
                "agentbox: warning: box {name:?} has no in-box agentbox: {e}{}",
                e.hint()
                    .map(|h| format!("\n  hint: {h}"))
                    .unwrap_or_default()
            );
        }
    }

    /// Box `name`'s container on `engine`, where its git runs (`spool`: the host directory
    /// for what it sends).
    pub(crate) fn in_box<'a>(
        &self,
        engine: &'a Engine,
        name: &'a str,
        spool: &'a std::path::Path,
    ) -> crate::boxgit::InBox<'a> {
        crate::boxgit::InBox {
            engine,
            container: names::container(name),
            name,
            spool,
        }
    }

    /// The lock serialising box `name`'s history operations (capture, commit, checkout).
    pub(crate) fn history_lock(&self, name: &str, doing: &str) -> Result<FileLock> {
        let path = BoxDirs::new(&self.home, name).dir.join("docker.lock");
        Ok(FileLock::acquire(
            &path,
            Mode::Exclusive,
            &format!("box {name:?}"),
            doing,
        )?)
    }
}

impl Provider for DockerProvider {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn trees(&self) -> Trees {
        Trees::Held
    }

    fn create_tree(
        &self,
        new: &NewBox<'_>,
        progress: &dyn agentbox_boxes::progress::Progress,
    ) -> Result<NewTree> {
        let made = crate::create::create_tree(self, new, progress)?;
        self.ensure_relay(new.name.as_str(), true);
        Ok(made)
    }

    fn checkpoint_tree(
        &self,
        name: &str,
        ask: &agentbox_boxes::provider::CheckpointAsk<'_>,
    ) -> Result<agentbox_boxes::provider::CheckpointTree> {
        crate::checkpoint::capture(self, name, ask)
    }

    fn remove_checkpoint_tree(
        &self,
        project: Option<&Path>,
        held: &agentbox_boxes::provider::HeldCheckpoint,
    ) -> Result<()> {
        crate::checkpoint::remove(self, project, held)
    }

    fn save_checkpoint_tree(
        &self,
        project: Option<&Path>,
        held: &agentbox_boxes::provider::HeldCheckpoint,
        dest: &Path,
        max: u64,
    ) -> Result<u64> {
        crate::checkpoint_file::save(self, project, held, dest, max)
    }

    fn load_checkpoint_tree(
        &self,
        project: Option<&Path>,
        project_key: &str,
        name: &str,
        src: &Path,
        object: &str,
    ) -> Result<agentbox_boxes::provider::HeldCheckpoint> {
        crate::checkpoint_file::load(self, project, project_key, name, src, object)
    }

    fn build_image(
        &self,
        dockerfile: &std::path::Path,
        engine: Option<&str>,
        progress: &dyn agentbox_boxes::progress::Progress,
    ) -> Result<String> {
        let engine = self.engine(engine, None)?;
        crate::image::build(self, &engine, dockerfile, progress)
    }

    fn is_running(&self, name: &str) -> Result<bool> {
        let (_, engine) = self.boxed(name)?;
        Ok(engine
            .container(&names::container(name))
            .map_err(remote)?
            .is_some_and(|c| c.running))
    }

    fn start(&self, name: &str) -> Result<()> {
        let (rec, engine) = self.boxed(name)?;
        self.ensure_started(&engine, &rec)
    }

    /// Another home's container of the box's name is not this box's: it is left running
    /// (so that `destroy` of a box whose container went works without touching it).
    fn stop(&self, name: &str) -> Result<bool> {
        let (_, engine) = self.record_and_engine(name)?;
        crate::relay::keeper::stop(self, name);
        let c = names::container(name);
        let running = engine
            .container(&c)
            .map_err(remote)?
            .is_some_and(|i| i.running && self.own(&i));
        if running {
            engine.stop_container(&c, STOP_GRACE_SECS).map_err(remote)?;
        }
        Ok(running)
    }

    /// The container goes; its images stay until GC frees their nodes (`prune` removes
    /// them then).
    fn forget(&self, name: &str) {
        crate::relay::keeper::stop(self, name);
        // `remove_own_container` removes only this home's container.
        let Ok((_, engine)) = self.record_and_engine(name) else {
            return;
        };
        let _ = crate::prune::remove_own_container(&self.home, &engine, name);
    }

    /// A container has no network at all, or the engine's default one (its own private
    /// network, with outbound access).
    fn network_shown(&self, rec: &BoxRecord) -> Option<String> {
        Some(match rec.network {
            agentbox_sandbox::proto::Network::None => "none (loopback only)".to_owned(),
            _ => "the Docker engine's default network (private, with outbound access)".to_owned(),
        })
    }

    fn discard(&self, name: &str) -> Result<Option<String>> {
        crate::relay::keeper::stop(self, name);
        crate::discard::discard(self, name)
    }

    fn commit(
        &self,
        name: &str,
        message: &str,
        command: Option<&str>,
    ) -> Result<OnBox<Option<String>>> {
        let node = crate::capture::commit(self, name, message, command)?;
        Ok(OnBox::Running(Some(node)))
    }

    fn checkout(
        &self,
        name: &str,
        reference: &str,
        keep_processes: bool,
    ) -> Result<OnBox<CheckedOut>> {
        if keep_processes {
            return Err(self.cannot(
                name,
                "keep a box's processes across a checkout (its container is recreated)",
            ));
        }
        Ok(OnBox::Running(crate::checkout::checkout(
            self, name, reference,
        )?))
    }

    fn sync(&self, name: &str) -> Result<Vec<SyncedRepo>> {
        let (rec, engine) = self.boxed(name)?;
        self.ensure_started(&engine, &rec)?;
        let spool = BoxDirs::new(&self.home, name).dir;
        let inbox = self.in_box(&engine, name, &spool);
        // Every repository is attempted; the first failure is returned.
        let mut out = Vec::new();
        let mut failed = None;
        for git in &rec.repos {
            match inbox.sync(git) {
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

    /// Read inside the running box by its git; `None` for a repository git could not read.
    fn dirty(&self, name: &str) -> Result<OnBox<Vec<Option<Vec<String>>>>> {
        let (rec, engine) = self.boxed(name)?;
        if !self.running(&engine, name)? {
            return Ok(OnBox::Stopped);
        }
        let spool = BoxDirs::new(&self.home, name).dir;
        let inbox = self.in_box(&engine, name, &spool);
        Ok(OnBox::Running(
            rec.repos
                .iter()
                .map(|git| match inbox.dirty(git) {
                    Ok(paths) => Some(paths),
                    Err(e) => {
                        eprintln!("cannot list uncommitted paths: {e}");
                        None
                    }
                })
                .collect(),
        ))
    }

    fn offer_commit(
        &self,
        name: &str,
        git: &agentbox_boxes::records::record::GitRecord,
        reference: &str,
        sha: &str,
    ) -> Result<()> {
        let (rec, engine) = self.boxed(name)?;
        self.ensure_started(&engine, &rec)?;
        let spool = BoxDirs::new(&self.home, name).dir;
        self.in_box(&engine, name, &spool)
            .offer_commit(git, reference, sha)
    }

    fn processes(&self, name: &str) -> Result<OnBox<Vec<ProcInfo>>> {
        crate::procs::list(self, name)
    }

    fn kill(&self, name: &str, target: u64, signal: i32) -> Result<OnBox<()>> {
        crate::procs::kill(self, name, target, signal)
    }

    fn health(&self, name: &str) -> Result<OnBox<Health>> {
        let (rec, engine) = self.boxed(name)?;
        let running = engine
            .container(&names::container(name))
            .map_err(remote)?
            .is_some_and(|c| c.running);
        if !running {
            return Ok(OnBox::Stopped);
        }
        Ok(OnBox::Running(Health {
            capture: None,
            scratch: Vec::new(),
            pids_limit: rec.limits.pids,
            box_root: None,
        }))
    }

    fn exec(&self, name: &str, command: Command) -> Result<ExecOutcome> {
        crate::run::exec(self, name, command)
    }

    fn spawn(&self, name: &str, command: Command) -> Result<Started> {
        crate::spawn::spawn(self, name, command)
    }

    fn read_log(&self, name: &str, id: u64, offset: u64, max: usize) -> Result<Option<Vec<u8>>> {
        crate::spawn::read_log(self, name, id, offset, max)
    }

    fn collect(
        &self,
        name: &str,
        argv: Vec<String>,
        cwd: &str,
        capture: bool,
    ) -> Result<Collected> {
        crate::run::collect(self, name, argv, cwd, capture)
    }

    fn start_session(
        &self,
        name: &str,
        _spec: agentbox_boxes::sessions::SessionSpec,
    ) -> Result<agentbox_boxes::sessions::SessionInfo> {
        Err(self.cannot(name, "start a session in a box yet"))
    }

    fn sessions(
        &self,
        name: &str,
        _prune: bool,
    ) -> Result<
        OnBox<(
            Vec<agentbox_boxes::sessions::SessionInfo>,
            Vec<agentbox_boxes::sessions::SessionInfo>,
        )>,
    > {
        Err(self.cannot(name, "keep sessions in a box yet"))
    }

    fn attach(
        &self,
        name: &str,
        _session: Option<&str>,
        _opts: &agentbox_boxes::sessions::AttachOpts,
    ) -> Result<agentbox_boxes::sessions::AttachOutcome> {
        Err(self.cannot(name, "attach to a session in a box yet"))
    }

    fn broker(
        &self,
        name: &str,
        _spec: &agentbox_broker::Spec,
    ) -> Result<agentbox_broker::Endpoint> {
        Err(self.cannot(name, "run a credential broker for a box yet"))
    }

    /// Between nodes, or from HEAD to the working tree (see [`crate::node_diff`]).
    fn changes(
        &self,
        name: &str,
        from: &agentbox_store::Node,
        to: Option<&agentbox_store::Node>,
        patch: bool,
    ) -> Result<Vec<agentbox_boxes::history::nodes::Patched>> {
        crate::node_diff::changes(self, name, from, to, patch)
    }

    fn prune(
        &self,
        store: &agentbox_store::Store,
        grace: std::time::Duration,
        dry_run: bool,
    ) -> Result<Vec<BoxLeftover>> {
        crate::prune::prune(self, store, grace, dry_run)
    }

    fn prune_checkpoint_names(
        &self,
        named: &agentbox_boxes::types::NamedCheckpoints,
        grace: std::time::Duration,
        dry_run: bool,
    ) -> Result<Vec<BoxLeftover>> {
        crate::prune_all::prune_checkpoint_tags(self, named, grace, dry_run)
    }
}
