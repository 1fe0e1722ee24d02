//! Taking a box's branch into its host repository from what the box sent.
//!
//! The host never runs git on a box's repository: its configuration, refs and alternates are
//! the box's to write, and git run on it would execute what they name with the host's
//! privileges. The box produces data inside itself (an object id, a git bundle); the
//! functions here check that data for form and let the host's own git, in the user's own
//! repository, take it — the box's branch only, every incoming object verified.

use std::path::Path;

use crate::run::{git, git_stdin, git_with};
use crate::{GitError, Result};

/// Whether `s` is a full object id (SHA-1 or SHA-256, lowercase hex), the only form a box's
/// answer may take before it reaches a host git command line.
pub fn is_object_id(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether the host repository at `repo_root` has commit `id` (and so, having got it by a
/// fetch or made it itself, its history).
pub fn has_commit(repo_root: &Path, id: &str) -> bool {
    is_object_id(id) && git(repo_root, &["cat-file", "-e", &format!("{id}^{{commit}}")]).is_ok()
}

/// Refuse anything but a box branch (`agentbox/…`): nothing else of the host repository is
/// ever written from a box.
fn box_branch_only(repo_root: &Path, branch: &str) -> Result<()> {
    if branch.starts_with("agentbox/") {
        return Ok(());
    }
    Err(GitError::Command {
        dir: repo_root.to_owned(),
        args: format!("fetch {branch}"),
        message: "only agentbox/ branches are synced into the host repository".into(),
    })
}

/// Where a bundle's branch waits in the host repository while [`check_box_tip`] looks at it
/// (outside `refs/agentbox/<box>/`, the box's own refs, and outside `refs/heads/`).
const INCOMING: &str = "refs/agentbox-incoming";

/// Move the host repository's `refs/heads/<branch>` (box `name`'s branch, made at `base`) to
/// commit `id`, which it already has (a rollback in the box, or a branch reset onto a host
/// commit) — once [`check_box_tip`] accepts it. Refused while the branch is checked out in one
/// of the host's worktrees, like any fetch into it.
pub fn set_box_branch(
    repo_root: &Path,
    name: &str,
    branch: &str,
    base: &str,
    id: &str,
) -> Result<()> {
    box_branch_only(repo_root, branch)?;
    if !is_object_id(id) {
        return Err(GitError::Command {
            dir: repo_root.to_owned(),
            args: format!("fetch {branch}"),
            message: format!("the box reported {id:?}, which is not a commit id"),
        });
    }
    check_box_tip(repo_root, name, branch, base, id)?;
    fetch_into_branch(
        repo_root,
        ".",
        &format!("+{id}:refs/heads/{branch}"),
        branch,
    )
}

/// Refuse `tip` as box `name`'s branch `branch` (made at `base`) when it carries a commit the
/// box did not make: one beyond what the box already has in the host repository (its base,
/// every tip its branch had, its own refs `refs/agentbox/<name>/…`) that a ref of the user
/// reaches (an unpushed branch, a tag, a stash, a detached `HEAD`, a remote-tracking branch).
/// The box reads the host's whole object store, so without this it could name such a commit
/// as its tip and have the host push it with the user's credentials.
///
/// Two counts of one walk bounded by the box's new commits (`rev-list --count`), so the cost
/// follows the box's work and the host refs' distance from it, not the repository's size.
/// Still open: a host commit that no ref reaches (only a reflog, or dangling) is not told
/// from one the box made.
pub fn check_box_tip(
    repo_root: &Path,
    name: &str,
    branch: &str,
    base: &str,
    tip: &str,
) -> Result<()> {
    let old = git(
        repo_root,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}^{{commit}}"),
        ],
    )
    .ok()
    .filter(|id| is_object_id(id));
    // The tip the host already holds for this box (most syncs: a node that made no commit)
    // brings nothing new: no walk.
    if old.as_deref() == Some(tip) {
        return Ok(());
    }
    let own = format!("--glob=refs/agentbox/{name}/*");
    let mut new: Vec<&str> = vec!["rev-list", tip, "--not"];
    if has_commit(repo_root, base) {
        new.push(base);
    }
    new.extend(old.as_deref());
    new.push(&own);
    // The user's refs: every ref but agentbox's own (box branches, pins, fetched heads). A
    // box's work moves between boxes of a repository by agentbox's own doing (a fork
    // inherits its source's commits, `fork --keep` gives the source the winner's), so another
    // box's commits are not refused here; what is guarded is the user's.
    let not_own = [
        "--exclude=refs/heads/agentbox/*".to_owned(),
        "--exclude=refs/agentbox/*".to_owned(),
        format!("--exclude={INCOMING}/*"),
        "--all".to_owned(),
    ];
    let mut others = new.clone();
    others.extend(not_own.iter().map(String::as_str));
    // Every tip the branch had (its reflog): commits the host took from this box before, which
    // a rollback and a return to them brings back. Given on standard input, as there may be
    // many.
    let earlier: String = git(
        repo_root,
        &["log", "-g", "--format=%H", &format!("refs/heads/{branch}")],
    )
    .unwrap_or_default()
    .lines()
    .filter(|id| is_object_id(id))
    .collect::<std::collections::BTreeSet<_>>()
    .into_iter()
    .map(|id| format!("^{id}\n"))
    .collect();
    let walk = |args: &[&str], count: bool| -> Result<String> {
        let mut with = vec!["rev-list", "--ignore-missing"];
        if count {
            with.push("--count");
        }
        with.push("--stdin");
        with.extend_from_slice(&args[1..]);
        git_stdin(repo_root, &with, &earlier)
    };
    if walk(&new, true)?.trim() == walk(&others, true)?.trim() {
        return Ok(());
    }
    // Refused: name one such commit, and what reaches it.
    let mine: std::collections::HashSet<String> =
        walk(&others, false)?.lines().map(str::to_owned).collect();
    let all = walk(&new, false)?;
    let commit = all
        .lines()
        .find(|c| !mine.contains(*c))
        .unwrap_or(tip)
        .to_owned();
    let refs = git(
        repo_root,
        &["for-each-ref", "--format=%(refname)", "--contains", &commit],
    )?;
    let reached: Vec<&str> = refs
        .lines()
        .filter(|r| {
            !r.starts_with("refs/heads/agentbox/")
                && !r.starts_with("refs/agentbox/")
                && !r.starts_with(&format!("{INCOMING}/"))
        })
        .take(3)
        .collect();
    Err(GitError::ForeignCommit(Box::new(crate::Foreign {
        repo: repo_root.to_owned(),
        box_name: name.to_owned(),
        tip: tip.to_owned(),
        commit,
        reached_by: if reached.is_empty() {
            "the host's HEAD reaches it".to_owned()
        } else {
            format!("the host's {} reach it", reached.join(", "))
        },
    })))
}

