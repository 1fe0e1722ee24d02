//! Shipping a box's repository to a box that cannot borrow the host's objects (a box on a
//! remote engine): the host makes, in a stage directory, files the caller sends to the box,
//! and lists the steps the box runs on them ([`BoxStep`]) to end up exactly where
//! [`crate::seed`] would have put it — the same branch at the same base, the same carried
//! index and working tree, the same untracked and secret files, identity and remotes.
//!
//! What the stage holds once [`ship`] (or [`ship_delta`]) returns, and nothing else:
//!
//! * `git.tar` — for [`ship`]: a `.git/` directory, the repository of a shallow fetch of
//!   the base (and the carried-over work, as `refs/agentbox/carried`) from the host
//!   repository, with no hooks and no configuration but what `seed` writes (identity,
//!   remotes); for [`ship_delta`]: `.git/agentbox-delta.bundle`, a bundle of what the box's
//!   checkpoint lacks. Either way the git-LFS objects the checkout needs, as
//!   `.git/lfs/objects/aa/bb/<oid>`.
//! * `files.tar` — the untracked (and secret ignored) files, paths relative to the
//!   repository's root.
//!
//! Every step reads the host repository only; nothing of a box reaches a host git command.
//! The only host refs written are the temporary `refs/agentbox-ship/<box>/…` (removed before
//! returning, whatever happens) and, on success, the pins and branch `seed` writes.

#[cfg(test)]
mod bench;
mod delta;
mod files;
mod lfs;
mod pack;
mod steps;
#[cfg(test)]
mod tests;

pub use delta::*;
pub use steps::*;

use std::path::{Path, PathBuf};

use crate::run::{git, git_stdin};
use crate::seed::{
    box_config, carried_files, carries, copy_identity, create_stash, pin, resolve_start,
};
use crate::{GitError, HostRepo, Result, SeedOpts, Seeded};
use pack::TarOut;

/// How much history a shipped repository carries (`box.bundleDepth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Depth {
    /// 200 commits, or 100 when those weigh more than [`ADAPTIVE_LIMIT`] bytes.
    #[default]
    Adaptive,
    /// This many commits (more than 0).
    Fixed(u32),
    /// The whole history of the base.
    Full,
}

impl Depth {
    /// From `box.bundleDepth`: unset → adaptive, 0 → full, N → N commits.
    pub fn from_config(value: Option<u32>) -> Self {
        match value {
            None => Depth::Adaptive,
            Some(0) => Depth::Full,
            Some(n) => Depth::Fixed(n),
        }
    }

    /// The depths to try, in order (`None`: no limit).
    fn tries(self) -> Vec<Option<u32>> {
        match self {
            Depth::Adaptive => vec![Some(200), Some(100)],
            Depth::Fixed(n) => vec![Some(n.max(1))],
            Depth::Full => vec![None],
        }
    }
}

/// Above this many bytes of `.git`, an adaptive shipment is redone at the smaller depth.
pub const ADAPTIVE_LIMIT: u64 = 20 * 1024 * 1024;

/// Options of [`ship`] and [`ship_delta`].
#[derive(Debug, Clone)]
pub struct ShipOpts {
    /// The box's branch (`agentbox/<box>`, from [`crate::pick_branch`]); must not exist on
    /// the host yet.
    pub branch: String,
    /// What the box starts from and what it carries, as for [`crate::seed`].
    pub seed: SeedOpts,
    pub depth: Depth,
    /// The stage directory: must not exist; made, and on failure removed, by the call; the
    /// caller removes it once the box has what it holds.
    pub stage: PathBuf,
    /// The owner (uid, gid) written into every tar entry: the box user's.
    pub owner: (u64, u64),
}

/// Which form the `.git` part of a shipment takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Form {
    /// A whole `.git`, of this depth (`None`: full history).
    Full { depth: Option<u32> },
    /// A bundle on top of `from_tip`, which the box has (`bundle: false`: nothing to send,
    /// the box has every commit needed).
    Delta { from_tip: String, bundle: bool },
}

