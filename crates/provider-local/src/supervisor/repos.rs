//! The box's repositories, read inside the box (see [`crate::boxgit`]): branch tips for
//! nodes, uncommitted paths, and syncing branches into the host repositories.

use super::*;

/// How long a git command agentbox runs inside a box (a status, a bundle) may take.
pub(super) const BOX_GIT_TIMEOUT: Duration = Duration::from_secs(600);

/// The supervisor runs agentbox's git commands on the box's repositories as box processes
/// (see [`crate::boxgit`]): through PID 1, like any command, so they get the box's
/// namespaces, capabilities and system-call filter.
impl crate::boxgit::BoxRunner for Shared {
    fn run(&self, argv: &[String], cwd: &str, out: &std::fs::File) -> Result<crate::boxgit::Ran> {
        let null = fs_err::File::open("/dev/null")?.into_parts().0;
        // Stderr through a pipe whose start this process keeps: the box never writes a host
        // file, and says at most 64 KiB that is read.
        let (err_r, err) = crate::pipe_copy::pipe()?;
        let err_copy = crate::pipe_copy::FromPipe::spawn(
            err_r,
            crate::pipe_copy::Capped::new(64 << 10),
            None,
            false,
        );
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
        drop(err);
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
                    agentbox_boxes::types::render_command(argv),
                    BOX_GIT_TIMEOUT.as_secs()
                )));
            }
        };
        let (_, said) = err_copy.finish()?;
        Ok(crate::boxgit::Ran {
            status,
            stderr: String::from_utf8_lossy(&said.kept).into_owned(),
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
pub(super) fn dirty_inside(shared: &Shared) -> Vec<Option<Vec<String>>> {
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
pub(super) fn git_metadata(shared: &Shared) -> BTreeMap<String, serde_json::Value> {
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
pub(super) fn sync_git(shared: &Shared) -> Result<Vec<SyncedRepo>> {
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
pub(super) fn after_node(shared: &Shared) {
    if let Err(e) = sync_git(shared) {
        eprintln!("syncing the box's branch into the host repository failed: {e}");
    }
}