/// Take box `name`'s branch `branch` (made at `base`) at commit `tip` from the git bundle at
/// `bundle` (made inside the box) into the host repository at `repo_root`. The bundle must
/// carry exactly that branch at that tip; its objects are checked as they arrive
/// (`fetch.fsckObjects`), so a malformed object never enters the user's repository; and the
/// tip must pass [`check_box_tip`] before the branch moves (until then it waits under
/// `refs/agentbox-incoming/`).
pub fn take_bundle(
    repo_root: &Path,
    bundle: &Path,
    name: &str,
    branch: &str,
    base: &str,
    tip: &str,
) -> Result<()> {
    box_branch_only(repo_root, branch)?;
    let refused = |message: String| GitError::Command {
        dir: repo_root.to_owned(),
        args: format!("fetch {branch}"),
        message,
    };
    let src = bundle
        .to_str()
        .ok_or_else(|| refused(format!("{} is not UTF-8", bundle.display())))?;
    let heads = git(repo_root, &["bundle", "list-heads", src])
        .map_err(|e| refused(format!("the box sent a damaged bundle: {e}")))?;
    let want = format!("{tip} refs/heads/{branch}");
    if heads.lines().collect::<Vec<_>>() != [want.as_str()] {
        return Err(refused(format!(
            "the box's bundle must hold refs/heads/{branch} at {tip} and nothing else; it holds: {}",
            heads.lines().collect::<Vec<_>>().join(", ")
        )));
    }
    let incoming = format!("{INCOMING}/{name}");
    fetch_into_branch(
        repo_root,
        src,
        &format!("+refs/heads/{branch}:{incoming}"),
        branch,
    )?;
    let taken = check_box_tip(repo_root, name, branch, base, tip).and_then(|()| {
        fetch_into_branch(
            repo_root,
            ".",
            &format!("+{tip}:refs/heads/{branch}"),
            branch,
        )
    });
    let cleared = git(repo_root, &["update-ref", "-d", &incoming]).map(|_| ());
    taken.and(cleared)
}

