//! Where boxes run. The domain operations ([`crate::facade::Boxes`]) ask a [`Provider`] for
//! everything that needs a box's runtime — starting and stopping it, its processes, and the
//! history operations a running box must serialise with its own (commit, checkout, sync) —
//! and never name an implementation: the front end picks one (the local provider,
//! the local provider (`agentbox_provider_local`), today; Docker and remote hosts later).
//!
//! Invariant every implementation keeps: while a box runs, its tree is changed only through
//! its provider (a checkout of a stopped box goes through the store; of a running one,
//! through [`Provider::checkout`]).

use crate::types::{ProcInfo, ScratchUse, SyncedRepo};
use crate::Result;

/// What an operation did on a box that may not be running.
#[derive(Debug, Clone, PartialEq)]
pub enum OnBox<T> {
    /// It runs, and the provider did it.
    Running(T),
    /// It does not run: nothing was done (the caller may act on the store directly).
    Stopped,
}

impl<T> OnBox<T> {
    pub fn running(self) -> Option<T> {
        match self {
            OnBox::Running(t) => Some(t),
            OnBox::Stopped => None,
        }
    }
}

/// The state of a running box as its provider sees it.
#[derive(Debug, Clone, Default)]
pub struct Health {
    /// How auto-capture is doing (`None`: capture is off).
    pub capture: Option<crate::types::CaptureHealth>,
    /// The box's private in-memory mounts and how full they are.
    pub scratch: Vec<ScratchUse>,
    /// The process limit in force (the owner's, or the default); `None`: unlimited.
    pub pids_limit: Option<u64>,
    /// The host ids box root is (`None`: host root).
    pub box_root: Option<agentbox_sandbox::proto::IdRange>,
}

/// A checkout done by a running box's provider.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedOut {
    /// The node HEAD is on now.
    pub node: String,
    /// How many of the box's processes were killed for it.
    pub killed: usize,
}

/// What a command run in a box for agentbox gave back.
#[derive(Debug, Clone)]
pub struct Collected {
    /// Its exit status (128 + signal when killed).
    pub status: i32,
    /// Its stdout and stderr together (box-controlled text).
    pub output: String,
    /// The node its changes made, when it was run with capture.
    pub node: Option<String>,
}

/// A command to run in a box, attached to the caller's standard input and output.
#[derive(Debug, Clone)]
pub struct Command {
    pub argv: Vec<String>,
    /// `KEY=VALUE` pairs beyond the box's own environment.
    pub env: Vec<(String, String)>,
    /// Where it starts (`None`: the box's default).
    pub workdir: Option<crate::types::Workdir>,
    pub kind: crate::types::ProcKind,
    /// A change it makes becomes a node.
    pub capture: bool,
    /// Run on a terminal: `Some(true)` always, `Some(false)` never, `None` when the
    /// caller's standard input and output are one.
    pub tty: Option<bool>,
}

/// A background process just started.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Started {
    /// Its id in the box's process table (what `ps`, `logs` and `kill` take).
    pub id: u64,
    /// Its PID inside the box.
    pub pid: i32,
    /// Where its output goes: a file on the host, or one inside the box for a provider that
    /// keeps it there (`agentbox logs` reads either through the provider).
    pub log: std::path::PathBuf,
}

/// Who keeps a provider's boxes' trees and their nodes' data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trees {
    /// The host store's backend (the local provider): a box's environment has a work area
    /// there, and the façade acts on the store itself for a stopped box.
    Store,
    /// The provider, outside the store (a Docker box's container and images, see
    /// `agentbox_store::held`): the store keeps the history only, and every operation on
    /// a box's tree — create, commit, checkout, diff — goes through the provider, running
    /// or not ([`Provider::commit`] and [`Provider::checkout`] never answer
    /// [`OnBox::Stopped`]).
    Held,
}

