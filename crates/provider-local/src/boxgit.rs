//! Git on a box's repositories, run inside the box.
//!
//! A box repository is box-controlled data: its configuration can name programs
//! (`core.fsmonitor`, filter drivers, hooks), its refs can be symlinks, its alternates can
//! name any directory. So the host never runs git on it. Every read — a branch's tip, the
//! uncommitted paths, the commits a sync brings home — runs inside the box as a box process
//! (through the box's PID 1, in all of its namespaces, with its capabilities and system-call
//! filter), and only data leaves the box:
//!
//! * object ids, accepted only in full-hex form ([`agentbox_git::is_object_id`]);
//! * `git status -z` path lists, used as text;
//! * a git bundle of the box's branch, whose heads the host checks (that branch only, at the
//!   tip the box reported) before the host's git fetches from it, verifying every object.
//!
//! Before a sync the box's repository is also checked from inside (by the agentbox binary
//! the host binds read-only into every box, see [`check_repo`]): its branch ref must be a
//! plain file reached without symlinks, and its alternates must name only the host objects
//! bound into the box.

use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

use agentbox_boxes::records::record::GitRecord;
use agentbox_boxes::{BoxError, Result};

/// The hidden command of the agentbox binary that runs [`check_repo`] (inside a box):
/// `agentbox __check-box-repo WORKTREE BRANCH OBJECTS`.
pub const CHECK_COMMAND: &str = "__check-box-repo";

/// The most of a box command's output the host reads for ids and path lists.
const TEXT_LIMIT: u64 = 64 << 20;

/// The largest git bundle a box may send the host in one sync (2 GiB): the host spools it to
/// its own disk before verifying it, so the box's answer must not be able to fill that disk.
/// Larger work is synced in steps (sync, push, then sync again) or moved with `git push`
/// from inside the box to a remote.
pub const BUNDLE_LIMIT: u64 = 2 << 30;

/// The most of the in-box check's answer the host keeps.
const CHECK_LIMIT: u64 = 64 << 10;

/// How a box command ended: its exit status and the start of its stderr.
pub struct Ran {
    pub status: i32,
    pub stderr: String,
}

/// Runs programs inside one box, as box processes.
pub trait BoxRunner {
    /// Run `argv` in directory `cwd` of the box with no input, its stdout written to `out`;
    /// returns once it has ended.
    fn run(&self, argv: &[String], cwd: &str, out: &std::fs::File) -> Result<Ran>;
    /// A host directory private to agentbox where box output too large for memory (bundles)
    /// is kept while the host reads it.
    fn spool(&self) -> &Path;
    /// The box's name, for errors.
    fn box_name(&self) -> &str;
}

/// [`BoxRunner::run`] with the box's stdout going through a pipe this process copies into
/// `dest`, at most `limit` bytes: the box never writes a host file itself, and a box command
/// that says more is cut off there (it gets `EPIPE`). The second value is whether it was.
fn run_bounded(
    runner: &dyn BoxRunner,
    argv: &[String],
    cwd: &str,
    dest: &std::fs::File,
    limit: u64,
) -> Result<(Ran, bool)> {
    use crate::pipe_copy::{pipe, FromPipe};
    let (r, w) = pipe()?;
    let copy = FromPipe::spawn(r, dest.try_clone()?, Some(limit), false);
    // The pipe's write end is the box's alone once this call returns.
    let ran = runner.run(argv, cwd, &std::fs::File::from(w));
    let (copied, _) = copy.finish()?;
    Ok((ran?, copied.over_limit))
}

/// The error for box repository `git` that `why` refused or failed.
fn repo_error(runner: &dyn BoxRunner, git: &GitRecord, why: impl Into<String>) -> BoxError {
    BoxError::BoxRepo {
        name: runner.box_name().to_owned(),
        repo: git.workspace(),
        why: why.into(),
    }
}

/// Run `git -C <repo> ARGS` in the box; its stdout (at most [`TEXT_LIMIT`] bytes).
fn git_text(runner: &dyn BoxRunner, git: &GitRecord, args: &[&str]) -> Result<(Ran, String)> {
    let mut out = tempfile::tempfile_in(runner.spool())?;
    let (ran, over) = run_bounded(
        runner,
        &git_argv(git, args),
        &git.workspace().to_string_lossy(),
        &out,
        TEXT_LIMIT,
    )?;
    if over {
        return Err(repo_error(
            runner,
            git,
            format!(
                "git {} answered more than {} MiB",
                args.join(" "),
                TEXT_LIMIT >> 20
            ),
        ));
    }
    out.rewind()?;
    let mut text = String::new();
    // Bytes that are not UTF-8 in a path list are replaced, never interpreted.
    let mut raw = Vec::new();
    out.read_to_end(&mut raw)?;
    text.push_str(&String::from_utf8_lossy(&raw));
    Ok((ran, text))
}

