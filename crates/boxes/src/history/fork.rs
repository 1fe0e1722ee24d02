//! Forking a box: a new box whose layer is a node of another box's history.
//!
//! A fork costs no copy: its store environment starts at the node ([`Store::fork_env`]), so
//! it holds exactly what the source box held there — files, installed packages, and its
//! repositories with their commits and uncommitted work. What is new is the box's identity:
//! its own id, number, record (the source's settings), base pins, history (starting at the
//! node) and branches. Processes are not copied.
//!
//! Each repository gets a branch of its own, picked on the host like a create picks one
//! (`agentbox/<fork>`, `-2`, `-3` … when taken; `agentbox/<fork>--<sub>` for a
//! sub-repository). The box repository is moved onto it *inside the box* (the host never
//! runs git on a box's repository), that change is the fork's first node, and the existing
//! sync path brings the branch into the host repository at the fork's tip.
//!
//! [`fork`] owns its rollback: when any step fails, what it made (environment, record, host
//! refs and branches, ledger entries) is removed again, and the name is free.
//!
//! [`Store::fork_env`]: agentbox_store::Store::fork_env

use std::path::Path;

use agentbox_core::name::BoxName;
use chrono::Utc;

use crate::facade::Boxes;
use crate::lifecycle::create::Created;
use crate::lifecycle::seeding::SeededRepo;
use crate::progress::Progress;
use crate::provider::Collected;
use crate::records::record::{self, BoxDirs, BoxRecord, GitRecord};
use crate::records::registry;
use crate::types::SyncedRepo;
use crate::{BoxError, Result};

/// What to fork.
#[derive(Debug, Clone)]
pub struct ForkSpec {
    /// The box forked (its name).
    pub source: String,
    /// The new box's name (`None`: `<source>-fork-<n>`, the first that is free).
    pub name: Option<String>,
    /// The node of the source's history the fork starts at: `HEAD` (the default), `HEAD~N`,
    /// a tag, an id or a unique id prefix.
    pub at: Option<String>,
}

/// A fork just made.
#[derive(Debug)]
pub(crate) struct Forked {
    pub created: Created,
    /// Each branch's tip in its host repository after the fork's sync.
    pub synced: Vec<SyncedRepo>,
}

impl Boxes {
    /// Fork box `spec.source` at `spec.at` (see the module documentation). The new box is
    /// left running when it has repositories (they were moved onto its branches inside
    /// it), else stopped. `Created::head` is its HEAD: the fork's first node (recording its
    /// branches), whose parent is the node forked; without repositories, that node itself.
    pub fn fork(&self, spec: &ForkSpec, progress: &dyn Progress) -> Result<Created> {
        let src = record::read(self.home(), &spec.source)?;
        if spec.at.as_deref().unwrap_or("HEAD") == "HEAD" {
            note_unrecorded(self, &src, progress);
        }
        Ok(fork(self, spec, progress)?.created)
    }
}

/// Say so when box `src` has changes since its HEAD that no node holds yet: a fork starts
/// from a node, so they are not in it.
pub(crate) fn note_unrecorded(boxes: &Boxes, src: &BoxRecord, progress: &dyn Progress) {
    let counted = || -> Result<usize> {
        let store = boxes.store()?;
        if boxes.held(&src.name)? {
            // Its provider holds the tree, and counts as auto-capture does.
            let head = store.node(&store.env(&src.name)?.head)?;
            return Ok(boxes
                .provider_of(&src.name)?
                .changes(&src.name, &head, None, false)?
                .len());
        }
        let changed = store.changed_paths(&src.name)?;
        Ok(record::counted_changes(&record::ignore_set(src), &changed).len())
    };
    let Ok(n) = counted() else {
        return;
    };
    if n > 0 {
        progress.note(&format!(
            "agentbox: box {:?} has {n} change(s) since its HEAD that no node holds; the fork starts from HEAD without them (`agentbox commit {}` first to include them)",
            src.name.as_str(),
            src.name
        ));
    }
}