/// A new box whose tree its provider holds ([`Provider::create_tree`]): what `create`
/// decided, for the provider to make.
#[derive(Debug, Clone)]
pub struct NewBox<'a> {
    pub name: &'a agentbox_core::name::BoxName,
    /// The project directory to seed from (`None`: an empty `/workspace`).
    pub source: Option<&'a std::path::Path>,
    /// Copy the directory as it is, its repositories not made the box's.
    pub no_git: bool,
    pub seed: &'a agentbox_git::SeedOpts,
    pub options: &'a crate::types::CreateOptions,
    /// Where to run it ([`crate::records::record::BoxRecord::engine`]).
    pub engine: Option<&'a str>,
    /// Build the box's image from this Dockerfile first (`None`: `options.image`, else the
    /// provider's default).
    pub dockerfile: Option<&'a std::path::Path>,
    /// Start from this checkpoint (one this provider holds): its tree, the project's
    /// repositories moved to the host's present as [`crate::lifecycle::reseed`] says.
    pub checkpoint: Option<&'a FromCheckpoint<'a>>,
}

/// What [`Provider::create_tree`] made.
#[derive(Debug, Clone)]
pub struct NewTree {
    /// The first node's data.
    pub held: agentbox_store::Held,
    pub seeded: Vec<crate::records::record::SeededRepo>,
    /// The image the box runs on, as its record keeps it.
    pub image: Option<String>,
    /// From a checkpoint: the paths where the host's carried-over work met what the
    /// checkpoint kept (the checkpoint's version stays), relative to `/workspace`.
    pub conflicts: Vec<String>,
}

/// Where a provider keeps a checkpoint's tree (a checkpoint's manifest records it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeldCheckpoint {
    /// The engine, as the source box's record names it (`None`: the default one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// The image's name (`agentbox-ckpt-<project key>:<name>`).
    pub image: String,
    /// The image's id.
    pub image_id: String,
}

/// The checkpoint a new box starts from, as its provider needs it ([`NewBox::checkpoint`]).
#[derive(Debug, Clone)]
pub struct FromCheckpoint<'a> {
    pub name: &'a str,
    /// The provider whose boxes start from it.
    pub provider: &'a str,
    /// The image its source box was made on.
    pub base_image: Option<&'a str>,
    /// Where its provider keeps it (`None`: in the store).
    pub held: Option<&'a HeldCheckpoint>,
}

/// A checkpoint of a box whose tree its provider holds ([`Provider::checkpoint_tree`]).
#[derive(Debug, Clone)]
pub struct CheckpointAsk<'a> {
    /// The checkpoint's name.
    pub name: &'a str,
    /// Its project's key (`p<hash>`, `none`): checkpoints of one project share a name
    /// space where the provider keeps them.
    pub project_key: &'a str,
    /// The box's node captured (its id).
    pub node: &'a str,
    /// What is removed and emptied in the capture (never in the box itself).
    pub cleanup: &'a agentbox_store::derive::Cleanup,
    /// A shell command run as root in the capture first (`checkpoint.cleanupCommand`);
    /// it may fail without failing the checkpoint.
    pub command: Option<&'a str>,
    /// Make it self-contained (no layer shared with the box's image).
    pub flatten: bool,
}

/// What [`Provider::checkpoint_tree`] made.
#[derive(Debug, Clone)]
pub struct CheckpointTree {
    /// The capture's data, as a node of the store names it.
    pub held: agentbox_store::Held,
    /// Its name where the provider keeps it (a Docker image's tag).
    pub image: String,
    /// Entries removed and files emptied by the cleanup.
    pub deleted: usize,
    pub truncated: usize,
    /// What the cleanup command said when it failed (box-controlled text).
    pub command_failed: Option<String>,
}

