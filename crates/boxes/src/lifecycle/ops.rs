//! The façade's lifecycle operations, with typed inputs and results: create (from the
//! project's checkpoint when it has one), commit, checkout, start, stop, processes, exec,
//! spawn, sessions, kill, sync and destroy (status: [`crate::lifecycle::status`]).
//!
//! A front end (the CLI; later the MCP server and the web view) builds one [`Boxes`] with
//! the provider it picked, calls one operation per command, and renders what it returns.
//! The façade decides what goes through the box's provider and what through the store —
//! "a running box is changed only through its provider" is decided here, once.

use agentbox_store::{CommitOpts, Node};

use crate::facade::Boxes;
use crate::lifecycle::create::{Created, Spec};
use crate::progress::Progress;
use crate::provider::OnBox;
use crate::records::record::{self, BoxDirs, BoxRecord};
use crate::types::{ProcInfo, SyncedRepo};
use crate::{BoxError, Result};

/// The file of a box's inbox (`/run/agentbox/ctl/` inside it) listing the paths where the
/// host's carried-over work met what the box's checkpoint held (one per line).
pub const RESYNC_CONFLICTS: &str = "resync-conflicts";

/// A checkout's result.
#[derive(Debug)]
pub struct CheckedOut {
    /// The node HEAD is on now.
    pub node: Node,
    /// The box's processes killed for it (0 for a stopped box or an environment).
    pub killed: usize,
}

pub use crate::lifecycle::status::{BoxState, BoxStatus, BranchStatus, SandboxStatus};

impl Boxes {
    /// Make a box (see [`crate::lifecycle::create`]); from a checkpoint (the one named, else the
    /// project's default) its repositories are moved to the host's present inside it (see
    /// [`crate::lifecycle::reseed`]), and it is left running.
    pub fn create(&self, spec: &Spec, progress: &dyn Progress) -> Result<Created> {
        let project = match &spec.workspace {
            crate::lifecycle::create::Workspace::From(d)
            | crate::lifecycle::create::Workspace::ProjectOf(d) => crate::project::find_root(d),
            crate::lifecycle::create::Workspace::Empty => None,
        };
        let wanted = match (&spec.checkpoint, spec.no_checkpoint) {
            (Some(c), _) => Some(c.clone()),
            (None, false) => {
                crate::checkpoints::checkpoint::default_of(&self.home, project.as_deref())?
            }
            (None, true) => None,
        };
        let Some(wanted) = wanted else {
            return crate::lifecycle::create::create(
                &self.home,
                spec,
                self.provider_for_new(spec, project.as_deref())?,
                progress,
                None,
            );
        };
        let found = self.checkpoint(project.as_deref(), &wanted)?;
        match found.state {
            crate::checkpoints::checkpoint::Freshness::Fresh => {}
            crate::checkpoints::checkpoint::Freshness::NodeMissing => {
                return Err(BoxError::CheckpointUnusable {
                    name: wanted,
                    why: "its node is gone".into(),
                })
            }
            crate::checkpoints::checkpoint::Freshness::BaseMissing => {
                return Err(BoxError::CheckpointUnusable {
                    name: wanted,
                    why: format!(
                        "its base image {:?} is gone",
                        found.manifest.base.image.as_deref().unwrap_or("")
                    ),
                })
            }
            crate::checkpoints::checkpoint::Freshness::Stale if !spec.accept_stale => {
                return Err(BoxError::CheckpointStale { name: wanted })
            }
            crate::checkpoints::checkpoint::Freshness::Stale => progress.note(&format!(
                "agentbox: warning: checkpoint {wanted:?} was made on a base that has changed since (system packages or image); its installed files may not match. Recreate it: create a box with --no-checkpoint, set it up, then `agentbox checkpoint create --name {wanted} --replace`"
            )),
        }
        let mut spec = spec.clone();
        if let Some(held) = &found.manifest.held {
            // A box from a checkpoint an engine holds is made there, by its provider,
            // unless the caller says otherwise.
            spec.provider = spec.provider.or_else(|| found.manifest.provider.clone());
            spec.engine = spec.engine.or_else(|| held.engine.clone());
        }
        let config = crate::config::Config::load(&self.home, project.as_deref())
            .map_err(|e| BoxError::Config(Box::new(e)))?
            .effective();
        spec.resync = Some(spec.resync.unwrap_or(config.resync_on_start));
        let mut created = crate::lifecycle::create::create(
            &self.home,
            &spec,
            self.provider_for_new(&spec, project.as_deref())?,
            progress,
            Some(&found.manifest),
        )?;
        let name = created.record.name.to_string();
        // No stage: the box's provider holds its tree and merged it already.
        let stage = created.reseed.take();
        let merged = created.record.resync_conflicts.clone();
        let finished = (|| {
            let mut conflicts = merged;
            if let Some(stage) = &stage {
                progress.busy(
                    "moving the checkpoint's repositories to the host's commit",
                    &mut || {
                        conflicts = self.finish_reseed(&name, stage, &wanted)?;
                        Ok(())
                    },
                )?;
            }
            let rec = crate::records::registry::update(&self.home, &name, |r| {
                r.resync_conflicts = conflicts.clone();
            })?;
            let dirs = BoxDirs::new(&self.home, &name);
            // Readable by the agents in the box, at /run/agentbox/ctl/resync-conflicts (a
            // box whose provider holds its tree has no inbox: the record keeps them).
            let mut text = conflicts.join("\n");
            if !text.is_empty() {
                text.push('\n');
            }
            if dirs.inbox().is_dir() {
                fs_err::write(dirs.inbox().join(RESYNC_CONFLICTS), text)?;
            }
            Ok::<_, BoxError>(rec)
        })();
        match finished {
            Ok(rec) => {
                created.head = self.store()?.env(&name)?.head.into_string();
                created.record = rec;
                Ok(created)
            }
            Err(e) => {
                let _ = self.destroy(&name, false, &crate::progress::Quiet);
                Err(e)
            }
        }
    }

