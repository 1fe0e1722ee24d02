//! Pushing a box's branches to their remotes and pulling their upstreams into the box —
//! on the host, as the user, with the user's git configuration and credentials; the box is
//! involved only through its provider (the sync of its branches, the merge inside it).

use std::path::Path;

use serde::Serialize;

use crate::facade::Boxes;
use crate::records::record::{self, BoxRecord, GitRecord};
use crate::{BoxError, Result};

/// What one repository's push or pull came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// push: the branch is on the remote.
    Pushed,
    /// push: the box has no such branch (deleted or renamed inside it): nothing pushed.
    NoBranch,
    /// pull: the upstream was merged (a node records it).
    Merged,
    /// pull: nothing to merge.
    UpToDate,
    /// pull: the merge stopped with conflicts; the box repository is left mid-merge.
    Conflict,
    /// pull: the merge failed without conflicts (uncommitted changes in the way, say).
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pushed => "pushed",
            Outcome::NoBranch => "no-branch",
            Outcome::Merged => "merged",
            Outcome::UpToDate => "up-to-date",
            Outcome::Conflict => "conflict",
            Outcome::Failed => "failed",
        }
    }
}

/// One repository's part of a push or pull.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteResult {
    /// `None`: the project root.
    pub sub: Option<String>,
    pub repo: std::path::PathBuf,
    pub remote: String,
    /// The box's branch (push), or the remote's branch merged (pull).
    pub branch: String,
    /// What was pushed, or what was merged (`None`: nothing, see `outcome`).
    pub commit: Option<String>,
    pub outcome: Outcome,
    /// The node the merge made, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What git said when a merge did not succeed (box-controlled text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// The repositories of `rec` that `only` names (by label, `.` for the root; all when empty).
fn chosen<'r>(rec: &'r BoxRecord, only: &[String]) -> Result<Vec<&'r GitRecord>> {
    if rec.repos.is_empty() {
        return Err(BoxError::NoRepositories {
            name: rec.name.to_string(),
        });
    }
    if let Some(unknown) = only
        .iter()
        .find(|o| !rec.repos.iter().any(|g| g.label() == o.as_str()))
    {
        return Err(BoxError::NoSuchRepository {
            name: rec.name.to_string(),
            repo: unknown.clone(),
            known: rec.repos.iter().map(|g| g.label().to_owned()).collect(),
        });
    }
    Ok(rec
        .repos
        .iter()
        .filter(|g| only.is_empty() || only.iter().any(|o| o == g.label()))
        .collect())
}

/// The remote to use: `explicit`, else `git.remote` when a configuration file (not the
/// built-in default) sets it, else `None` (the branch's tracked remote, or `origin`).
fn configured_remote(
    boxes: &Boxes,
    rec: &BoxRecord,
    explicit: Option<&str>,
) -> Result<Option<String>> {
    if let Some(r) = explicit {
        return Ok(Some(r.to_owned()));
    }
    use crate::config::{key::Value, layers::Layer, Config};
    let config = Config::load(boxes.home(), rec.project.as_deref())
        .map_err(|e| BoxError::Config(Box::new(e)))?;
    let entry = config
        .entry("git.remote")
        .map_err(|e| BoxError::Config(Box::new(e)))?;
    Ok(match (&entry.value, entry.origin.layer) {
        (Some(Value::Str(r)), layer) if layer != Layer::Builtin => Some(r.clone()),
        _ => None,
    })
}