/// The name a fork of `source` gets when none is given: `<source>-fork-<n>`, the first `n`
/// whose name is free (`taken` says which are not), the source's part shortened when the
/// whole would be longer than a name may be.
pub(crate) fn default_name(source: &str, taken: impl Fn(&str) -> bool) -> Result<BoxName> {
    for n in 1u64.. {
        let suffix = format!("-fork-{n}");
        let room = agentbox_core::name::MAX_LEN.saturating_sub(suffix.len());
        let stem: String = source.chars().take(room).collect();
        let stem = stem.trim_end_matches(['-', '.', '_']);
        let candidate = format!("{stem}{suffix}");
        if !taken(&candidate) {
            return Ok(BoxName::new(candidate)?);
        }
    }
    unreachable!("an unbounded search returns")
}

/// Whether a box or environment named `name` exists in the home.
fn taken(boxes: &Boxes, name: &str) -> bool {
    BoxDirs::new(boxes.home(), name).dir.exists()
        || boxes.store().is_ok_and(|s| s.env(name).is_ok())
}

/// What a fork has made so far, for its rollback.
struct Made<'a> {
    boxes: &'a Boxes,
    name: String,
    env: bool,
    /// Host repositories in which its refs and branch were written: (repository, branch).
    refs: Vec<(std::path::PathBuf, String)>,
    noted: bool,
    record: bool,
}

impl Made<'_> {
    /// Remove everything made, in the reverse order: the box stops, its host refs and
    /// branches go, then its environment and directory.
    fn undo(self) {
        let boxes = self.boxes;
        if self.record {
            // The record names the fork's provider (its source's) until it goes below.
            if let Ok(provider) = boxes.provider_of(&self.name) {
                let _ = provider.stop(&self.name);
                provider.forget(&self.name);
            }
        }
        let mut clean = true;
        for (repo, branch) in &self.refs {
            clean &= agentbox_git::unpin(repo, &self.name).is_ok();
            // The branch was made by this fork (claimed with `create`): it is ours to remove.
            let _ = agentbox_git::delete_branch(repo, branch);
        }
        if self.noted && clean {
            let _ = registry::forget_pins(boxes.home(), &self.name);
        }
        if self.env {
            if let Ok(store) = boxes.store() {
                let _ = store.remove_env(&self.name);
            }
        }
        if self.record {
            let dirs = BoxDirs::new(boxes.home(), &self.name);
            let _ = fs_err::remove_file(dirs.record());
            let _ = fs_err::remove_dir_all(&dirs.dir);
        }
    }
}

/// Fork (see [`Boxes::fork`]); also the fork's branches' tips.
pub(crate) fn fork(boxes: &Boxes, spec: &ForkSpec, progress: &dyn Progress) -> Result<Forked> {
    let home = boxes.home();
    let src = record::read(home, &spec.source)?;
    // The fork is run by its source's provider (refused when this build lacks it).
    boxes.provider_of(&src.name)?;
    let store = boxes.store()?;
    let reference = spec.at.as_deref().unwrap_or("HEAD");
    let node = store.resolve(&src.name, reference).map_err(|e| match e {
        agentbox_store::Error::UnknownRef { .. } => BoxError::NoSuchNode {
            name: src.name.to_string(),
            reference: reference.to_owned(),
        },
        other => other.into(),
    })?;
    let name = match &spec.name {
        Some(n) => {
            let n = registry::check_new_name(home, n)?;
            if taken(boxes, &n) {
                return Err(BoxError::BoxExists {
                    name: n.into_string(),
                });
            }
            n
        }
        None => default_name(&src.name, |n| taken(boxes, n))?,
    };
    // The environment is the claim on the name: of two forks (or creates) racing for it,
    // exactly one makes it, and the other has made nothing yet.
    store
        .fork_env(&src.name, &node, &name, None)
        .map_err(|e| match e {
            agentbox_store::Error::EnvExists { name } => BoxError::BoxExists { name },
            other => other.into(),
        })?;
    let mut made = Made {
        boxes,
        name: name.to_string(),
        env: true,
        refs: Vec::new(),
        noted: false,
        record: false,
    };
    match fork_rest(boxes, &src, &name, &node, &mut made, progress) {
        Ok(forked) => Ok(forked),
        Err(e) => {
            made.undo();
            Err(e)
        }
    }
}

