//! Git for boxes: a box made from a repository gets a repository of its own, on a fresh
//! branch `agentbox/<box>`, holding exactly what the user sees — the commit, staged and
//! unstaged changes, untracked files — while the host's checkout stays untouched.
//!
//! The box's repository shares the host's objects read-only (`objects/info/alternates`), so
//! nothing is copied; the host keeps its base commit alive with a ref
//! `refs/agentbox/<box>/base` (its GC can never drop what the box builds on). The only
//! things written to the host repository are refs under `refs/heads/agentbox/` and
//! `refs/agentbox/<box>/` (`base`, and `fetched`: the last commit [`fetch`]ed for the box),
//! and the objects `git stash create`, syncs and fetches add. Everything shells out to the
//! `git` command, as the user's own git would run it — pushes and fetches with the user's
//! own configuration and credentials, on the host (never inside a box).

use std::path::{Path, PathBuf};
use std::process::Command;

mod branches;
pub use branches::*;

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("{}: git {args}: {message}", dir.display())]
    Command {
        /// The directory git ran in (the repository).
        dir: PathBuf,
        args: String,
        message: String,
    },
    #[error("cannot run git: {0}")]
    Spawn(std::io::Error),
    #[error("{path}: the repository has no commits yet; commit something first, or create the box with --no-git to copy the directory as it is")]
    NoCommits { path: PathBuf },
    #[error("{}: no remote {remote:?}", repo.display())]
    NoRemote { repo: PathBuf, remote: String },
    #[error("{}: cannot make branch {branch:?} (not a valid branch name)", repo.display())]
    BadBranch { repo: PathBuf, branch: String },
    #[error("{}: {start} is not a commit", repo.display())]
    NoSuchRef { repo: PathBuf, start: String },
    #[error("{}: pushing {branch} to {remote} failed: {message}", repo.display())]
    Push {
        repo: PathBuf,
        remote: String,
        branch: String,
        message: String,
    },
    #[error("{}: fetching {branch} from {remote} failed: {message}", repo.display())]
    Fetch {
        repo: PathBuf,
        remote: String,
        branch: String,
        message: String,
    },
    #[error("{}: refused box {:?}'s tip {}: it carries commit {}, which the box did not make ({})", .0.repo.display(), .0.box_name, .0.tip, .0.commit, .0.reached_by)]
    ForeignCommit(Box<Foreign>),
    #[error(transparent)]
    Store(#[from] agentbox_store::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl GitError {
    /// The exit-code class of the error (see [`agentbox_core::exit::ExitCode`]).
    pub fn exit_code(&self) -> i32 {
        use agentbox_core::exit::ExitCode;
        match self {
            GitError::Store(s) => s.exit_code(),
            GitError::NoCommits { .. }
            | GitError::BadBranch { .. }
            | GitError::ForeignCommit(_) => ExitCode::Refused.into(),
            GitError::NoRemote { .. } | GitError::NoSuchRef { .. } => ExitCode::NotFound.into(),
            GitError::Io(_)
            | GitError::Spawn(_)
            | GitError::Push { .. }
            | GitError::Fetch { .. }
            | GitError::Command { .. } => ExitCode::Failure.into(),
        }
    }

    /// What the user can do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            GitError::Store(s) => s.hint().map(str::to_owned),
            GitError::NoRemote { repo, remote } => Some(format!(
                "add it on the host (`git -C {} remote add {remote} URL`) or name another with --remote",
                repo.display()
            )),
            GitError::BadBranch { .. } => {
                Some("choose a box name git accepts in a branch name".to_owned())
            }
            GitError::NoSuchRef { repo, .. } => Some(format!(
                "`git -C {} branch -a` lists its branches",
                repo.display()
            )),
            GitError::Push { .. } => Some(
                "a rejected push that is not a fast-forward can be forced with --force".to_owned(),
            ),
            GitError::Fetch { remote, .. } => Some(format!(
                "check that {remote} has that branch, or name one with --branch"
            )),
            GitError::ForeignCommit(f) => Some(format!(
                "a box's branch may carry only commits made in box {:?} on top of its base; reset the box's branch (`git reset` inside the box) to drop the others",
                f.box_name
            )),
            GitError::Io(_)
            | GitError::Spawn(_)
            | GitError::NoCommits { .. }
            | GitError::Command { .. } => None,
        }
    }
}

