//! A box's branches and the host's repositories and remotes: sync (also rootless), `push`
//! and `pull` from the host, and no write from the box into a host repository.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::{as_nobody, code, git, stderr, write};

use super::*;

#[test]
fn a_rootless_box_from_a_git_repository_syncs_its_branch() {
    let Some((b, _)) = boxes("a_rootless_box_from_a_git_repository_syncs_its_branch") else {
        return;
    };
    let root = b.env.home.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let home = root.join("nobody-home");
    let repo = root.join("nobody-repo");
    write(&repo.join("a.txt"), "one\n");
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    write(&repo.join("a.txt"), "one\nuncommitted\n");
    std::fs::create_dir(&home).expect("mkdir");
    for p in [&home, &repo] {
        crate::common::chown_nobody(p);
    }
    let ok = |args: &[&str]| {
        let out = as_nobody(&home, args);
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The host repository belongs to the user; root reads it here only to check.
    let host = |args: &[&str]| {
        let mut a = vec!["-c", "safe.directory=*"];
        a.extend_from_slice(args);
        git(&repo, &a).trim().to_owned()
    };
    ok(&["create", "mine", "--from", repo.to_str().expect("utf-8")]);
    assert_eq!(
        ok(&["exec", "mine", "--", "git", "status", "--short"]),
        " M a.txt\n"
    );
    // `status` looks inside the running box for its uncommitted files.
    let st: serde_json::Value =
        serde_json::from_str(&ok(&["--json", "status", "mine"])).expect("json");
    assert_eq!(
        st["box"]["branches"][0]["dirty"],
        serde_json::json!(["a.txt"]),
        "{st}"
    );
    ok(&[
        "exec",
        "mine",
        "--",
        "sh",
        "-c",
        "git -c user.name=u -c user.email=u@x commit -qam work",
    ]);
    let tip = ok(&["exec", "mine", "--", "git", "rev-parse", "HEAD"]);
    assert_eq!(
        host(&["rev-parse", "agentbox/mine"]),
        tip.trim(),
        "the host has the box's commit"
    );
    // A rollback moves the host branch back.
    ok(&["undo", "mine"]);
    ok(&["sync", "mine"]);
    assert_eq!(
        host(&["rev-parse", "agentbox/mine"]),
        host(&["rev-parse", "HEAD"])
    );
    let log = ok(&["--json", "log", "mine"]);
    assert!(
        log.contains("\"tip\""),
        "nodes record the branch tip: {log}"
    );
    ok(&["destroy", "mine"]);
}

/// A bare repository at `remote` holding `main` of `repo`, which tracks it as `origin`.
fn with_remote(repo: &Path, remote: &Path) {
    git(
        Path::new("/"),
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            remote.to_str().expect("utf-8"),
        ],
    );
    git(
        repo,
        &["remote", "add", "origin", remote.to_str().expect("utf-8")],
    );
    git(repo, &["push", "-q", "-u", "origin", "main"]);
}

#[test]
fn push_sends_the_box_branch_to_the_remote_from_the_host() {
    let Some((b, _)) = boxes("push_sends_the_box_branch_to_the_remote_from_the_host") else {
        return;
    };
    let repo = b.env.path("repo");
    let remote = b.env.path("remote.git");
    repo_with(&repo, &[("a.txt", "one\n")]);
    with_remote(&repo, &remote);
    b.create("pu", &repo, &[]);
    b.sh_ok("pu", "echo two >> a.txt && git commit -qam 'box work'");
    let tip = b.sh_ok("pu", "git rev-parse HEAD");
    let pushed = b.env.json(&["push", "pu"]);
    assert_eq!(pushed[0]["outcome"], "pushed", "{pushed}");
    assert_eq!(pushed[0]["remote"], "origin", "{pushed}");
    assert_eq!(git(&remote, &["rev-parse", "agentbox/pu"]), tip);
    // A remote the repository does not have: a clear error, naming both.
    let out = b.env.run(&["push", "pu", "--remote", "nowhere"]);
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("nowhere") && err.contains(repo.to_str().expect("utf-8")),
        "{err}"
    );
    assert!(err.contains("remote add"), "{err}");
    // From inside the box, through the relay: the push runs on the host (the remote's path
    // is under the test's /tmp, which the box does not even see) for this box only.
    let (_, seen, _) = b.sh("pu", &format!("ls {}", remote.display()));
    assert_eq!(seen, "", "the remote is not reachable from the box");
    b.sh_ok(
        "pu",
        "echo three >> a.txt && git commit -qam 'more box work'",
    );
    let tip = b.sh_ok("pu", "git rev-parse HEAD");
    let out = b.sh_ok("pu", "agentbox push");
    assert!(out.contains("pushed"), "{out}");
    assert_eq!(git(&remote, &["rev-parse", "agentbox/pu"]), tip);
    // A configured `git.remote` is the default remote.
    let backup = b.env.path("backup.git");
    git(
        Path::new("/"),
        &["init", "-q", "--bare", backup.to_str().expect("utf-8")],
    );
    git(
        &repo,
        &["remote", "add", "backup", backup.to_str().expect("utf-8")],
    );
    b.env
        .ok(&["config", "set", "--global", "git.remote", "backup"]);
    assert_eq!(b.env.json(&["push", "pu"])[0]["remote"], "backup");
    assert_eq!(git(&backup, &["rev-parse", "agentbox/pu"]), tip);
    b.env.ok(&["config", "unset", "--global", "git.remote"]);
    let (status, _, err) = b.sh("pu", "agentbox push other-box");
    assert_ne!(status, 0);
    assert!(err.contains("not reachable"), "{err}");
}