/// What [`ship`] or [`ship_delta`] made.
#[derive(Debug, Clone)]
pub struct Shipment {
    /// What the box will hold, as [`crate::seed`] reports it (`untracked`: the files in
    /// `files_tar`).
    pub seeded: Seeded,
    /// The host repository's root.
    pub repo: PathBuf,
    /// The box's name (its refs in the host repository are `refs/agentbox/<name>/…`).
    pub name: String,
    /// The carried-over work's commit, if any.
    pub stash: Option<String>,
    pub form: Form,
    pub git_tar: PathBuf,
    pub git_tar_bytes: u64,
    pub files_tar: PathBuf,
    pub files_tar_bytes: u64,
    /// The paths `files_tar` holds (relative to the repository's root), in its order.
    pub files: Vec<String>,
    /// LFS objects shipped, and those the host lacks (left as pointers).
    pub lfs_objects: usize,
    pub lfs_missing: usize,
    /// The remotes, push default, box branch and upstream the box's repository is given, as
    /// [`crate::seed`] gives them (`(key, value)`, in order): in the `.git` of a full
    /// shipment, set by the steps of a delta.
    pub config: Vec<(String, String)>,
}

impl Shipment {
    /// Take back what the shipment made in the host repository `repo` — the box's pins and
    /// its branch, while the branch is still at the base (nothing of the box's taken yet) —
    /// for a box that did not come to be, or whose delta its repository could not take (then
    /// shipped in full with [`ship`]). The stage is the caller's to remove.
    pub fn undo(&self, repo: &HostRepo) -> Result<()> {
        // The branch first: refused when it moved, with the pins still in place.
        git(
            &repo.root,
            &[
                "update-ref",
                "-d",
                &format!("refs/heads/{}", self.seeded.branch),
                &self.seeded.base,
            ],
        )?;
        crate::unpin(&repo.root, &self.name)
    }
}

/// The ref the carried-over work has in a shipped repository until the box applied it.
pub(crate) const CARRIED: &str = "refs/agentbox/carried";

/// Make, in `opts.stage`, a shipment of host repository `repo` for new box `name`: a
/// shallow `.git` at the base (see [`Depth`]) and the untracked files (see the module's
/// documentation). On success the host has the box's pins and branch, as after
/// [`crate::seed`]; on failure nothing: no stage, no refs.
pub fn ship(repo: &HostRepo, name: &str, opts: &ShipOpts) -> Result<Shipment> {
    staged(repo, name, opts, |job| {
        let stage_repo = job.opts.stage.join("repo");
        let mut used = None;
        for depth in job.opts.depth.tries() {
            used = Some(depth);
            if stage_repo.exists() {
                fs_err::remove_dir_all(&stage_repo).map_err(|e| job.fail("redo the stage", e))?;
            }
            job.stage_repo(&stage_repo, depth)?;
            let bytes = pack::tree_bytes(&stage_repo.join(".git"))
                .map_err(|e| job.fail("measure the stage", e))?;
            if job.opts.depth != Depth::Adaptive || bytes <= ADAPTIVE_LIMIT {
                break;
            }
        }
        let lfs = lfs::objects(job.repo, &job.checkouts(), &[]);
        let git_tar = job.opts.stage.join("git.tar");
        let bytes = (|| {
            let mut tar = TarOut::create(&git_tar, job.opts.owner)?;
            tar.add_tree(&stage_repo.join(".git"), Path::new(".git"))?;
            add_lfs(&mut tar, &lfs, &stage_repo.join(".git"))?;
            tar.finish()
        })()
        .map_err(|e| job.fail("pack the .git", e))?;
        fs_err::remove_dir_all(&stage_repo).map_err(|e| job.fail("clear the stage", e))?;
        Ok(Made {
            form: Form::Full {
                depth: used.flatten(),
            },
            git_tar,
            git_tar_bytes: bytes,
            lfs,
        })
    })
}

/// Add the LFS objects `lfs` under `.git/lfs/objects/`, their directories made like `like`.
fn add_lfs(tar: &mut TarOut, lfs: &lfs::LfsObjects, like: &Path) -> std::io::Result<()> {
    let mut made = std::collections::BTreeSet::new();
    made.insert(PathBuf::from(".git"));
    for (oid, path) in &lfs.found {
        let name = Path::new(".git").join(lfs::rel_path(oid));
        if let Some(parent) = name.parent() {
            tar.add_dirs(parent, like, &mut made)?;
        }
        tar.add(path, &name)?;
    }
    Ok(())
}

/// What the `.git` half of a shipment made.
pub(crate) struct Made {
    form: Form,
    git_tar: PathBuf,
    git_tar_bytes: u64,
    lfs: lfs::LfsObjects,
}

/// One shipment being made: the host repository, the box, where it starts and what it
/// carries, with the carried-over work and base under temporary host refs.
pub(crate) struct Job<'a> {
    repo: &'a HostRepo,
    name: &'a str,
    opts: &'a ShipOpts,
    base: String,
    source_branch: Option<String>,
    stash: Option<String>,
    config: Vec<(String, String)>,
}