/// A runtime for boxes. Every method takes the box's name; "not running" is
/// [`OnBox::Stopped`], not an error.
pub trait Provider: Send + Sync {
    /// The provider's name, as box records keep it (`local`).
    fn kind(&self) -> &'static str;
    /// Who keeps this provider's boxes' trees ([`Trees::Store`] unless it says otherwise).
    fn trees(&self) -> Trees {
        Trees::Store
    }
    /// Make the tree of new box `new.name` (a provider whose boxes' trees it holds,
    /// [`Trees::Held`]): its container or equivalent, seeded from `new.source`, and the data
    /// of its first node. On failure, nothing of it is left on either side.
    fn create_tree(
        &self,
        new: &NewBox<'_>,
        progress: &dyn crate::progress::Progress,
    ) -> Result<NewTree> {
        let _ = progress;
        Err(self.cannot(new.name.as_str(), "hold a box's tree outside the store"))
    }
    /// What changed from node `from` to node `to` (`None`: the box's working tree), each
    /// change with its content difference when `patch` (a provider whose boxes' trees it
    /// holds; the store answers for the others).
    fn changes(
        &self,
        name: &str,
        from: &agentbox_store::Node,
        to: Option<&agentbox_store::Node>,
        patch: bool,
    ) -> Result<Vec<crate::types::Patched>> {
        let _ = (from, to, patch);
        Err(self.cannot(name, "list the changes between a box's nodes"))
    }
    /// Capture box `name` as checkpoint `ask.name` (a provider whose boxes' trees it
    /// holds): node `ask.node`'s tree with the cleanup applied, kept where the provider
    /// keeps trees under a name of the checkpoint's. The box is not touched. On failure,
    /// nothing of it is left.
    fn checkpoint_tree(&self, name: &str, ask: &CheckpointAsk<'_>) -> Result<CheckpointTree> {
        let _ = ask;
        Err(self.cannot(name, "capture a checkpoint outside the store"))
    }
    /// Remove the name of checkpoint `held` (of project `project`) where the provider keeps
    /// it (its data goes once nothing else uses it). Nothing for a provider whose
    /// checkpoints the store holds.
    fn remove_checkpoint_tree(
        &self,
        project: Option<&std::path::Path>,
        held: &HeldCheckpoint,
    ) -> Result<()> {
        let _ = (project, held);
        Ok(())
    }
    /// Write the data of checkpoint `held` (of project `project`) where the provider keeps
    /// it to the new file `dest` (a Docker image, as `docker save` writes it), at most
    /// `max` bytes; its size. A provider whose checkpoints the store holds has none.
    fn save_checkpoint_tree(
        &self,
        project: Option<&std::path::Path>,
        held: &HeldCheckpoint,
        dest: &std::path::Path,
        max: u64,
    ) -> Result<u64> {
        let _ = (project, dest, max);
        Err(self.cannot(&held.image, "export a checkpoint kept outside the store"))
    }
    /// Make the data in file `src` ([`Provider::save_checkpoint_tree`]'s) checkpoint `name`
    /// of project `project` (key `project_key`) where the provider keeps checkpoints, after
    /// checking it is `object` (an image id) and nothing else; where it is kept. On
    /// failure, nothing of it is left there.
    fn load_checkpoint_tree(
        &self,
        project: Option<&std::path::Path>,
        project_key: &str,
        name: &str,
        src: &std::path::Path,
        object: &str,
    ) -> Result<HeldCheckpoint> {
        let _ = (project, project_key, src, object);
        Err(self.cannot(name, "import a checkpoint kept outside the store"))
    }
    /// Build a box image from `dockerfile` (its directory is the build context) where this
    /// provider runs boxes (`engine`: as [`NewBox::engine`]); the image's name, tagged by
    /// the fingerprint of what it bakes in.
    fn build_image(
        &self,
        dockerfile: &std::path::Path,
        engine: Option<&str>,
        progress: &dyn crate::progress::Progress,
    ) -> Result<String> {
        let _ = (dockerfile, engine, progress);
        Err(crate::BoxError::BadSetting {
            key: "--provider".into(),
            given: self.kind().to_owned(),
            reason: "only the docker provider builds box images from a Dockerfile".into(),
        })
    }
    /// Box `rec`'s network as a person reads it, when this provider gives it another
    /// meaning than a box in this host's sandbox has (`None`: that one).
    fn network_shown(&self, rec: &crate::records::record::BoxRecord) -> Option<String> {
        let _ = rec;
        None
    }
    /// The refusal of something this provider cannot do for box `name`.
    fn cannot(&self, name: &str, what: &str) -> crate::BoxError {
        crate::BoxError::ProviderCannot {
            name: name.to_owned(),
            provider: self.kind().to_owned(),
            what: what.to_owned(),
            hint: "the local provider (the default, `--provider local`) can".to_owned(),
        }
    }
    /// Whether box `name` runs.
    fn is_running(&self, name: &str) -> Result<bool>;
    /// Start box `name` (nothing when it runs).
    fn start(&self, name: &str) -> Result<()>;
    /// Stop box `name` and wait until it has; whether it was running.
    fn stop(&self, name: &str) -> Result<bool>;
    /// Let go of whatever the provider keeps for a box that is being destroyed (its cgroup,
    /// say), after [`Provider::stop`].
    fn forget(&self, name: &str);
    /// Stop box `name` for good and let go of it ([`Provider::stop`], then
    /// [`Provider::forget`]), as its destruction begins. A provider whose box's runtime
    /// cannot be reached now may leave what it has there for `prune` instead: then the
    /// warning saying so (the destruction goes on).
    fn discard(&self, name: &str) -> Result<Option<String>> {
        self.stop(name)?;
        self.forget(name);
        Ok(None)
    }
    /// Delete the working files of a destroyed box (see
    /// [`agentbox_store::Store::discard_env`]). Here, before returning, unless the provider
    /// can hand the deletion to a process of its own, so that `destroy` does not wait for it.
    fn remove_discarded(
        &self,
        store: &agentbox_store::Store,
        discarded: &agentbox_store::discard::Discarded,
    ) -> Result<()> {
        Ok(store.remove_discarded(discarded.entry())?)
    }
    /// Commit the running box's tree (serialised with auto-capture); the node made.
    fn commit(
        &self,
        name: &str,
        message: &str,
        command: Option<&str>,
    ) -> Result<OnBox<Option<String>>>;
    /// Check out `reference` in the running box: its processes are killed unless
    /// `keep_processes`, in which case the tree is restored under them.
    fn checkout(
        &self,
        name: &str,
        reference: &str,
        keep_processes: bool,
    ) -> Result<OnBox<CheckedOut>>;
    /// Bring the box's branches into their host repositories (starting the box when it is
    /// stopped: its repositories are read inside it).
    fn sync(&self, name: &str) -> Result<Vec<SyncedRepo>>;
    /// Make host commit `sha` of box `name`'s repository `git`, fetched on the host into
    /// `reference`, reachable inside the box (before a pull merges it there). Nothing for a
    /// box whose repositories borrow the host's objects: it has it already.
    fn offer_commit(
        &self,
        name: &str,
        git: &crate::records::record::GitRecord,
        reference: &str,
        sha: &str,
    ) -> Result<()> {
        let _ = (name, git, reference, sha);
        Ok(())
    }
    /// Each box repository's uncommitted paths (`None` where they cannot be told).
    fn dirty(&self, name: &str) -> Result<OnBox<Vec<Option<Vec<String>>>>>;
    /// The running box's processes.
    fn processes(&self, name: &str) -> Result<OnBox<Vec<ProcInfo>>>;
    /// Send `signal` to process `target` (an id as `processes` gives it, else a PID in the
    /// box).
    fn kill(&self, name: &str, target: u64, signal: i32) -> Result<OnBox<()>>;
    /// The running box's health.
    fn health(&self, name: &str) -> Result<OnBox<Health>>;
    /// Run `command` in the box (starting it when stopped), attached to this process's
    /// standard input and output (and terminal), until it ends.
    fn exec(&self, name: &str, command: Command) -> Result<crate::types::ExecOutcome>;
    /// Start `command` (its `kind`, `capture` and `tty` unused) in the background in the
    /// box (starting it when stopped), its output to a log.
    fn spawn(&self, name: &str, command: Command) -> Result<Started>;
    /// Up to `max` bytes of the log of box `name`'s spawned process `id` from byte
    /// `offset` (none at or past its end); `None` when it has no such log. The log is the
    /// box's text: what is read of it is bounded by `max`, whatever the box does.
    fn read_log(&self, name: &str, id: u64, offset: u64, max: usize) -> Result<Option<Vec<u8>>> {
        let _ = (id, offset, max);
        Err(self.cannot(name, "keep the logs of a box's processes"))
    }
    /// Run `argv` in the box (starting it when stopped) in directory `cwd`, with no input,
    /// collecting its output; with `capture`, a change it makes becomes a node.
    fn collect(&self, name: &str, argv: Vec<String>, cwd: &str, capture: bool)
        -> Result<Collected>;
    /// Run `argv` in the box (starting it when stopped) in directory `cwd` with `stdin` as
    /// its standard input and `stdout` as its standard output (its standard error collected,
    /// bounded, as [`Collected::output`]); with `capture`, a change it makes becomes a node.
    /// For streams between the host and a box (`cp`): the caller holds the pipes' other
    /// ends, and reads or writes them while this waits for the command.
    fn piped(
        &self,
        name: &str,
        argv: Vec<String>,
        cwd: &str,
        capture: bool,
        stdin: std::os::fd::OwnedFd,
        stdout: std::os::fd::OwnedFd,
    ) -> Result<Collected> {
        let _ = (argv, cwd, capture, stdin, stdout);
        Err(self.cannot(name, "stream files into or out of a box"))
    }
    /// Start a session in box `name` (starting the box when stopped): `spec`'s command on a
    /// terminal the provider owns, kept until it exits (see [`crate::sessions`]).
    fn start_session(
        &self,
        name: &str,
        spec: crate::sessions::SessionSpec,
    ) -> Result<crate::sessions::SessionInfo> {
        let _ = (name, spec);
        Err(self.no_sessions())
    }
    /// The running box's sessions; with `prune`, the exited ones no terminal is attached to
    /// are removed first and returned as the second list.
    fn sessions(
        &self,
        name: &str,
        prune: bool,
    ) -> Result<
        OnBox<(
            Vec<crate::sessions::SessionInfo>,
            Vec<crate::sessions::SessionInfo>,
        )>,
    > {
        let _ = (name, prune);
        Err(self.no_sessions())
    }
    /// Attach this process's standard input and output (and terminal) to session `session`
    /// of the running box `name` (`None`: its only session) until the caller detaches or
    /// the session's process ends. `opts.detach_key` is set (the façade resolves it).
    fn attach(
        &self,
        name: &str,
        session: Option<&str>,
        opts: &crate::sessions::AttachOpts,
    ) -> Result<crate::sessions::AttachOutcome> {
        let _ = (name, session, opts);
        Err(self.no_sessions())
    }
    /// The error of a provider without sessions.
    fn no_sessions(&self) -> crate::BoxError {
        crate::sessions::SessionError::Unsupported {
            provider: self.kind().to_owned(),
        }
        .into()
    }
    /// Start box `name`'s credential broker with `spec` (starting the box when it is
    /// stopped), or give its running broker `spec`; where the box reaches it. The real
    /// credentials in `spec` must stay on the provider's side of the box (see
    /// `agentbox_broker`). A provider without a broker refuses.
    fn broker(
        &self,
        name: &str,
        spec: &agentbox_broker::Spec,
    ) -> Result<agentbox_broker::Endpoint> {
        let _ = spec;
        Err(crate::BoxError::Supervisor(format!(
            "box {name:?}: the {} provider has no credential broker",
            self.kind()
        )))
    }
    /// `prune --all`: remove the names this provider keeps its checkpoints under (older
    /// than `grace`) that no checkpoint and no box of `named` names; each one with what
    /// became of it. Nothing for a provider whose checkpoints the store holds.
    fn prune_checkpoint_names(
        &self,
        named: &crate::types::NamedCheckpoints,
        grace: std::time::Duration,
        dry_run: bool,
    ) -> Result<Vec<crate::types::BoxLeftover>> {
        let _ = (named, grace, dry_run);
        Ok(Vec::new())
    }
    /// Find what boxes of this provider left behind (older than `grace`) and, unless
    /// `dry_run`, remove it; each one with what became of it.
    fn prune(
        &self,
        store: &agentbox_store::Store,
        grace: std::time::Duration,
        dry_run: bool,
    ) -> Result<Vec<crate::types::BoxLeftover>>;
}