/// A box's tip refused by [`check_box_tip`]: it carries a commit of the user's.
#[derive(Debug)]
pub struct Foreign {
    pub repo: PathBuf,
    pub box_name: String,
    pub tip: String,
    pub commit: String,
    /// The host refs that already reach the commit, for the message.
    pub reached_by: String,
}

pub type Result<T, E = GitError> = std::result::Result<T, E>;

/// Run `git ARGS` in `dir`; its stdout, trimmed.
fn git(dir: &Path, args: &[&str]) -> Result<String> {
    git_with(dir, args, &[])
}

/// [`git`] with extra environment variables.
fn git_with(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Result<String> {
    run_git(dir, args, env, None)
}

/// Run `git ARGS` in `dir` with `input` on its standard input; its stdout, trimmed.
fn git_stdin(dir: &Path, args: &[&str], input: &str) -> Result<String> {
    run_git(dir, args, &[], Some(input))
}

/// Every git process: `git -C DIR ARGS` with `env` added and `input` (if any) on its
/// standard input; its stdout, trimmed, or an error carrying its stderr.
fn run_git(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
    input: Option<&str>,
) -> Result<String> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        // The user's identity and settings apply; prompts never block.
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(GitError::Spawn)?;
    if let Some(input) = input {
        child
            .stdin
            .take()
            .expect("stdin was piped")
            .write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(GitError::Command {
            dir: dir.to_owned(),
            args: args.join(" "),
            message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
}

/// Give the box repository at `dst` the host repository's `user.name` and `user.email` (so
/// commits made in the box are the user's), read in one process and written straight into
/// the new repository's config file.
fn copy_identity(host: &Path, dst: &Path) -> Result<()> {
    let Ok(found) = git(host, &["config", "--get-regexp", r"^user\.(name|email)$"]) else {
        // Neither is set: nothing to copy.
        return Ok(());
    };
    let mut section = String::from("[user]\n");
    for line in found.lines() {
        let Some((key, value)) = line.split_once(' ') else {
            continue;
        };
        let key = key.trim_start_matches("user.");
        // git's config quoting: inside double quotes only `\` and `"` need escaping;
        // values with a newline cannot come out of `--get-regexp` line by line.
        let quoted = value.replace('\\', "\\\\").replace('"', "\\\"");
        section.push_str(&format!("\t{key} = \"{quoted}\"\n"));
    }
    let config = dst.join(".git/config");
    let mut text = fs_err::read_to_string(&config)?;
    text.push_str(&section);
    fs_err::write(&config, text)?;
    Ok(())
}

/// A repository on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRepo {
    /// The top of its working tree.
    pub root: PathBuf,
    /// Its object directory (the common one, for a linked worktree).
    pub objects: PathBuf,
}

impl HostRepo {
    /// The repository's (common) git directory: refs, config, hooks and objects. For a
    /// linked worktree or a submodule it lies outside the working tree.
    pub fn git_dir(&self) -> &Path {
        self.objects.parent().unwrap_or(&self.objects)
    }
}

/// The repository whose working tree's top is exactly `dir`, if there is one.
pub fn detect(dir: &Path) -> Result<Option<HostRepo>> {
    // One process answers both (each git process costs milliseconds; create runs several).
    let Ok(out) = git(
        dir,
        &[
            "rev-parse",
            "--show-toplevel",
            "--path-format=absolute",
            "--git-common-dir",
        ],
    ) else {
        return Ok(None);
    };
    let mut lines = out.lines();
    let (Some(top), Some(common)) = (lines.next(), lines.next()) else {
        return Ok(None);
    };
    let dir = fs_err::canonicalize(dir)?;
    if fs_err::canonicalize(top)? != dir {
        return Ok(None);
    }
    Ok(Some(HostRepo {
        root: dir,
        objects: PathBuf::from(common).join("objects"),
    }))
}

/// The first-level sub-directories of `dir` that are repositories of their own (they hold
/// `.git` — a directory, or a file for a linked worktree or a submodule — and are the top
/// of their working tree), by name. Symbolic links are not followed: a sub-repository is
/// a real directory of the project.
pub fn sub_repos(dir: &Path) -> Result<Vec<(String, HostRepo)>> {
    let mut out = Vec::new();
    for entry in fs_err::read_dir(dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let path = entry.path();
        if std::fs::symlink_metadata(path.join(".git")).is_err() {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if let Some(repo) = detect(&path)? {
            out.push((name, repo));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The first free branch name for box `name`: `agentbox/<name>`, then `-2`, `-3`, …
/// (`name` may be `<box>--<sub>` for a sub-repository).
pub fn pick_branch(repo: &HostRepo, name: &str) -> Result<String> {
    let first = format!("agentbox/{name}");
    if git(&repo.root, &["check-ref-format", "--branch", &first]).is_err() {
        return Err(GitError::BadBranch {
            repo: repo.root.clone(),
            branch: first,
        });
    }
    for n in 1.. {
        let branch = if n == 1 {
            first.clone()
        } else {
            format!("agentbox/{name}-{n}")
        };
        let exists = git(
            &repo.root,
            &[
                "show-ref",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}"),
            ],
        )
        .is_ok();
        if !exists {
            return Ok(branch);
        }
    }
    unreachable!("an unbounded search returns")
}

/// What seeding made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seeded {
    pub branch: String,
    /// The commit the box starts from.
    pub base: String,
    /// Whether uncommitted changes (staged and unstaged) were carried over.
    pub carried: bool,
    /// Untracked (and, with `with_env`, ignored secret) files copied.
    pub untracked: usize,
    /// The host's branch checked out when the box was made (`None`: detached HEAD, or
    /// `from_ref` was given and is not a local branch).
    pub source_branch: Option<String>,
}

/// Options of [`seed`].
#[derive(Debug, Clone, Default)]
pub struct SeedOpts {
    /// Start from this ref instead of the host's HEAD (no carry-over then).
    pub from_ref: Option<String>,
    /// Leave out uncommitted and untracked work.
    pub no_carry: bool,
    /// Also copy ignored files matching these name patterns (`.env*`-style, `*` only).
    pub with_env: Vec<String>,
    /// First-level names never copied as untracked or ignored files: the directories of
    /// sub-repositories, which are seeded as repositories of their own.
    pub exclude: Vec<String>,
}

/// Make `dst` (not existing yet) a repository on branch `branch` of box `name` holding the
/// host repository's state, its objects borrowed from the host through `alternates` (the
/// path under which the box will see the host's object directory). Creates the host's
/// branch and base pin.
pub fn seed(
    repo: &HostRepo,
    name: &str,
    branch: &str,
    dst: &Path,
    alternates: &Path,
    opts: &SeedOpts,
) -> Result<Seeded> {
    let start = opts.from_ref.as_deref().unwrap_or("HEAD");
    // The base commit, the branch it came from (a full ref name; `HEAD` when detached) and
    // the host's index file, from one process.
    let facts = git(
        &repo.root,
        &[
            "rev-parse",
            &format!("{start}^{{commit}}"),
            "--symbolic-full-name",
            start,
            "--path-format=absolute",
            "--git-path",
            "index",
        ],
    )
    .map_err(|_| {
        if start == "HEAD" {
            GitError::NoCommits {
                path: repo.root.clone(),
            }
        } else {
            GitError::NoSuchRef {
                repo: repo.root.clone(),
                start: start.to_owned(),
            }
        }
    })?;
    let facts: Vec<&str> = facts.lines().collect();
    let [base, full_ref, host_index] = facts[..] else {
        return Err(GitError::Command {
            dir: repo.root.clone(),
            args: "rev-parse".into(),
            message: format!("unexpected answer {facts:?}"),
        });
    };
    let base = base.to_owned();
    let source_branch = full_ref.strip_prefix("refs/heads/").map(str::to_owned);
    // The carried-over work, as one commit nothing refers to: its tree is the host's
    // working tree (tracked files, deletions included), its second parent the host's index.
    let stash = if !opts.no_carry && opts.from_ref.is_none() {
        // `stash create` refreshes the index it reads: give it a copy, so the host's own
        // index stays byte for byte what it was.
        let scratch = tempfile_in(dst)?;
        let copy = scratch.join("index");
        if Path::new(host_index).exists() {
            fs_err::copy(host_index, &copy)?;
        }
        // Refreshed first: `stash create` fails without a word when the index's stat data
        // is stale (files touched, or chowned) and nothing else changed.
        let stash = git_with(
            &repo.root,
            &["update-index", "-q", "--refresh"],
            &[("GIT_INDEX_FILE", &copy)],
        )
        .and_then(|_| {
            git_with(
                &repo.root,
                &["stash", "create"],
                &[("GIT_INDEX_FILE", &copy)],
            )
        });
        fs_err::remove_dir_all(&scratch)?;
        Some(stash?).filter(|s| !s.is_empty())
    } else {
        None
    };
    // The host keeps what the box builds on (the base, and the carried-over work whose
    // objects the box's index and tree refer to: a host `gc` must never drop them), and
    // shows the box's branch — all in one transaction; the branch must not exist yet.
    let mut refs = format!(
        "start\nupdate refs/agentbox/{name}/base {base}\ncreate refs/heads/{branch} {base}\n"
    );
    if let Some(stash) = &stash {
        refs.push_str(&format!("update refs/agentbox/{name}/carried {stash}\n"));
    }
    refs.push_str("prepare\ncommit\n");
    git_stdin(&repo.root, &["update-ref", "--stdin"], &refs)?;

    let dst_str = dst.to_str().ok_or_else(|| GitError::Command {
        dir: dst.to_owned(),
        args: "init".into(),
        message: format!("{} is not UTF-8", dst.display()),
    })?;
    git(
        Path::new("/"),
        &["init", "-q", &format!("--initial-branch={branch}"), dst_str],
    )?;
    let alt = dst.join(".git/objects/info/alternates");
    // While seeding, the host's own path; the box sees the objects elsewhere (below).
    fs_err::write(&alt, format!("{}\n", repo.objects.display()))?;
    copy_identity(&repo.root, dst)?;
    box_remotes(&repo.root, dst, branch, source_branch.as_deref())?;
    // Check out the working tree's state, then make the index the host's: the same result
    // as `reset --hard` + `stash apply --index` (which cannot conflict on its own base), in
    // two processes instead of six. `read-tree -m` keeps the stat data of entries whose
    // content matches, so the box's first `git status` does not rehash everything.
    let worktree = stash.as_deref().unwrap_or(&base);
    git(dst, &["read-tree", "--reset", "-u", worktree])?;
    git(dst, &["update-ref", &format!("refs/heads/{branch}"), &base])?;
    if let Some(stash) = &stash {
        git(dst, &["read-tree", "-m", &format!("{stash}^2")])?;
    }

    let carried = stash.is_some();
    let mut untracked = 0;
    if !opts.no_carry && opts.from_ref.is_none() {
        let files = git(
            &repo.root,
            &["ls-files", "-z", "--others", "--exclude-standard"],
        )?;
        for rel in files
            .split('\0')
            .filter(|f| !f.is_empty() && !excluded(f, &opts.exclude))
        {
            copy_into(&repo.root, dst, Path::new(rel))?;
            untracked += 1;
        }
    }
    if !opts.with_env.is_empty() {
        let ignored = git(
            &repo.root,
            &[
                "ls-files",
                "-z",
                "--others",
                "--ignored",
                "--exclude-standard",
            ],
        )?;
        for rel in ignored
            .split('\0')
            .filter(|f| !f.is_empty() && !excluded(f, &opts.exclude))
        {
            let name = Path::new(rel)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if opts
                .with_env
                .iter()
                .any(|p| agentbox_core::glob::matches(p.as_bytes(), name.as_bytes()))
            {
                copy_into(&repo.root, dst, Path::new(rel))?;
                untracked += 1;
            }
        }
    }
    fs_err::write(&alt, format!("{}\n", alternates.display()))?;
    Ok(Seeded {
        branch: branch.to_owned(),
        base,
        carried,
        untracked,
        source_branch,
    })
}

/// The paths (relative to the repository's root) box `name`'s seeding carried over from
/// host repository `repo_root`: the tracked ones its uncommitted work changed (deletions
/// too) and the untracked ones. Read from the host repository only.
pub fn carried_paths(repo_root: &Path, name: &str) -> Result<Vec<String>> {
    let carried = format!("refs/agentbox/{name}/carried");
    let mut out = Vec::new();
    if git(repo_root, &["rev-parse", "-q", "--verify", &carried]).is_ok() {
        let changed = git(
            repo_root,
            &[
                "diff",
                "--name-only",
                "-z",
                "--no-renames",
                &format!("refs/agentbox/{name}/base"),
                &carried,
            ],
        )?;
        out.extend(
            changed
                .split('\0')
                .filter(|p| !p.is_empty())
                .map(str::to_owned),
        );
    }
    let untracked = git(
        repo_root,
        &["ls-files", "-z", "--others", "--exclude-standard"],
    )?;
    out.extend(
        untracked
            .split('\0')
            .filter(|p| !p.is_empty())
            .map(str::to_owned),
    );
    out.sort();
    out.dedup();
    Ok(out)
}

/// Give the new box repository at `dst` the host repository's remotes, each as
/// `agentbox::NAME` (served inside the box by `git-remote-agentbox`, through the host), so
/// the agent's `git fetch`/`pull`/`push` work as on the host: `push.default = current`
/// pushes the box branch under its own name, the box branch's upstream is the host
/// branch's (what `git pull` merges), and `agentbox.branch` names the one branch the box
/// may push.
fn box_remotes(host: &Path, dst: &Path, branch: &str, source_branch: Option<&str>) -> Result<()> {
    let remotes = git(host, &["remote"])?;
    let upstream_remote = source_branch
        .and_then(|b| git(host, &["config", "--get", &format!("branch.{b}.remote")]).ok())
        .filter(|r| !r.is_empty());
    let mut first = None;
    for r in remotes.lines().map(str::trim).filter(|r| !r.is_empty()) {
        // Remote names come from the host's own configuration.
        git(
            dst,
            &[
                "config",
                &format!("remote.{r}.url"),
                &format!("agentbox::{r}"),
            ],
        )?;
        git(
            dst,
            &[
                "config",
                &format!("remote.{r}.fetch"),
                &format!("+refs/heads/*:refs/remotes/{r}/*"),
            ],
        )?;
        first.get_or_insert_with(|| r.to_owned());
    }
    git(dst, &["config", "push.default", "current"])?;
    git(dst, &["config", "agentbox.branch", branch])?;
    if let (Some(remote), Some(src)) = (upstream_remote.or(first), source_branch) {
        git(
            dst,
            &["config", &format!("branch.{branch}.remote"), &remote],
        )?;
        let merge = git(host, &["config", "--get", &format!("branch.{src}.merge")])
            .unwrap_or_else(|_| format!("refs/heads/{src}"));
        git(dst, &["config", &format!("branch.{branch}.merge"), &merge])?;
    }
    Ok(())
}

/// Whether `rel` (a path git listed) is empty or lies below one of the `exclude`d
/// first-level names.
fn excluded(rel: &str, exclude: &[String]) -> bool {
    let first = rel.split('/').next().unwrap_or_default();
    rel.is_empty() || exclude.iter().any(|e| e == first)
}

/// A scratch directory next to `dst` (removed by the caller).
fn tempfile_in(dst: &Path) -> Result<PathBuf> {
    let dir = dst.with_extension(format!("git-scratch-{}", std::process::id()));
    fs_err::create_dir_all(&dir)?;
    Ok(dir)
}

/// Default `--with-env` patterns: files that carry secrets and are usually ignored.
pub fn default_env_patterns() -> Vec<String> {
    [".env", ".env.*", "*.env", ".envrc"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Copy `rel` (a file or symlink, exactly) from `src_root` to `dst_root`, making parents.
fn copy_into(src_root: &Path, dst_root: &Path, rel: &Path) -> Result<()> {
    let src = src_root.join(rel);
    let dst = dst_root.join(rel);
    if let Some(parent) = dst.parent() {
        fs_err::create_dir_all(parent)?;
    }
    let entry = agentbox_store::fsops::Entry {
        rel: rel.to_owned(),
        meta: agentbox_store::fsops::scan::read_meta(&src)?,
        src,
    };
    if entry.meta.is_dir() {
        return Ok(());
    }
    if std::fs::symlink_metadata(&dst).is_ok() {
        fs_err::remove_file(&dst)?;
    }
    agentbox_store::fsops::copy::copy_entry(&entry, &dst, &Default::default())?;
    Ok(())
}

/// Remove box `name`'s refs under `refs/agentbox/<name>/` (its base pin, and what
/// [`fetch`] left there) from the host repository. Its branch stays: it is the user's work.
pub fn unpin(repo_root: &Path, name: &str) -> Result<()> {
    let refs = git(
        repo_root,
        &[
            "for-each-ref",
            "--format=%(refname)",
            &format!("refs/agentbox/{name}/"),
        ],
    )?;
    for r in refs.lines().filter(|r| !r.is_empty()) {
        git(repo_root, &["update-ref", "-d", r])?;
    }
    Ok(())
}

/// The remote a push or pull of `repo` talks to: `explicit` when given, else the remote
/// `source_branch` tracks (`branch.<b>.remote`), else `origin`. It must exist.
pub fn remote_for(
    repo: &HostRepo,
    explicit: Option<&str>,
    source_branch: Option<&str>,
) -> Result<String> {
    let remote = match explicit {
        Some(r) => r.to_owned(),
        None => source_branch
            .and_then(|b| {
                git(
                    &repo.root,
                    &["config", "--get", &format!("branch.{b}.remote")],
                )
                .ok()
            })
            .filter(|r| !r.is_empty() && r != ".")
            .unwrap_or_else(|| "origin".to_owned()),
    };
    if git(&repo.root, &["remote", "get-url", &remote]).is_err() {
        return Err(GitError::NoRemote {
            repo: repo.root.clone(),
            remote,
        });
    }
    Ok(remote)
}

/// The branch of the remote that `source_branch` tracks (`branch.<b>.merge`, without
/// `refs/heads/`), else `source_branch` itself.
pub fn upstream_branch(repo: &HostRepo, source_branch: &str) -> String {
    git(
        &repo.root,
        &["config", "--get", &format!("branch.{source_branch}.merge")],
    )
    .ok()
    .map(|m| m.trim_start_matches("refs/heads/").to_owned())
    .filter(|m| !m.is_empty())
    .unwrap_or_else(|| source_branch.to_owned())
}

/// `git push REMOTE refs/heads/<branch>:refs/heads/<branch>` from the host repository,
/// with the user's own configuration and credentials (prompts disabled).
pub fn push(repo: &HostRepo, remote: &str, branch: &str, force: bool) -> Result<()> {
    let spec = format!(
        "{}refs/heads/{branch}:refs/heads/{branch}",
        if force { "+" } else { "" }
    );
    git(&repo.root, &["push", "--quiet", remote, &spec]).map_err(|e| GitError::Push {
        repo: repo.root.clone(),
        remote: remote.to_owned(),
        branch: branch.to_owned(),
        message: command_message(e),
    })?;
    Ok(())
}

/// Fetch `branch` of `remote` into the host repository as `refs/agentbox/<name>/fetched`
/// (the host's own refs, remote-tracking ones included, and `FETCH_HEAD` stay as they are;
/// the ref keeps the fetched commits alive until the box goes) and return its commit.
pub fn fetch(repo: &HostRepo, name: &str, remote: &str, branch: &str) -> Result<String> {
    let into = format!("refs/agentbox/{name}/fetched");
    let fail = |message: String| GitError::Fetch {
        repo: repo.root.clone(),
        remote: remote.to_owned(),
        branch: branch.to_owned(),
        message,
    };
    git(
        &repo.root,
        &[
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            // No opportunistic update of the remote-tracking branch either.
            "--refmap=",
            remote,
            &format!("+refs/heads/{branch}:{into}"),
        ],
    )
    .map_err(|e| fail(command_message(e)))?;
    git(
        &repo.root,
        &["rev-parse", "--verify", &format!("{into}^{{commit}}")],
    )
    .map_err(|e| fail(command_message(e)))
}

/// One ref of a remote as the host fetched it for a box.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RemoteRef {
    /// `refs/heads/<branch>` as the remote has it.
    pub name: String,
    pub id: String,
}

/// Fetch every branch of `remote` into host repository `repo` under
/// `refs/agentbox/<name>/remote/` (so the objects are in the host's object store, which the
/// box borrows), and list them as the remote names them. Runs with the host user's git
/// configuration and credentials; nothing of the box reaches the command line.
pub fn fetch_all(repo: &HostRepo, name: &str, remote: &str) -> Result<Vec<RemoteRef>> {
    let prefix = format!("refs/agentbox/{name}/remote/");
    git(
        &repo.root,
        &[
            "fetch",
            "--quiet",
            "--no-tags",
            "--prune",
            "--no-write-fetch-head",
            "--refmap=",
            remote,
            &format!("+refs/heads/*:{prefix}*"),
        ],
    )
    .map_err(|e| GitError::Fetch {
        repo: repo.root.clone(),
        remote: remote.to_owned(),
        branch: "*".to_owned(),
        message: command_message(e),
    })?;
    let listed = git(
        &repo.root,
        &["for-each-ref", "--format=%(objectname) %(refname)", &prefix],
    )?;
    Ok(listed
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(id, r)| {
            r.strip_prefix(&prefix).map(|b| RemoteRef {
                name: format!("refs/heads/{b}"),
                id: id.to_owned(),
            })
        })
        .collect())
}

/// The message of a failed git command (the whole error otherwise).
fn command_message(e: GitError) -> String {
    match e {
        GitError::Command { message, .. } => message,
        other => other.to_string(),
    }
}

/// The tip of `branch` in the host repository at `repo_root` (`None` when it has no such
/// branch). `objects` is the repository's object directory, given explicitly so a linked
/// worktree's common objects are found.
pub fn branch_tip(repo_root: &Path, branch: &str, objects: &Path) -> Result<Option<String>> {
    match git_with(
        repo_root,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}^{{commit}}"),
        ],
        &[("GIT_ALTERNATE_OBJECT_DIRECTORIES", objects)],
    ) {
        Ok(tip) if !tip.is_empty() => Ok(Some(tip)),
        _ => Ok(None),
    }
}

mod from_box;
pub use from_box::*;