impl Job<'_> {
    /// A [`GitError::Ship`] for step `what`.
    fn fail(&self, what: &str, e: impl std::fmt::Display) -> GitError {
        GitError::Ship {
            repo: self.repo.root.clone(),
            box_name: self.name.to_owned(),
            what: what.to_owned(),
            message: e.to_string(),
        }
    }

    /// Run git in `dir` (the host repository or the stage's) for step `what`.
    fn git(&self, dir: &Path, what: &str, args: &[&str]) -> Result<String> {
        git(dir, args).map_err(|e| self.fail(what, crate::run::command_message(e)))
    }

    /// The temporary host ref of `what` (`base`, `carried`).
    fn temp_ref(&self, what: &str) -> String {
        format!("{TEMP}/{}/{what}", self.name)
    }

    /// The commits whose trees the box checks out: the base, and the carried-over work.
    fn checkouts(&self) -> Vec<&str> {
        let mut out = vec![self.base.as_str()];
        out.extend(self.stash.as_deref());
        out
    }

    /// Make `dst` a repository holding the base (as the box's branch, checked out by name
    /// but not into files) and the carried-over work (as [`CARRIED`]), fetched from the host
    /// repository `depth` commits deep; with the identity and remotes `seed` gives a box.
    fn stage_repo(&self, dst: &Path, depth: Option<u32>) -> Result<()> {
        let dst_str = dst
            .to_str()
            .ok_or_else(|| self.fail("make the stage", "its path is not UTF-8"))?;
        let branch = &self.opts.branch;
        // The host's object format, which the fetch must find: SHA-256 named (a git that
        // cannot tell is one without it).
        let sha256 = git(&self.repo.root, &["rev-parse", "--show-object-format"])
            .is_ok_and(|f| f == "sha256");
        // No template: no hooks, nothing of the user's `init.templateDir`. Loose refs, which
        // every git in a box reads, whatever the user's `init.defaultRefFormat`.
        let mut init = vec![
            "-c",
            "init.defaultRefFormat=files",
            "init",
            "-q",
            "--template=",
        ];
        if sha256 {
            init.push("--object-format=sha256");
        }
        let initial = format!("--initial-branch={branch}");
        init.extend([initial.as_str(), dst_str]);
        self.git(Path::new("/"), "make the stage", &init)?;
        let host = self
            .repo
            .root
            .to_str()
            .ok_or_else(|| self.fail("fetch into the stage", "the host path is not UTF-8"))?;
        let depth_arg = depth.map(|d| format!("--depth={d}"));
        let base_spec = format!("+{}:refs/heads/{branch}", self.temp_ref("base"));
        let carried_spec = format!("+{}:{CARRIED}", self.temp_ref("carried"));
        // No reflog (its message would name the host's path), every object in one pack.
        let mut args = vec![
            "-c",
            "core.logAllRefUpdates=false",
            "-c",
            "transfer.unpackLimit=1",
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-auto-gc",
            "--update-head-ok",
        ];
        args.extend(depth_arg.as_deref());
        args.extend(["--", host, &base_spec]);
        if self.stash.is_some() {
            args.push(&carried_spec);
        }
        self.git(dst, "fetch into the stage", &args)?;
        copy_identity(&self.repo.root, dst).map_err(|e| self.fail("copy the identity", e))?;
        for (key, value) in &self.config {
            self.git(dst, "set the remotes", &["config", key, value])?;
        }
        Ok(())
    }
}

/// Where a shipment's temporary host refs live: `refs/agentbox-ship/<box>/{base,carried}`.
const TEMP: &str = "refs/agentbox-ship";

/// Remove the temporary refs a shipment for box `name` left in the host repository at
/// `repo_root` (`refs/agentbox-ship/<name>/…`: only a process killed while shipping leaves
/// them), for `prune`.
pub fn drop_ship_refs(repo_root: &Path, name: &str) -> Result<()> {
    let refs = git(
        repo_root,
        &[
            "for-each-ref",
            "--format=%(refname)",
            &format!("{TEMP}/{name}/"),
        ],
    )?;
    let tx: String = refs
        .lines()
        .filter(|r| !r.is_empty())
        .map(|r| format!("delete {r}\n"))
        .collect();
    if !tx.is_empty() {
        git_stdin(repo_root, &["update-ref", "--stdin"], &tx)?;
    }
    Ok(())
}

/// The temporary host refs of a shipment, removed when dropped.
struct TempRefs<'a> {
    root: &'a Path,
    refs: Vec<String>,
}