#[test]
fn pull_merges_the_remote_branch_inside_the_box() {
    let Some((b, _)) = boxes("pull_merges_the_remote_branch_inside_the_box") else {
        return;
    };
    let repo = b.env.path("repo");
    let remote = b.env.path("remote.git");
    repo_with(&repo, &[("a.txt", "one\n"), ("b.txt", "b\n")]);
    with_remote(&repo, &remote);
    b.create("pl", &repo, &[]);
    // Someone else pushes to the remote.
    let other = b.env.path("other");
    git(
        Path::new("/"),
        &[
            "clone",
            "-q",
            remote.to_str().expect("utf-8"),
            other.to_str().expect("utf-8"),
        ],
    );
    write(&other.join("upstream.txt"), "from upstream\n");
    git(&other, &["add", "-A"]);
    git(&other, &["commit", "-qm", "upstream work"]);
    git(&other, &["push", "-q", "origin", "main"]);
    let upstream = git(&other, &["rev-parse", "HEAD"]);
    let before = host_state(&repo);
    let pulled = b.env.json(&["pull", "pl"]);
    assert_eq!(pulled[0]["outcome"], "merged", "{pulled}");
    assert_eq!(
        b.sh_ok("pl", "cat upstream.txt; git branch --show-current"),
        "from upstream\nagentbox/pl\n"
    );
    b.sh_ok(
        "pl",
        &format!("git merge-base --is-ancestor {} HEAD", upstream.trim()),
    );
    // The merge is a node, and the host's copy of the branch has it.
    git(
        &repo,
        &[
            "merge-base",
            "--is-ancestor",
            upstream.trim(),
            "agentbox/pl",
        ],
    );
    assert_eq!(host_state(&repo), before, "the host repository changed");

    // The agent asks from inside the box: the relay fetches on the host and merges here.
    write(&other.join("second.txt"), "second\n");
    git(&other, &["add", "-A"]);
    git(&other, &["commit", "-qm", "second upstream"]);
    git(&other, &["push", "-q", "origin", "main"]);
    let out = b.sh_ok("pl", "agentbox pull >/dev/null && cat second.txt");
    assert_eq!(out, "second\n");

    // A conflicting change on both sides: non-zero, the box is left mid-merge.
    write(&other.join("b.txt"), "upstream b\n");
    git(&other, &["commit", "-qam", "upstream b"]);
    git(&other, &["push", "-q", "origin", "main"]);
    b.sh_ok("pl", "echo 'box b' > b.txt && git commit -qam 'box b'");
    let out = b.env.run(&["pull", "pl"]);
    assert_eq!(code(&out), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("conflict"), "{}", stderr(&out));
    assert_eq!(
        b.sh_ok("pl", "test -f .git/MERGE_HEAD && git status --short b.txt"),
        "UU b.txt\n"
    );
}

#[test]
fn nothing_in_a_box_can_write_to_a_host_repository() {
    let Some((b, _)) = boxes("nothing_in_a_box_can_write_to_a_host_repository") else {
        return;
    };
    let mono = b.env.path("mono");
    repo_with(&mono, &[("README", "root\n"), (".gitignore", "api/\n")]);
    repo_with(&mono.join("api"), &[("a.txt", "one\n")]);
    write(&mono.join(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n");
    let before = [root_state(&mono, &["api"]), host_state(&mono.join("api"))];
    b.create("x", &mono, &[]);
    for (host, inside, objects) in [
        (mono.clone(), "/workspace", "/run/agentbox/git/objects"),
        (
            mono.join("api"),
            "/workspace/api",
            "/run/agentbox/git/sub/api/objects",
        ),
    ] {
        let h = host.display();
        for attempt in [
            format!("echo evil >> {h}/.git/hooks/pre-commit"),
            format!("git --git-dir={h}/.git config core.evil yes"),
            format!("git --git-dir={h}/.git update-ref refs/heads/evil HEAD"),
            format!("touch {objects}/evil"),
            format!("mkdir {objects}/ee"),
            format!("cp {inside}/.git/HEAD {objects}/info/evil"),
        ] {
            // Whether it fails or lands in the box's own layer, the host must not see it.
            let _ = b.sh("x", &attempt);
        }
        // The box's own writes go to its own repository.
        b.sh_ok(
            "x",
            &format!("cd {inside} && echo blob | git hash-object -w --stdin >/dev/null && git update-ref refs/heads/mine HEAD"),
        );
        let (status, _, _) = b.sh("x", &format!("touch {objects}/evil"));
        assert_ne!(status, 0, "{objects} is writable");
        assert!(!refs_of(&host).contains("refs/heads/evil"), "{h}");
        assert!(!refs_of(&host).contains("refs/heads/mine"), "{h}");
    }
    assert_eq!(
        [root_state(&mono, &["api"]), host_state(&mono.join("api"))],
        before,
        "a host repository changed"
    );
}
