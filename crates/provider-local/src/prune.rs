//! Finding and removing what boxes left behind: records without a box, boxes without a
//! record, stale supervisor files, git pins of boxes that no longer exist, views of working
//! trees whose process died, and cgroups of boxes that no longer exist.
//!
//! Anything younger than a grace period (default [`GRACE`]) is left alone, because a
//! `create` running in parallel makes its environment, directory and record one after
//! another.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use agentbox_core::home::Home;
use agentbox_store::Store;
use serde::Serialize;

use crate::Result;
use agentbox_boxes::records::record::{self, BoxDirs};

/// Leftovers younger than this may belong to a `create` still in progress.
pub const GRACE: Duration = Duration::from_secs(60);

/// One thing left behind.
#[derive(Debug, Clone, Serialize)]
pub struct Leftover {
    /// `record`, `environment`, `supervisor`, `pin`, `view`, `cgroup`.
    pub kind: &'static str,
    /// What it is, for people.
    pub what: String,
    /// The path (or ref) removed.
    pub target: String,
    #[serde(skip)]
    action: Action,
}

#[derive(Debug, Clone)]
enum Action {
    RemoveDir(PathBuf),
    RemoveFile(PathBuf),
    RemoveEnv(String),
    DeleteRefs {
        repo: PathBuf,
        box_name: String,
        refs: Vec<String>,
    },
    Unmount(PathBuf),
    RemoveCgroup(String),
}

fn older_than(path: &Path, grace: Duration) -> bool {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age >= grace)
}

/// Whether process `pid` runs (a zombie does not), and its command line holds `marker`.
fn process_runs(pid: u32, marker: &str) -> bool {
    let dir = Path::new("/proc").join(pid.to_string());
    let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
        return false;
    };
    // The state follows the command name's closing parenthesis.
    let zombie = stat
        .rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
    let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
    !zombie && String::from_utf8_lossy(&cmdline).contains(marker)
}