fn git_argv(git: &GitRecord, args: &[&str]) -> Vec<String> {
    let mut argv = vec![
        "git".to_owned(),
        "-C".to_owned(),
        git.workspace().to_string_lossy().into_owned(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    argv
}

/// What a failed box command said, for an error message.
fn failed(what: &str, ran: &Ran) -> String {
    match ran.status {
        127 => format!("{what}: git is not installed in the box"),
        s => format!("{what} exited with status {s}: {}", ran.stderr.trim()),
    }
}

/// The tip of box repository `git`'s box branch, read inside the box (`None`: the branch
/// does not exist there — the agent deleted or renamed it).
pub fn tip(runner: &dyn BoxRunner, git: &GitRecord) -> Result<Option<String>> {
    let branch = format!("refs/heads/{}^{{commit}}", git.branch);
    let (ran, out) = git_text(runner, git, &["rev-parse", "--verify", "--quiet", &branch])?;
    match ran.status {
        0 => {
            let tip = out.trim();
            if agentbox_git::is_object_id(tip) {
                Ok(Some(tip.to_owned()))
            } else {
                Err(repo_error(
                    runner,
                    git,
                    format!("the box answered {tip:?} for the tip of {}", git.branch),
                ))
            }
        }
        1 => Ok(None),
        _ => Err(repo_error(runner, git, failed("git rev-parse", &ran))),
    }
}

/// Box repository `git`'s uncommitted and untracked paths, as `git status` inside the box
/// reports them.
pub fn dirty(runner: &dyn BoxRunner, git: &GitRecord) -> Result<Vec<String>> {
    let (ran, out) = git_text(
        runner,
        git,
        &["--no-optional-locks", "status", "--porcelain=v1", "-z"],
    )?;
    if ran.status != 0 {
        return Err(repo_error(runner, git, failed("git status", &ran)));
    }
    Ok(agentbox_git::porcelain_paths(&out))
}

/// Bring box repository `git`'s branch into its host repository: checked inside the box
/// ([`check_repo`]), its tip read inside the box, and — unless the host already has that
/// commit — its new commits carried out as a bundle the box makes and the host verifies.
/// Returns the tip the host's branch is now at (`None`: the box has no such branch; the
/// host's branch is left as it was).
pub fn sync(runner: &dyn BoxRunner, git: &GitRecord) -> Result<Option<String>> {
    let host = &git.repo;
    let mut check = agentbox_boxes::records::record::box_binary_argv();
    check.extend([
        CHECK_COMMAND.to_owned(),
        git.workspace().to_string_lossy().into_owned(),
        git.branch.clone(),
        git.box_objects.to_string_lossy().into_owned(),
    ]);
    let mut said = tempfile::tempfile_in(runner.spool())?;
    let (ran, _) = run_bounded(runner, &check, "/", &said, CHECK_LIMIT)?;
    if ran.status != 0 {
        said.rewind()?;
        let mut why = String::new();
        said.take(4096).read_to_string(&mut why).ok();
        let why = if why.trim().is_empty() {
            ran.stderr
        } else {
            why
        };
        return Err(repo_error(
            runner,
            git,
            format!("refused to sync: {}", why.trim()),
        ));
    }
    let Some(tip) = tip(runner, git)? else {
        return Ok(None);
    };
    if agentbox_git::has_commit(host, &tip) {
        agentbox_git::set_box_branch(host, runner.box_name(), &git.branch, &git.base, &tip)?;
        return Ok(Some(tip));
    }
    // What the host has of this branch already (its last synced tip, the base) stays out of
    // the bundle; both are host commits, which the box sees through its borrowed objects.
    let mut args = vec![
        "bundle".to_owned(),
        "create".to_owned(),
        "--quiet".to_owned(),
        "-".to_owned(),
        format!("refs/heads/{}", git.branch),
    ];
    let known = agentbox_git::branch_tip(host, &git.branch, &git.objects)
        .ok()
        .flatten();
    for have in known.iter().chain([&git.base]) {
        if agentbox_git::has_commit(host, have) {
            args.push(format!("^{have}"));
        }
    }
    let bundle = tempfile::NamedTempFile::new_in(runner.spool())?;
    let argv_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ran, over) = run_bounded(
        runner,
        &git_argv(git, &argv_refs),
        &git.workspace().to_string_lossy(),
        bundle.as_file(),
        bundle_limit(),
    )?;
    if over {
        return Err(repo_error(
            runner,
            git,
            format!(
                "refused to sync: the box's bundle of {} is larger than {} MiB (the most a box may send the host at once); push from inside the box, or sync smaller steps",
                git.branch,
                bundle_limit() >> 20
            ),
        ));
    }
    if ran.status != 0 {
        return Err(repo_error(runner, git, failed("git bundle create", &ran)));
    }
    agentbox_git::take_bundle(
        host,
        bundle.path(),
        runner.box_name(),
        &git.branch,
        &git.base,
        &tip,
    )?;
    Ok(Some(tip))
}

/// [`BUNDLE_LIMIT`], or `AGENTBOX_BUNDLE_LIMIT` (bytes) of the supervisor's environment:
/// set by the host user who starts agentbox, never by a box.
fn bundle_limit() -> u64 {
    std::env::var("AGENTBOX_BUNDLE_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BUNDLE_LIMIT)
}

/// The checks [`sync`] has the box's agentbox binary make on the repository whose working
/// tree is `worktree`, inside the box: `.git` is a directory; `refs/heads/<branch>`, where
/// it exists as a file, is a regular file no symlink leads to; `commondir` (a redirect to
/// another repository's refs) is absent; and every alternate is exactly `objects` (the host
/// objects bound into the box). `Err` says what was refused.
pub fn check_repo(
    worktree: &Path,
    branch: &str,
    objects: &Path,
) -> std::result::Result<(), String> {
    let dot_git = worktree.join(".git");
    let no_links = |path: &Path, must_exist: bool| -> std::result::Result<bool, String> {
        let rel = path.strip_prefix(worktree).unwrap_or(path);
        let mut at = worktree.to_path_buf();
        for part in rel.components() {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(format!("{} is a symbolic link", at.display()))
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => {
                    return Ok(false)
                }
                Err(e) => return Err(format!("{}: {e}", at.display())),
            }
        }
        Ok(true)
    };
    no_links(&dot_git, true)?;
    if !dot_git.is_dir() {
        return Err(format!("{} is not a directory", dot_git.display()));
    }
    if no_links(&dot_git.join("commondir"), false)? {
        return Err(format!(
            "{} points the repository at another one's refs",
            dot_git.join("commondir").display()
        ));
    }
    let branch_ref: PathBuf = dot_git.join("refs/heads").join(branch);
    if no_links(&branch_ref, false)? && !branch_ref.is_file() {
        return Err(format!("{} is not a regular file", branch_ref.display()));
    }
    let alternates = dot_git.join("objects/info/alternates");
    if no_links(&alternates, false)? {
        let text = std::fs::read_to_string(&alternates)
            .map_err(|e| format!("{}: {e}", alternates.display()))?;
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if Path::new(line) != objects {
                return Err(format!(
                    "{} names {line:?}; a box repository may borrow objects only from {}",
                    alternates.display(),
                    objects.display()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_repo;
    use std::path::Path;

    fn repo() -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(d.path().join(".git/refs/heads/agentbox")).expect("mkdir");
        std::fs::create_dir_all(d.path().join(".git/objects/info")).expect("mkdir");
        std::fs::write(d.path().join(".git/refs/heads/agentbox/b"), "x\n").expect("write");
        std::fs::write(
            d.path().join(".git/objects/info/alternates"),
            "/run/agentbox/git/objects\n",
        )
        .expect("write");
        d
    }
    const OBJ: &str = "/run/agentbox/git/objects";

    #[test]
    fn a_seeded_repository_passes() {
        let d = repo();
        assert_eq!(check_repo(d.path(), "agentbox/b", Path::new(OBJ)), Ok(()));
        // A packed branch (no loose file) passes too.
        std::fs::remove_file(d.path().join(".git/refs/heads/agentbox/b")).expect("rm");
        assert_eq!(check_repo(d.path(), "agentbox/b", Path::new(OBJ)), Ok(()));
    }

    #[test]
    fn symlinked_refs_foreign_alternates_and_redirects_are_refused() {
        let d = repo();
        let r = d.path().join(".git/refs/heads/agentbox/b");
        std::fs::remove_file(&r).expect("rm");
        std::os::unix::fs::symlink("/etc/hostname", &r).expect("symlink");
        assert!(check_repo(d.path(), "agentbox/b", Path::new(OBJ))
            .expect_err("symlink")
            .contains("symbolic link"));

        let d = repo();
        let heads = d.path().join(".git/refs/heads");
        std::fs::remove_dir_all(heads.join("agentbox")).expect("rm");
        std::os::unix::fs::symlink("/tmp", heads.join("agentbox")).expect("symlink");
        assert!(check_repo(d.path(), "agentbox/b", Path::new(OBJ)).is_err());

        let d = repo();
        std::fs::write(
            d.path().join(".git/objects/info/alternates"),
            "/run/agentbox/git/objects\n/srv/other/.git/objects\n",
        )
        .expect("write");
        assert!(check_repo(d.path(), "agentbox/b", Path::new(OBJ))
            .expect_err("alternates")
            .contains("/srv/other"));

        let d = repo();
        std::fs::write(d.path().join(".git/commondir"), "/srv/other/.git\n").expect("write");
        assert!(check_repo(d.path(), "agentbox/b", Path::new(OBJ)).is_err());

        let d = repo();
        std::fs::remove_dir_all(d.path().join(".git")).expect("rm");
        std::fs::write(d.path().join(".git"), "gitdir: /srv/other/.git\n").expect("write");
        assert!(check_repo(d.path(), "agentbox/b", Path::new(OBJ)).is_err());
    }
}