impl Drop for TempRefs<'_> {
    fn drop(&mut self) {
        // Best effort: a failure to remove is not worth hiding the shipment's own result;
        // `refs/agentbox-ship/` is agentbox's to clear on a later run (prune).
        let tx: String = self.refs.iter().map(|r| format!("delete {r}\n")).collect();
        let _ = git_stdin(self.root, &["update-ref", "--stdin"], &tx);
    }
}

/// The frame of every shipment: make the stage, resolve the start, create the carried-over
/// work, park both under temporary refs, let `make` write the `.git` half, write the files
/// tar, drop the temporary refs and pin the box's refs; on any failure remove the stage.
fn staged(
    repo: &HostRepo,
    name: &str,
    opts: &ShipOpts,
    make: impl FnOnce(&Job) -> Result<Made>,
) -> Result<Shipment> {
    fs_err::create_dir(&opts.stage).map_err(|e| GitError::Ship {
        repo: repo.root.clone(),
        box_name: name.to_owned(),
        what: "make the stage".into(),
        message: e.to_string(),
    })?;
    let shipped = staged_in(repo, name, opts, make);
    if shipped.is_err() {
        let _ = fs_err::remove_dir_all(&opts.stage);
    }
    shipped
}

fn staged_in(
    repo: &HostRepo,
    name: &str,
    opts: &ShipOpts,
    make: impl FnOnce(&Job) -> Result<Made>,
) -> Result<Shipment> {
    let start = resolve_start(repo, &opts.seed)?;
    let mut job = Job {
        repo,
        name,
        opts,
        base: start.base,
        config: box_config(&repo.root, &opts.branch, start.source_branch.as_deref())?,
        source_branch: start.source_branch,
        stash: None,
    };
    if carries(&opts.seed) {
        let scratch = opts.stage.join("scratch");
        fs_err::create_dir(&scratch).map_err(|e| job.fail("make the stage", e))?;
        job.stash = create_stash(repo, &start.host_index, &scratch)?;
        fs_err::remove_dir_all(&scratch).map_err(|e| job.fail("clear the stage", e))?;
    }
    let mut temp = TempRefs {
        root: &repo.root,
        refs: vec![],
    };
    let mut tx = String::from("start\n");
    for (what, id) in [("base", Some(&job.base)), ("carried", job.stash.as_ref())] {
        if let Some(id) = id {
            let r = job.temp_ref(what);
            tx.push_str(&format!("update {r} {id}\n"));
            temp.refs.push(r);
        }
    }
    tx.push_str("prepare\ncommit\n");
    job.git_stdin_tx(&tx)?;
    let made = make(&job)?;

    let files = carried_files(&repo.root, &opts.seed)?;
    let files_tar = opts.stage.join("files.tar");
    let mut packed = Vec::new();
    let files_tar_bytes = (|| {
        let mut tar = TarOut::create(&files_tar, opts.owner)?;
        for rel in &files {
            let src = repo.root.join(rel);
            // A directory git lists is a repository of its own inside this one: `seed`
            // copies nothing of it either.
            if !fs_err::symlink_metadata(&src)?.is_dir() {
                tar.add(&src, Path::new(rel))?;
                packed.push(rel.clone());
            }
        }
        tar.finish()
    })()
    .map_err(|e| job.fail("pack the files", e))?;

    drop(temp);
    pin(repo, name, &opts.branch, &job.base, job.stash.as_deref())
        .map_err(|e| job.fail("pin the base", crate::run::command_message(e)))?;
    Ok(Shipment {
        seeded: Seeded {
            branch: opts.branch.clone(),
            base: job.base.clone(),
            carried: job.stash.is_some(),
            untracked: files.len(),
            source_branch: job.source_branch.clone(),
        },
        repo: repo.root.clone(),
        name: name.to_owned(),
        stash: job.stash.clone(),
        form: made.form,
        git_tar: made.git_tar,
        git_tar_bytes: made.git_tar_bytes,
        files_tar,
        files_tar_bytes,
        files: packed,
        lfs_objects: made.lfs.found.len(),
        lfs_missing: made.lfs.missing,
        config: job.config.clone(),
    })
}

impl Job<'_> {
    fn git_stdin_tx(&self, tx: &str) -> Result<()> {
        git_stdin(&self.repo.root, &["update-ref", "--stdin"], tx)
            .map(|_| ())
            .map_err(|e| self.fail("park the base", crate::run::command_message(e)))
    }
}