/// Everything left behind in `home` (and the repositories its boxes were made from).
pub fn find(home: &Home, store: &Store, grace: Duration) -> Result<Vec<Leftover>> {
    let mut out = Vec::new();
    let boxes = record::list(home)?;
    let exists = |name: &str| boxes.iter().any(|b| b.name == name);
    let envs = store.envs()?;

    // Box directories: without a record, or whose environment is gone.
    if let Ok(entries) = fs_err::read_dir(record::boxes_dir(home)) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let dirs = BoxDirs::new(home, &name);
            let has_env = envs.iter().any(|v| v.name == name);
            let has_record = dirs.record().exists();
            if (!has_record || !has_env) && older_than(&dirs.dir, grace) {
                if crate::client::is_running(home, &name) {
                    continue;
                }
                out.push(Leftover {
                    kind: "record",
                    what: if has_record {
                        format!("box {name:?}: its record outlived its environment")
                    } else {
                        format!("box directory {name:?} without a record")
                    },
                    target: dirs.dir.display().to_string(),
                    action: Action::RemoveDir(dirs.dir.clone()),
                });
                continue;
            }
            // Supervisor files of a supervisor that is gone.
            if let Ok(Some(info)) =
                agentbox_core::atomic::read_json_opt::<record::SupervisorInfo>(&dirs.supervisor())
            {
                if !process_runs(info.pid, "__supervise") {
                    out.push(Leftover {
                        kind: "supervisor",
                        what: format!("box {name:?}: state of supervisor {} (exited)", info.pid),
                        target: dirs.supervisor().display().to_string(),
                        action: Action::RemoveFile(dirs.supervisor()),
                    });
                }
            }
            if dirs.socket().exists() && !crate::client::is_running(home, &name) {
                out.push(Leftover {
                    kind: "supervisor",
                    what: format!("box {name:?}: socket nobody answers"),
                    target: dirs.socket().display().to_string(),
                    action: Action::RemoveFile(dirs.socket()),
                });
            }
        }
    }

    // Box environments (no mount point) whose record never got written.
    for env in &envs {
        let age = chrono::Utc::now().signed_duration_since(env.created);
        if env.mountpoint.is_none()
            && !exists(&env.name)
            && !BoxDirs::new(home, &env.name).dir.exists()
            && age.to_std().is_ok_and(|a| a >= grace)
        {
            out.push(Leftover {
                kind: "environment",
                what: format!(
                    "environment {:?} of a box that was never finished",
                    env.name
                ),
                target: env.name.clone(),
                action: Action::RemoveEnv(env.name.clone()),
            });
        }
    }

    // Refs of boxes of this home that no longer exist, in the repositories the home's
    // ledger names (never refs another agentbox home's boxes keep in the same repository).
    for pin in agentbox_boxes::records::registry::pins(home)? {
        if exists(&pin.box_name) {
            continue;
        }
        let refs = agentbox_git::pins(&pin.repo).unwrap_or_default();
        let mine: Vec<String> = refs
            .into_iter()
            .filter(|(b, _)| *b == pin.box_name)
            .map(|(_, r)| r)
            .collect();
        out.push(Leftover {
            kind: "pin",
            what: if mine.is_empty() {
                format!(
                    "ledger entry of box {:?} in {} (no refs left)",
                    pin.box_name,
                    pin.repo.display()
                )
            } else {
                format!(
                    "{} in {} (box {:?} is gone)",
                    mine.join(", "),
                    pin.repo.display(),
                    pin.box_name
                )
            },
            target: pin.repo.display().to_string(),
            action: Action::DeleteRefs {
                repo: pin.repo.clone(),
                box_name: pin.box_name.clone(),
                refs: mine,
            },
        });
    }

    // Views of working trees mounted by a process that died.
    let store_dir = home.store_dir();
    for m in agentbox_store::mounts::mounts() {
        if !m.mount_point.starts_with(&store_dir) {
            continue;
        }
        let Some(pid) = view_pid(&m.mount_point) else {
            continue;
        };
        if !process_runs(pid, "") {
            out.push(Leftover {
                kind: "view",
                what: format!("view of a working tree mounted by process {pid} (exited)"),
                target: m.mount_point.display().to_string(),
                action: Action::Unmount(m.mount_point.clone()),
            });
        }
    }

    // Cgroups of this home's boxes that no longer exist.
    let suffix = record::cgroup_name(home, "");
    if let Ok(names) = agentbox_boxes::cgroup::BoxCgroup::names() {
        for cg in names {
            let Some(name) = cg.strip_suffix(&suffix) else {
                continue;
            };
            if !exists(name) {
                out.push(Leftover {
                    kind: "cgroup",
                    what: format!("cgroup of box {name:?} (gone)"),
                    target: cg.clone(),
                    action: Action::RemoveCgroup(cg.clone()),
                });
            }
        }
    }
    Ok(out)
}

/// The pid in a view's directory name (`view-<pid>-<id>`).
fn view_pid(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix("view-")?.split('-').next()?.parse().ok()
}

/// Remove `l`.
pub fn remove(home: &Home, store: &Store, l: &Leftover) -> Result<()> {
    match &l.action {
        Action::RemoveDir(d) => {
            // The record goes first: without it the box no longer exists.
            let _ = fs_err::remove_file(d.join("box.json"));
            fs_err::remove_dir_all(d)?;
        }
        Action::RemoveFile(f) => fs_err::remove_file(f)?,
        Action::RemoveEnv(name) => store.remove_env(name)?,
        Action::DeleteRefs {
            repo,
            box_name,
            refs,
        } => {
            for r in refs {
                agentbox_git::delete_ref(repo, r)?;
            }
            agentbox_boxes::records::registry::forget_pin(home, box_name, repo)?;
        }
        Action::Unmount(p) => {
            rustix::mount::unmount(p, rustix::mount::UnmountFlags::DETACH)
                .map_err(|e| crate::BoxError::io(p, e.into()))?;
            let _ = fs_err::remove_dir(p);
        }
        Action::RemoveCgroup(name) => {
            if let Some(cg) = agentbox_boxes::cgroup::BoxCgroup::open(name)
                .map_err(|e| crate::BoxError::Supervisor(e.to_string()))?
            {
                cg.remove()
                    .map_err(|e| crate::BoxError::Supervisor(e.to_string()))?;
            }
        }
    }
    Ok(())
}
