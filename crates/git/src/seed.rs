//! Seeding a box's repository from the host's: a fresh branch `agentbox/<box>` holding the
//! commit, staged and unstaged changes and untracked files the user sees, sharing the
//! host's objects read-only; and the host-side pins that keep its base alive.

use std::path::{Path, PathBuf};

use crate::run::{git, git_stdin, git_with};
use crate::{GitError, HostRepo, Result};

/// Give the box repository at `dst` the host repository's `user.name` and `user.email` (so
/// commits made in the box are the user's), read in one process and written straight into
/// the new repository's config file.
pub(crate) fn copy_identity(host: &Path, dst: &Path) -> Result<()> {
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
    let Start {
        base,
        source_branch,
        host_index,
    } = resolve_start(repo, opts)?;
    // The carried-over work, as one commit nothing refers to: its tree is the host's
    // working tree (tracked files, deletions included), its second parent the host's index.
    let stash = if carries(opts) {
        let scratch = tempfile_in(dst)?;
        let stash = create_stash(repo, &host_index, &scratch);
        fs_err::remove_dir_all(&scratch)?;
        stash?
    } else {
        None
    };
    pin(repo, name, branch, &base, stash.as_deref())?;

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
    let files = carried_files(&repo.root, opts)?;
    for rel in &files {
        copy_into(&repo.root, dst, Path::new(rel))?;
    }
    let untracked = files.len();
    fs_err::write(&alt, format!("{}\n", alternates.display()))?;
    Ok(Seeded {
        branch: branch.to_owned(),
        base,
        carried,
        untracked,
        source_branch,
    })
}

/// Make the host keep what box `name` builds on (`refs/agentbox/<name>/base`, and
/// `refs/agentbox/<name>/carried`: the carried-over work whose objects the box's index and
/// tree refer to — a host `gc` must never drop them) and show its branch `branch` at `base`,
/// all in one transaction; the branch must not exist yet.
pub(crate) fn pin(
    repo: &HostRepo,
    name: &str,
    branch: &str,
    base: &str,
    stash: Option<&str>,
) -> Result<()> {
    let mut refs = format!(
        "start\nupdate refs/agentbox/{name}/base {base}\ncreate refs/heads/{branch} {base}\n"
    );
    if let Some(stash) = stash {
        refs.push_str(&format!("update refs/agentbox/{name}/carried {stash}\n"));
    }
    refs.push_str("prepare\ncommit\n");
    git_stdin(&repo.root, &["update-ref", "--stdin"], &refs).map(|_| ())
}

/// Where a box starts: the base commit, the host branch it came from, the host's index file.
pub(crate) struct Start {
    pub base: String,
    pub source_branch: Option<String>,
    pub host_index: PathBuf,
}

/// Whether `opts` carry the host's uncommitted and untracked work over.
pub(crate) fn carries(opts: &SeedOpts) -> bool {
    !opts.no_carry && opts.from_ref.is_none()
}

/// Resolve `opts.from_ref` (or the host's `HEAD`) to the commit a box starts from, in one
/// process: the commit, the branch it came from (a full ref name; `HEAD` when detached) and
/// the host's index file.
pub(crate) fn resolve_start(repo: &HostRepo, opts: &SeedOpts) -> Result<Start> {
    let start = opts.from_ref.as_deref().unwrap_or("HEAD");
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
    // `--symbolic-full-name` prints nothing for a start that is no ref (an id, `HEAD~1`).
    let (base, full_ref, host_index) = match facts[..] {
        [base, full_ref, host_index] => (base, full_ref, host_index),
        [base, host_index] => (base, "", host_index),
        _ => {
            return Err(GitError::Command {
                dir: repo.root.clone(),
                args: "rev-parse".into(),
                message: format!("unexpected answer {facts:?}"),
            })
        }
    };
    Ok(Start {
        base: base.to_owned(),
        source_branch: full_ref.strip_prefix("refs/heads/").map(str::to_owned),
        host_index: PathBuf::from(host_index),
    })
}

