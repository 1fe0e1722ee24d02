//! A box's status: its record, whether it runs, its branches against the host's, its
//! limits and health, and how much changed since HEAD — what `agentbox status` shows.

use agentbox_sandbox::proto::Network;
use serde::Serialize;

use crate::facade::Boxes;
use crate::records::record::{self, BoxRecord};
use crate::Result;

/// A box branch as `status` shows it.
#[derive(Debug, Serialize)]
pub struct BranchStatus {
    /// The host repository.
    pub repository: std::path::PathBuf,
    pub branch: String,
    /// The branch's tip in the host repository (`None`: not synced yet, or deleted).
    pub tip: Option<String>,
    /// The host branch compared with (the one checked out in the host repository).
    pub against: Option<String>,
    /// Commits of the box branch not on `against`, and the reverse.
    pub ahead: Option<u64>,
    pub behind: Option<u64>,
    /// Uncommitted paths in the box's repository (`None` when they cannot be told: the
    /// box is stopped — they are read inside it).
    pub dirty: Option<Vec<String>>,
}

/// Whether a box runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BoxState {
    Running,
    Stopped,
}

impl BoxState {
    pub fn as_str(self) -> &'static str {
        match self {
            BoxState::Running => "running",
            BoxState::Stopped => "stopped",
        }
    }
}

/// A box's status. Its JSON is the record's fields and the status's own in one object
/// (the record's `capture` is the auto-capture setting; `capture_state` how it is doing).
#[derive(Debug, Serialize)]
pub struct BoxStatus {
    #[serde(flatten)]
    pub record: BoxRecord,
    pub branches: Vec<BranchStatus>,
    pub state: BoxState,
    pub processes: usize,
    pub base: String,
    /// The network as a person reads it (`private (published 8080->8123)`). Not named
    /// `network`: the record's own `network` (`host`, `private`, `none`) is flattened into
    /// the same JSON object, and a key must appear once.
    pub network_shown: String,
    pub limits: String,
    /// What only a box run in this host's sandbox has (`None`: a box whose provider holds
    /// its tree, a container say, which has none of it — and whose disk is not the
    /// store's). Its fields are the status's own in JSON.
    #[serde(flatten)]
    pub sandbox: Option<SandboxStatus>,
    /// Paths changed in the box's layer since HEAD (what the next node would hold).
    pub changed: usize,
}

/// The part of a box's status only a box run in this host's sandbox has.
#[derive(Debug, Default, Serialize)]
pub struct SandboxStatus {
    /// How auto-capture's watcher is doing in the running box (`None`: stopped, or capture
    /// off).
    pub capture_state: Option<crate::types::CaptureHealth>,
    /// The running box's private in-memory mounts and their use (empty: stopped).
    pub scratch: Vec<crate::types::ScratchUse>,
    /// The host ids the running box's root is (`None`: host root, or stopped).
    pub box_root: Option<agentbox_sandbox::proto::IdRange>,
}

impl Boxes {
    /// Box `name`'s status: its record, state, branches (ahead/behind the host's checked-out
    /// branch, uncommitted paths read inside the running box), limits and health.
    pub fn status(&self, name: &str) -> Result<BoxStatus> {
        let store = self.store()?;
        let rec = record::read(&self.home, name)?;
        let provider = self.provider_of(name)?;
        let held = self.held(name)?;
        let health = provider.health(name)?.running();
        let state = if health.is_some() {
            BoxState::Running
        } else {
            BoxState::Stopped
        };
        let processes = self
            .processes(name)?
            .iter()
            .filter(|p| p.exit.is_none())
            .count();
        let health = health.unwrap_or_default();
        let l = &rec.limits;
        let mut limits = Vec::new();
        if let Some(m) = l.memory_bytes {
            limits.push(format!("memory {}", agentbox_core::units::bytes(m)));
        }
        match (l.pids, health.pids_limit) {
            (Some(p), _) => limits.push(format!("{p} processes")),
            (None, Some(p)) => limits.push(format!("{p} processes (default)")),
            (None, None) => {}
        }
        if let Some(c) = l.cpus {
            limits.push(format!("{c} CPUs"));
        }
        // The store's counters: how much the box wrote against its disk limit.
        match store.disk_usage(name) {
            Ok(Some(d)) => limits.push(match d.used {
                Some(used) => format!(
                    "disk {} of {}",
                    agentbox_core::units::bytes(used),
                    agentbox_core::units::bytes(d.limit)
                ),
                None => format!("disk {}", agentbox_core::units::bytes(d.limit)),
            }),
            Ok(None) => {}
            Err(e) => limits.push(format!("disk unknown ({e})")),
        }
        // The box's repositories are read only inside the box: a stopped box's
        // uncommitted paths are not known.
        let dirty = if rec.repos.is_empty() {
            Vec::new()
        } else {
            self.provider_of(name)?
                .dirty(name)?
                .running()
                .unwrap_or_default()
        };
        let branches = rec
            .repos
            .iter()
            .enumerate()
            .map(|(i, git)| {
                let tip = agentbox_git::branch_tip(&git.repo, &git.branch, &git.objects)
                    .ok()
                    .flatten();
                let against = agentbox_git::current_branch(&git.repo).ok().flatten();
                let (ahead, behind) = match (&tip, &against) {
                    (Some(_), Some(a)) => agentbox_git::ahead_behind(&git.repo, &git.branch, a)
                        .map(|(x, y)| (Some(x), Some(y)))
                        .unwrap_or((None, None)),
                    _ => (None, None),
                };
                BranchStatus {
                    repository: git.repo.clone(),
                    branch: git.branch.clone(),
                    tip,
                    against,
                    ahead,
                    behind,
                    dirty: dirty.get(i).cloned().flatten(),
                }
            })
            .collect();
        Ok(BoxStatus {
            branches,
            state,
            processes,
            base: match &rec.image {
                Some(i) => format!("image {i}"),
                None => "the host's /".to_owned(),
            },
            network_shown: match provider.network_shown(&rec) {
                Some(shown) => shown,
                None => match rec.network {
                    Network::Host => "host".to_owned(),
                    Network::None => "none (loopback only)".to_owned(),
                    Network::Private if rec.publish.is_empty() => "private".to_owned(),
                    Network::Private => format!(
                        "private (published {})",
                        rec.publish
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                },
            },
            sandbox: (!held).then_some(SandboxStatus {
                capture_state: health.capture,
                scratch: health.scratch,
                box_root: health.box_root,
            }),
            limits: if limits.is_empty() {
                "none".to_owned()
            } else {
                limits.join(", ")
            },
            changed: if held {
                // Its provider holds the tree, and counts as auto-capture does.
                let head = store.node(&store.env(name)?.head)?;
                self.provider_of(name)?
                    .changes(name, &head, None, false)?
                    .len()
            } else {
                record::counted_changes(&record::ignore_set(&rec), &store.changed_paths(name)?)
                    .len()
            },
            record: rec,
        })
    }
}