impl Boxes {
    /// Push the box's branches (of the repositories `only` names) to their remotes: every
    /// remote is checked first, then the branches are synced from the box and pushed.
    /// `progress` shows each push.
    pub fn push(
        &self,
        rec: &BoxRecord,
        remote: Option<&str>,
        only: &[String],
        force: bool,
        progress: &dyn crate::progress::Progress,
    ) -> Result<Vec<RemoteResult>> {
        let repos = chosen(rec, only)?;
        let remote = configured_remote(self, rec, remote)?;
        let remotes = repos
            .iter()
            .map(|g| {
                agentbox_git::remote_for(&g.host(), remote.as_deref(), g.source_branch.as_deref())
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let synced = self.sync(rec)?;
        let mut results = Vec::new();
        for (g, remote) in repos.into_iter().zip(remotes) {
            let tip = synced
                .iter()
                .find(|s| s.sub == g.sub)
                .and_then(|s| s.tip.clone());
            if tip.is_some() {
                progress.busy(&format!("pushing {} to {remote}", g.branch), &mut || {
                    Ok(agentbox_git::push(&g.host(), &remote, &g.branch, force)?)
                })?;
            }
            results.push(RemoteResult {
                sub: g.sub.clone(),
                repo: g.repo.clone(),
                remote,
                branch: g.branch.clone(),
                outcome: if tip.is_some() {
                    Outcome::Pushed
                } else {
                    Outcome::NoBranch
                },
                commit: tip,
                node: None,
                output: None,
            });
        }
        Ok(results)
    }

    /// Pull: for each repository `only` names, fetch `branch` (default: the upstream of the
    /// branch the box was made from) on the host into `refs/agentbox/<box>/fetched`, then
    /// merge that commit inside the box, where it is reachable through the read-only
    /// object store. Whether a merge conflicted is read from the box repository's index
    /// (unmerged entries), never from git's translatable messages.
    /// The branches of the remote the host configured for box `rec`'s repository `repo`
    /// (its label: `.` for the root, else the sub-directory), fetched on the host into its
    /// object store — which the box's repository borrows, so a `git fetch` in the box needs
    /// nothing more than this list (see the in-box remote helper).
    pub fn remote_refs(&self, rec: &BoxRecord, repo: &str) -> Result<Vec<agentbox_git::RemoteRef>> {
        let g = chosen(rec, &[repo.to_owned()])?
            .into_iter()
            .next()
            .expect("chosen returns the one repository named");
        let remote = configured_remote(self, rec, None)?;
        let host = g.host();
        let remote =
            agentbox_git::remote_for(&host, remote.as_deref(), g.source_branch.as_deref())?;
        Ok(agentbox_git::fetch_all(&host, &rec.name, &remote)?)
    }

    pub fn pull(
        &self,
        rec: &BoxRecord,
        remote: Option<&str>,
        branch: Option<&str>,
        only: &[String],
        progress: &dyn crate::progress::Progress,
    ) -> Result<Vec<RemoteResult>> {
        let remote = configured_remote(self, rec, remote)?;
        let mut plan = Vec::new();
        for g in chosen(rec, only)? {
            let host = g.host();
            let remote =
                agentbox_git::remote_for(&host, remote.as_deref(), g.source_branch.as_deref())?;
            let branch = match (branch, &g.source_branch) {
                (Some(b), _) => b.to_owned(),
                (None, Some(src)) => agentbox_git::upstream_branch(&host, src),
                (None, None) => {
                    return Err(BoxError::NoUpstream {
                        name: rec.name.to_string(),
                        repo: g.repo.clone(),
                    })
                }
            };
            plan.push((g, remote, branch));
        }
        let mut results = Vec::new();
        for (g, remote, branch) in plan {
            let mut sha = String::new();
            progress.busy(&format!("fetching {branch} from {remote}"), &mut || {
                sha = agentbox_git::fetch(&g.host(), &rec.name, &remote, &branch)?;
                Ok(())
            })?;
            self.provider_of(&rec.name)?.offer_commit(
                &rec.name,
                g,
                &format!("refs/agentbox/{}/fetched", rec.name),
                &sha,
            )?;
            let cwd = g.workspace().to_string_lossy().into_owned();
            let git = |args: &[&str], capture: bool| {
                let mut argv = vec!["git".to_owned()];
                argv.extend(args.iter().map(|a| a.to_string()));
                self.run_in_box(&rec.name, argv, &cwd, capture)
            };
            let head = |ran: crate::provider::Collected| ran.output.trim().to_owned();
            let before = head(git(&["rev-parse", "--verify", "--quiet", "HEAD"], false)?);
            let merged = git(
                &[
                    "merge",
                    "--no-edit",
                    "-m",
                    &format!("Merge {remote}/{branch}"),
                    &sha,
                ],
                true,
            )?;
            let outcome = if merged.status == 0 {
                let after = head(git(&["rev-parse", "--verify", "--quiet", "HEAD"], false)?);
                if after == before {
                    Outcome::UpToDate
                } else {
                    Outcome::Merged
                }
            } else if !git(&["ls-files", "--unmerged"], false)?
                .output
                .trim()
                .is_empty()
            {
                Outcome::Conflict
            } else {
                Outcome::Failed
            };
            results.push(RemoteResult {
                sub: g.sub.clone(),
                repo: g.repo.clone(),
                remote,
                branch,
                commit: Some(sha.clone()),
                outcome,
                node: merged.node,
                output: (merged.status != 0).then(|| merged.output.trim_end().to_owned()),
            });
        }
        Ok(results)
    }

    /// Run `argv` in the box (started if needed) in `cwd`, collecting its output.
    fn run_in_box(
        &self,
        name: &str,
        argv: Vec<String>,
        cwd: &str,
        capture: bool,
    ) -> Result<crate::provider::Collected> {
        // The box's own provider (a box need not be the default provider's).
        self.provider_of(name)?.collect(name, argv, cwd, capture)
    }
}

/// The error a pull's results come to, if any: a conflict (exit 4) before a failure.
pub fn pull_problem(rec: &BoxRecord, results: &[RemoteResult]) -> Option<BoxError> {
    let inside = |r: &RemoteResult| {
        Path::new(record::WORKSPACE)
            .join(r.sub.as_deref().unwrap_or(""))
            .to_path_buf()
    };
    if let Some(r) = results.iter().find(|r| r.outcome == Outcome::Conflict) {
        return Some(BoxError::MergeConflict {
            name: rec.name.to_string(),
            remote: r.remote.clone(),
            branch: r.branch.clone(),
            inside: inside(r),
        });
    }
    results
        .iter()
        .find(|r| r.outcome == Outcome::Failed)
        .map(|r| BoxError::MergeFailed {
            name: rec.name.to_string(),
            remote: r.remote.clone(),
            branch: r.branch.clone(),
            inside: inside(r),
        })
}