/// A fork after its environment exists: host refs, record, branches inside the box.
fn fork_rest(
    boxes: &Boxes,
    src: &BoxRecord,
    name: &BoxName,
    node: &str,
    made: &mut Made<'_>,
    progress: &dyn Progress,
) -> Result<Forked> {
    let home = boxes.home();
    // Every branch is picked before any ref is written, so a name no repository accepts
    // fails before a host repository is touched.
    let mut repos = Vec::new();
    for g in &src.repos {
        let wanted = match &g.sub {
            None => name.to_string(),
            Some(s) => format!("{name}--{s}"),
        };
        let branch = agentbox_git::pick_branch(&g.host(), &wanted)?;
        repos.push(GitRecord {
            branch,
            ..g.clone()
        });
    }
    if !repos.is_empty() {
        // The ledger names the repositories before any ref is written in them (see
        // `registry::Pin`), so a crash from here on leaves refs `prune` knows to remove.
        let roots: Vec<&Path> = repos.iter().map(|g| g.repo.as_path()).collect();
        registry::note_pins(home, name, &roots)?;
        made.noted = true;
    }
    for (g, from) in repos.iter().zip(&src.repos) {
        agentbox_git::fork_refs(&g.repo, &src.name, name, &g.branch, &g.base)?;
        made.refs.push((g.repo.clone(), g.branch.clone()));
        agentbox_git::inherit(&g.repo, name, &from.branch)?;
    }
    if !src.publish.is_empty() {
        progress.note(&format!(
            "agentbox: the fork does not publish box {:?}'s ports (a host port goes to one box)",
            src.name.as_str()
        ));
    }
    let rec = BoxRecord {
        id: agentbox_core::id::BoxId::random(),
        name: name.clone(),
        display_name: None,
        provider: src.provider.clone(),
        project: src.project.clone(),
        index: registry::allocate_index(home, src.project.as_deref())?,
        last_agent: None,
        // Its own copies of agent configuration come with its tree.
        isolated_config: src.isolated_config.clone(),
        created: Utc::now(),
        source: src.source.clone(),
        network: src.network,
        publish: Vec::new(),
        repos: repos.clone(),
        rootless: src.rootless,
        image: src.image.clone(),
        capture: src.capture,
        env: src.env.clone(),
        ignore: src.ignore.clone(),
        host_paths: src.host_paths.clone(),
        home_tools: src.home_tools.clone(),
        limits: src.limits.clone(),
        keep: src.keep,
        // The fork's tree descends from the same checkpoints as its source's.
        checkpoint: src.checkpoint.clone(),
        lineage: src.lineage.clone(),
        resync_conflicts: Vec::new(),
        engine: src.engine.clone(),
        // A fork gets a broker of its own (its own token) when its source has one.
        broker: src.broker,
    };
    let dirs = BoxDirs::new(home, name);
    // From here the directory is the fork's: the rollback removes it.
    made.record = true;
    fs_err::create_dir_all(&dirs.dir)?;
    record::write(home, &rec)?;
    let mut head = node.to_owned();
    let mut synced = Vec::new();
    if !repos.is_empty() {
        for (g, from) in repos.iter().zip(&src.repos) {
            if !move_branch(boxes, name, g, &from.branch)? {
                progress.note(&format!(
                    "agentbox: box {:?} had no branch {} at node {}; the fork's {} stays at its base",
                    src.name.as_str(),
                    from.branch,
                    short(node),
                    g.branch
                ));
            }
        }
        // The moved branches are the fork's first node: a rollback of the fork to it (or a
        // restart) keeps them, and the node's record of the tips names them.
        let message = format!("fork of box {} at {}", src.name, short(node));
        let opts = agentbox_store::CommitOpts {
            message,
            ..Default::default()
        };
        head = boxes.commit(name, opts)?.id.into_string();
        synced = boxes.provider_of(name)?.sync(name)?;
    }
    let seeded = rec
        .repos
        .iter()
        .map(|g| SeededRepo {
            record: g.clone(),
            seeded: agentbox_git::Seeded {
                branch: g.branch.clone(),
                base: g.base.clone(),
                // Nothing new came from the host: the work is the source box's.
                carried: false,
                untracked: 0,
                source_branch: g.source_branch.clone(),
            },
        })
        .collect();
    Ok(Forked {
        created: Created {
            record: rec,
            head,
            seeded,
            reseed: None,
        },
        synced,
    })
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Run `git -C <repository> ARGS` in box `name` (started when stopped), without making a
/// node. Its output is the box's text: only its status is acted on; the output is quoted
/// (shortened) in an error at most.
pub(crate) fn git_in_box(
    boxes: &Boxes,
    name: &str,
    git: &GitRecord,
    args: &[&str],
) -> Result<Collected> {
    let ws = git.workspace().to_string_lossy().into_owned();
    let mut argv = vec!["git".to_owned(), "-C".to_owned(), ws.clone()];
    argv.extend(args.iter().map(|a| a.to_string()));
    boxes.provider_of(name)?.collect(name, argv, &ws, false)
}

/// The error for box `name`'s repository `git` where `what` ended with `ran`.
fn repo_failed(name: &str, git: &GitRecord, what: &str, ran: &Collected) -> BoxError {
    let said: String = ran.output.trim().chars().take(400).collect();
    BoxError::BoxRepo {
        name: name.to_owned(),
        repo: git.workspace(),
        why: match ran.status {
            127 => format!("{what}: git is not installed in the box"),
            s => format!("{what} exited with status {s}: {said}"),
        },
    }
}

/// Move box `name`'s repository `git` from branch `from` onto `git.branch`, inside the box
/// (`git branch -M`: HEAD follows when it is on `from`; the repository's other branches stay).
/// `Ok(false)`: the box has no branch `from` (its agent deleted or renamed it), and nothing
/// was changed.
pub(crate) fn move_branch(boxes: &Boxes, name: &str, git: &GitRecord, from: &str) -> Result<bool> {
    if from == git.branch {
        return Ok(true);
    }
    let probe = git_in_box(
        boxes,
        name,
        git,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{from}"),
        ],
    )?;
    match probe.status {
        0 => {}
        1 => return Ok(false),
        _ => return Err(repo_failed(name, git, "git rev-parse", &probe)),
    }
    // Branch names here are `agentbox/…`: never taken for an option.
    let moved = git_in_box(boxes, name, git, &["branch", "-M", from, &git.branch])?;
    if moved.status != 0 {
        return Err(repo_failed(name, git, "git branch -M", &moved));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names_are_free_valid_and_short_enough() {
        let n = default_name("web", |n| n == "web-fork-1").expect("a name");
        assert_eq!(n.as_str(), "web-fork-2");
        let long = "a".repeat(60) + "-x";
        let n = default_name(&long, |_| false).expect("a name");
        assert!(n.len() <= agentbox_core::name::MAX_LEN, "{n}");
        assert!(n.ends_with("-fork-1"), "{n}");
        // A shortened stem never ends in a separator before the suffix.
        let n = default_name(&("b".repeat(56) + "-cdef"), |_| false).expect("a name");
        assert!(!n.contains("--fork"), "{n}");
    }
}
