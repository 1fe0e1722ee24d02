//! Launching an agent in a box: which box (made when needed), its configuration synced,
//! its command line and variables.

use super::{host_home, sync, Launch, LaunchSpec};
use crate::facade::Boxes;
use crate::progress::Progress;
use crate::{BoxError, Result};

impl Boxes {
    /// Prepare agent `spec.agent` in its box: the box named, else the current project's
    /// only box (unless `new`), else a new box of the project (from its default checkpoint,
    /// when it has one); started; the agent's configuration synced into it; the box's
    /// `last_agent` recorded. The caller runs [`Launch::argv`] in the box (attached, or as
    /// a session).
    pub fn launch_agent(&self, spec: &LaunchSpec, progress: &dyn Progress) -> Result<Launch> {
        let mut timer = agentbox_core::timing::Timer::start("launch");
        let agent = super::get(self.home(), &spec.agent)?;
        let implicit = || -> Result<Option<crate::records::record::BoxRecord>> {
            match crate::records::registry::implicit(self.home(), &spec.cwd) {
                Ok(r) => Ok(Some(r)),
                Err(BoxError::WhichBox { candidates, .. }) if candidates.is_empty() => Ok(None),
                Err(e) => Err(e),
            }
        };
        let existing = match (&spec.box_name, spec.new) {
            (Some(b), _) => Some(crate::records::registry::resolve(
                self.home(),
                b,
                &spec.cwd,
            )?),
            (None, true) => None,
            (None, false) => implicit()?,
        };
        let (record, created) = match existing {
            Some(r) => (r, false),
            None => {
                let made = self.create(
                    &crate::lifecycle::create::Spec {
                        name: None,
                        workspace: crate::lifecycle::create::Workspace::ProjectOf(spec.cwd.clone()),
                        from_ref: None,
                        no_git: false,
                        settings: crate::lifecycle::create::Settings::default(),
                        checkpoint: None,
                        no_checkpoint: false,
                        resync: None,
                        accept_stale: true,
                        provider: None,
                        engine: None,
                        dockerfile: None,
                    },
                    progress,
                )?;
                (made.record, true)
            }
        };
        timer.lap("box");
        let name = record.name.to_string();
        let config = crate::config::Config::load(self.home(), record.project.as_deref())
            .map_err(|e| BoxError::Config(Box::new(e)))?
            .effective();
        self.start(&name)?;
        timer.lap("start");
        let dirs = crate::records::record::BoxDirs::new(self.home(), &name);
        let stage = sync::stage_dir(&dirs.inbox(), &agent.name);
        let mut staged = sync::Synced::default();
        if let Some(home) = host_home() {
            progress.busy(
                &format!("syncing {}'s configuration", agent.name),
                &mut || {
                    staged = sync::stage(&agent, &home, &stage, record.project.as_deref())?;
                    Ok(())
                },
            )?;
        }
        timer.lap("stage");
        let manifest = sync::manifest_file(&stage);
        if !manifest.exists() {
            // No host configuration at all: an empty mirror.
            fs_err::create_dir_all(&stage)?;
            agentbox_core::atomic::write_json_unsynced(
                &manifest,
                &sync::Manifest {
                    version: 1,
                    files: Vec::new(),
                },
            )?;
        }
        let plan = sync::inbox::Plan {
            mirror: sync::stage_in_box(&agent.name),
            manifest: sync::manifest_file(&sync::stage_in_box(&agent.name)),
            home: std::path::PathBuf::from("/root"),
            roots: agent
                .config
                .iter()
                .map(|c| c.path.trim_start_matches("~/").to_owned())
                .collect(),
        };
        let mut argv = crate::records::record::box_binary_argv();
        argv.extend([
            sync::COMMAND.to_owned(),
            serde_json::to_string(&plan).expect("a plan is plain data"),
        ]);
        let ran = self.provider_of(&name)?.collect(&name, argv, "/", false)?;
        let done: sync::inbox::Done = match (
            ran.status,
            ran.output.lines().find_map(|l| l.strip_prefix(SYNCED_LINE)),
        ) {
            (0, Some(json)) => serde_json::from_str(json).unwrap_or_default(),
            _ => {
                return Err(BoxError::AgentSync {
                    name,
                    agent: agent.name.clone(),
                    why: ran.output.lines().take(3).collect::<Vec<_>>().join("; "),
                })
            }
        };
        timer.lap("sync in the box");
        let synced = done.synced;
        let record = if record.last_agent.as_deref() == Some(agent.name.as_str()) {
            record
        } else {
            crate::records::registry::update(self.home(), &name, |r| {
                r.last_agent = Some(agent.name.clone())
            })?
        };
        // Brokered by default where the agent takes a base URL: it gets the box broker's
        // placeholder and base URLs, and the real key stays in the supervisor.
        let forwarded = agent.forwarded_env(self.home());
        let brokered = agent.brokered && config.agents_broker;
        let ask = spec.ask || !config.agents_skip_permissions;
        let mut broker_env = Vec::new();
        let env = if brokered {
            let credentials = crate::agents::broker::Credentials::from_caller(self.home().root())?;
            if credentials.is_empty() && !record.broker {
                // Nothing to broker: the agent logs in by itself.
                forwarded
            } else {
                let endpoint = self.broker(&name, credentials)?;
                let mut env = crate::agents::broker::without_credentials(forwarded);
                broker_env = endpoint.env();
                env.extend(broker_env.iter().map(|(k, v)| format!("{k}={v}")));
                env
            }
        } else if record.broker {
            crate::agents::broker::without_credentials(forwarded)
        } else {
            forwarded
        };
        timer.lap("broker");
        Ok(Launch {
            argv: agent.argv_brokered(&broker_env, ask, spec.prompt.as_deref(), &spec.args),
            env,
            record,
            created,
            staged,
            synced,
        })
    }
}

/// The prefix of the line the in-box sync prints its counts on (JSON).
pub const SYNCED_LINE: &str = "agentbox-synced: ";