    /// The provider a new box of `spec` gets: the one it names, else `box.provider`, else
    /// the default.
    fn provider_for_new(
        &self,
        spec: &Spec,
        project: Option<&std::path::Path>,
    ) -> Result<&dyn crate::provider::Provider> {
        let configured = match &spec.provider {
            Some(p) => Some(p.clone()),
            None => crate::config::Config::load(&self.home, project)
                .map_err(|e| BoxError::Config(Box::new(e)))?
                .effective()
                .provider
                .clone(),
        };
        let Some(kind) = configured else {
            return Ok(self.provider());
        };
        self.provider_named(&kind)
            .ok_or_else(|| BoxError::BadSetting {
                key: "box.provider".into(),
                given: kind.clone(),
                reason: format!(
                    "this agentbox runs boxes with: {}",
                    self.providers()
                        .map(|p| p.kind())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
    }

    /// Commit environment `env` of `store`: a running box through its provider (which
    /// serialises it with auto-capture), anything else in the store.
    pub fn commit(&self, env: &str, opts: CommitOpts) -> Result<Node> {
        let store = self.store()?;
        if self.is_box(env) {
            if let OnBox::Running(id) =
                self.provider_of(env)?
                    .commit(env, &opts.message, opts.command.as_deref())?
            {
                let id = id.ok_or_else(|| {
                    BoxError::Supervisor(format!("box {env:?} made no node for the commit"))
                })?;
                return Ok(store.node(&id)?);
            }
        }
        Ok(store.commit(env, opts)?)
    }

    /// Check out `reference` in `env`: a running box through its provider (which kills its
    /// processes unless `keep_processes`), anything else in the store.
    pub fn checkout(&self, env: &str, reference: &str, keep_processes: bool) -> Result<CheckedOut> {
        let store = self.store()?;
        if self.is_box(env) {
            if let OnBox::Running(done) =
                self.provider_of(env)?
                    .checkout(env, reference, keep_processes)?
            {
                return Ok(CheckedOut {
                    node: store.node(&done.node)?,
                    killed: done.killed,
                });
            }
        }
        Ok(CheckedOut {
            node: store.checkout(env, reference)?,
            killed: 0,
        })
    }

    pub fn start(&self, name: &str) -> Result<()> {
        self.ours(name)?;
        self.provider_of(name)?.start(name)
    }

    /// Stop box `name`; whether it was running.
    pub fn stop(&self, name: &str) -> Result<bool> {
        self.provider_of(name)?.stop(name)
    }

    /// The running box's processes, then the last ones that ended (with their `exit`;
    /// none when the box is stopped).
    pub fn processes(&self, name: &str) -> Result<Vec<ProcInfo>> {
        Ok(self
            .provider_of(name)?
            .processes(name)?
            .running()
            .unwrap_or_default())
    }

    /// Run `command` in box `name` (started when it is not running), attached to this
    /// process's standard input and output, until it ends.
    pub fn exec(
        &self,
        name: &str,
        command: crate::provider::Command,
    ) -> Result<crate::types::ExecOutcome> {
        self.ours(name)?;
        self.provider_of(name)?.exec(name, command)
    }

    /// Start `command` in the background in box `name`.
    pub fn spawn(
        &self,
        name: &str,
        command: crate::provider::Command,
    ) -> Result<crate::provider::Started> {
        self.ours(name)?;
        self.provider_of(name)?.spawn(name, command)
    }

    /// Up to `max` bytes of the log of box `name`'s spawned process `id`, from byte
    /// `offset` (empty at its end).
    pub fn read_log(&self, name: &str, id: u64, offset: u64, max: usize) -> Result<Vec<u8>> {
        self.provider_of(name)?
            .read_log(name, id, offset, max)?
            .ok_or_else(|| BoxError::NoLog {
                name: name.to_owned(),
                id,
            })
    }

    /// Start a session in box `name` (started when it is not running): `spec`'s command
    /// on a terminal the box's provider owns, which outlives this process (see
    /// [`crate::sessions`]).
    pub fn start_session(
        &self,
        name: &str,
        spec: crate::sessions::SessionSpec,
    ) -> Result<crate::sessions::SessionInfo> {
        self.ours(name)?;
        if let Some(n) = &spec.name {
            crate::sessions::check_name(n)?;
        }
        self.provider_of(name)?.start_session(name, spec)
    }

    /// Box `name`'s sessions, running and exited (none when the box is stopped: sessions
    /// end with it).
    pub fn sessions(&self, name: &str) -> Result<Vec<crate::sessions::SessionInfo>> {
        Ok(self
            .provider
            .sessions(name, false)?
            .running()
            .map(|(all, _)| all)
            .unwrap_or_default())
    }

    /// Remove box `name`'s exited sessions that no terminal is attached to; the ones
    /// removed.
    pub fn prune_sessions(&self, name: &str) -> Result<Vec<crate::sessions::SessionInfo>> {
        Ok(self
            .provider
            .sessions(name, true)?
            .running()
            .map(|(_, pruned)| pruned)
            .unwrap_or_default())
    }

    /// Attach this process's terminal (or standard input and output) to session `session`
    /// of the running box `name` (`None`: its only one) until it detaches or the session's
    /// process ends. The detach key, when `opts` has none, is the `session.detachKey`
    /// configuration of the box's project.
    pub fn attach(
        &self,
        name: &str,
        session: Option<&str>,
        opts: crate::sessions::AttachOpts,
    ) -> Result<crate::sessions::AttachOutcome> {
        self.ours(name)?;
        if !self.provider_of(name)?.is_running(name)? {
            return Err(BoxError::NotRunning { name: name.into() });
        }
        let mut opts = opts;
        if opts.detach_key.is_none() {
            opts.detach_key = Some(self.detach_key(name)?);
        }
        self.provider_of(name)?.attach(name, session, &opts)
    }

    /// The detach key of box `name`: `session.detachKey` as its project's configuration
    /// layers set it.
    pub fn detach_key(&self, name: &str) -> Result<crate::sessions::DetachKey> {
        let rec = record::read(&self.home, name)?;
        let config = crate::config::Config::load(&self.home, rec.project.as_deref())
            .map_err(|e| BoxError::Config(Box::new(e)))?;
        Ok(config.effective().detach_key)
    }

    /// Signal process `target` of the running box `name`.
    pub fn kill(&self, name: &str, target: u64, signal: i32) -> Result<()> {
        match self.provider_of(name)?.kill(name, target, signal)? {
            OnBox::Running(()) => Ok(()),
            OnBox::Stopped => Err(BoxError::NotRunning { name: name.into() }),
        }
    }

    /// Bring every branch of box `rec` into its host repository now.
    pub fn sync(&self, rec: &BoxRecord) -> Result<Vec<SyncedRepo>> {
        if rec.repos.is_empty() {
            return Err(BoxError::NoRepositories {
                name: rec.name.to_string(),
            });
        }
        self.provider_of(&rec.name)?.sync(&rec.name)
    }

    /// Remove box `name`: stop it, its provider's state, the base pins in its host
    /// repositories (with `delete_branch`, its branches too), its environment and its
    /// directory; its working files are deleted by [`crate::provider::Provider::remove_discarded`] (perhaps
    /// after this returns). Returns the branches deleted; what could not be removed is noted on
    /// `progress` (and retried by `prune`).
    pub fn destroy(
        &self,
        name: &str,
        delete_branch: bool,
        progress: &dyn Progress,
    ) -> Result<Vec<String>> {
        let mut timer = agentbox_core::timing::Timer::start("destroy");
        let store = self.store()?;
        let mut deleted = Vec::new();
        let mut unpinned = true;
        // Resolved while the record still says which provider runs the box.
        let provider = self.provider_of(name)?;
        if let Some(warning) = provider.discard(name)? {
            progress.note(&format!("agentbox: warning: {warning}"));
        }
        timer.lap("stop");
        for git in record::read(&self.home, name)
            .map(|r| r.repos)
            .unwrap_or_default()
        {
            // The base pins go with the box; its branches stay (they are the user's work).
            if let Err(e) = agentbox_git::unpin(&git.repo, name) {
                unpinned = false;
                progress.note(&format!(
                    "agentbox: could not remove refs/agentbox/{name}/ from {}: {e}",
                    git.repo.display()
                ));
            }
            if delete_branch {
                match agentbox_git::delete_branch(&git.repo, &git.branch) {
                    Ok(()) => deleted.push(git.branch.clone()),
                    Err(e) => progress.note(&format!(
                        "agentbox: kept branch {} in {}: {e}",
                        git.branch,
                        git.repo.display()
                    )),
                }
            }
        }
        if unpinned {
            // Kept otherwise: `prune` retries the refs that could not be removed.
            crate::records::registry::forget_pins(&self.home, name)?;
        }
        timer.lap("git");
        // Its working files are only set aside here: deleting them costs one unlink per file
        // (seconds for a box that installed `node_modules`), left to the provider below.
        let discarded = match store.env(name) {
            Ok(_) => store.discard_env(name)?,
            Err(_) => None,
        };
        timer.lap("environment");
        let dirs = BoxDirs::new(&self.home, name);
        // The record goes first: without it the box no longer exists.
        let _ = fs_err::remove_file(dirs.record());
        fs_err::remove_dir_all(&dirs.dir)?;
        timer.lap("box directory");
        if let Some(d) = discarded {
            provider.remove_discarded(store, &d)?;
            timer.lap("working files");
        }
        Ok(deleted)
    }
}