/// The host's uncommitted work (staged and unstaged) as one commit nothing refers to (`git
/// stash create`): its tree is the host's working tree (tracked files, deletions included),
/// its second parent the host's index. `None` when there is none. `scratch` is an empty
/// directory of the caller's.
pub(crate) fn create_stash(
    repo: &HostRepo,
    host_index: &Path,
    scratch: &Path,
) -> Result<Option<String>> {
    // `stash create` refreshes the index it reads: give it a copy, so the host's own
    // index stays byte for byte what it was.
    let copy = scratch.join("index");
    if host_index.exists() {
        fs_err::copy(host_index, &copy)?;
    }
    // Refreshed first: `stash create` fails without a word when the index's stat data
    // is stale (files touched, or chowned) and nothing else changed.
    git_with(
        &repo.root,
        &["update-index", "-q", "--refresh"],
        &[("GIT_INDEX_FILE", &copy)],
    )?;
    let stash = git_with(
        &repo.root,
        &["stash", "create"],
        &[("GIT_INDEX_FILE", &copy)],
    )?;
    Ok(Some(stash).filter(|s| !s.is_empty()))
}

/// The files (relative paths, as git lists them) a box of the host repository at `root` gets
/// besides its tracked ones: the untracked, not ignored ones when `opts` carry work over,
/// and the ignored ones whose name matches a `with_env` pattern; none below an `exclude`d
/// first-level name.
pub(crate) fn carried_files(root: &Path, opts: &SeedOpts) -> Result<Vec<String>> {
    let mut out = Vec::new();
    if carries(opts) {
        let files = git(root, &["ls-files", "-z", "--others", "--exclude-standard"])?;
        out.extend(
            files
                .split('\0')
                .filter(|f| !f.is_empty() && !excluded(f, &opts.exclude))
                .map(str::to_owned),
        );
    }
    if !opts.with_env.is_empty() {
        let ignored = git(
            root,
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
                out.push(rel.to_owned());
            }
        }
    }
    Ok(out)
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
pub(crate) fn box_remotes(
    host: &Path,
    dst: &Path,
    branch: &str,
    source_branch: Option<&str>,
) -> Result<()> {
    for (key, value) in box_config(host, branch, source_branch)? {
        git(dst, &["config", &key, &value])?;
    }
    Ok(())
}

/// The configuration [`box_remotes`] writes, as `(key, value)` in order, read from the host
/// repository's own configuration.
pub(crate) fn box_config(
    host: &Path,
    branch: &str,
    source_branch: Option<&str>,
) -> Result<Vec<(String, String)>> {
    let remotes = git(host, &["remote"])?;
    let upstream_remote = source_branch
        .and_then(|b| git(host, &["config", "--get", &format!("branch.{b}.remote")]).ok())
        .filter(|r| !r.is_empty());
    let mut out = Vec::new();
    let mut first = None;
    for r in remotes.lines().map(str::trim).filter(|r| !r.is_empty()) {
        // Remote names come from the host's own configuration.
        out.push((format!("remote.{r}.url"), format!("agentbox::{r}")));
        out.push((
            format!("remote.{r}.fetch"),
            format!("+refs/heads/*:refs/remotes/{r}/*"),
        ));
        first.get_or_insert_with(|| r.to_owned());
    }
    out.push(("push.default".into(), "current".into()));
    out.push(("agentbox.branch".into(), branch.to_owned()));
    if let (Some(remote), Some(src)) = (upstream_remote.or(first), source_branch) {
        out.push((format!("branch.{branch}.remote"), remote));
        let merge = git(host, &["config", "--get", &format!("branch.{src}.merge")])
            .unwrap_or_else(|_| format!("refs/heads/{src}"));
        out.push((format!("branch.{branch}.merge"), merge));
    }
    Ok(out)
}

/// Whether `rel` (a path git listed) is empty or lies below one of the `exclude`d
/// first-level names.
pub(crate) fn excluded(rel: &str, exclude: &[String]) -> bool {
    let first = rel.split('/').next().unwrap_or_default();
    rel.is_empty() || exclude.iter().any(|e| e == first)
}

/// A scratch directory next to `dst` (removed by the caller).
pub(crate) fn tempfile_in(dst: &Path) -> Result<PathBuf> {
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
pub(crate) fn copy_into(src_root: &Path, dst_root: &Path, rel: &Path) -> Result<()> {
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
/// [`crate::fetch`] left there) from the host repository. Its branch stays: it is the user's work.
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