/// `git fetch SRC SPEC` into the host repository: no tags, no `FETCH_HEAD`, every received
/// object verified, the reflog naming agentbox.
fn fetch_into_branch(repo_root: &Path, src: &str, spec: &str, branch: &str) -> Result<()> {
    let action = format!("agentbox sync {branch}");
    git_with(
        repo_root,
        &[
            "-c",
            "fetch.fsckObjects=true",
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            src,
            spec,
        ],
        &[("GIT_REFLOG_ACTION", Path::new(&action))],
    )
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `git ARGS` in `dir` with a fixed identity; its stdout.
    fn run(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=u", "-c", "user.email=u@x"])
            .args(args)
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A commit on top of `parent` with `parent`'s tree, not on any ref.
    fn commit_on(dir: &Path, parent: &str, msg: &str) -> String {
        let tree = run(dir, &["rev-parse", &format!("{parent}^{{tree}}")]);
        run(dir, &["commit-tree", &tree, "-p", parent, "-m", msg])
    }

    #[test]
    fn a_tip_may_carry_only_the_box_s_commits() {
        let d = tempfile::tempdir().expect("tempdir");
        let repo = d.path();
        run(repo, &["init", "-q", "-b", "main"]);
        run(repo, &["commit", "-q", "--allow-empty", "-m", "base"]);
        let base = run(repo, &["rev-parse", "HEAD"]);
        run(repo, &["update-ref", "refs/agentbox/b/base", &base]);
        run(repo, &["update-ref", "refs/heads/agentbox/b", &base]);
        // The user's unpushed work, a tag, a stash.
        let private = commit_on(repo, &base, "private");
        run(repo, &["update-ref", "refs/heads/private", &private]);
        let tagged = commit_on(repo, &base, "tagged");
        run(repo, &["update-ref", "refs/tags/v1", &tagged]);
        let stashed = commit_on(repo, &base, "stashed");
        run(repo, &["update-ref", "refs/stash", &stashed]);
        let check = |tip: &str| check_box_tip(repo, "b", "agentbox/b", &base, tip);

        for foreign in [&private, &tagged, &stashed] {
            match check(foreign) {
                Err(GitError::ForeignCommit(f)) => assert_eq!(&f.commit, foreign),
                r => panic!("{foreign}: {r:?}"),
            }
            // Built on: still carried.
            let on_top = commit_on(repo, foreign, "mine on top");
            match check(&on_top) {
                Err(GitError::ForeignCommit(f)) => assert_eq!(&f.commit, foreign),
                r => panic!("{on_top}: {r:?}"),
            }
        }
        // The box's own work, the base itself, and a return to an earlier tip pass.
        let mine = commit_on(repo, &base, "mine");
        check(&mine).expect("the box's own commit");
        check(&base).expect("the base");
        set_box_branch(repo, "b", "agentbox/b", &base, &mine).expect("taken");
        set_box_branch(repo, "b", "agentbox/b", &base, &base).expect("a rollback");
        // The user merged the box's work meanwhile: it is still the box's.
        run(repo, &["update-ref", "refs/heads/main", &mine]);
        set_box_branch(repo, "b", "agentbox/b", &base, &mine).expect("back to its own tip");
        // What the box fetched (its own refs) may be built on.
        let fetched = commit_on(repo, &base, "upstream");
        run(repo, &["update-ref", "refs/agentbox/b/fetched", &fetched]);
        run(repo, &["update-ref", "refs/remotes/origin/main", &fetched]);
        check(&commit_on(repo, &fetched, "merge")).expect("built on a fetch");
        // Another box's work (a fork's inheritance, a kept tournament winner) is agentbox's
        // to move between boxes.
        let other = commit_on(repo, &base, "other box");
        run(repo, &["update-ref", "refs/heads/agentbox/c", &other]);
        check(&other).expect("another box's commit");
    }

    #[test]
    fn object_ids() {
        assert!(is_object_id(&"a".repeat(40)));
        assert!(is_object_id(&"0123456789abcdef".repeat(4)));
        assert!(!is_object_id(&"A".repeat(40)));
        assert!(!is_object_id("HEAD"));
        assert!(!is_object_id(&format!("--upload-pack={}", "a".repeat(26))));
        assert!(!is_object_id(&"a".repeat(41)));
    }
}
