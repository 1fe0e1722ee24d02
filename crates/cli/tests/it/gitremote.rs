//! The agent's git habits in a box (root): `git fetch`, `git pull` and `git push` reach the
//! host's remote through the host; only the box's own branch is pushed.

use crate::common::{git, kill_supervisors, write, Env};
use agentbox_testkit::tier::require_root;

#[test]
fn git_fetch_pull_and_push_inside_a_box_go_through_the_host() {
    if !require_root("git_fetch_pull_and_push_inside_a_box_go_through_the_host") {
        return;
    }
    let env = Env::new();
    let root = env.home.path();
    let remote = root.join("remote.git");
    git(
        root,
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            remote.to_str().expect("utf-8"),
        ],
    );
    let proj = root.join("proj");
    write(&proj.join("a.txt"), "one\n");
    git(&proj, &["init", "-q", "-b", "main"]);
    git(&proj, &["add", "-A"]);
    git(&proj, &["commit", "-qm", "first"]);
    git(
        &proj,
        &["remote", "add", "origin", remote.to_str().expect("utf-8")],
    );
    git(&proj, &["push", "-q", "-u", "origin", "main"]);
    env.ok(&["create", "gb", "--from", proj.to_str().expect("utf-8")]);
    // Someone pushes to the remote meanwhile.
    let other = root.join("other");
    git(
        root,
        &["clone", "-q", remote.to_str().expect("utf-8"), "other"],
    );
    write(&other.join("b.txt"), "from elsewhere\n");
    git(&other, &["add", "-A"]);
    git(
        &other,
        &[
            "-c",
            "user.name=o",
            "-c",
            "user.email=o@o",
            "commit",
            "-qm",
            "second",
        ],
    );
    git(&other, &["push", "-q", "origin", "main"]);
    let sh = |script: &str| {
        let out = env.run(&["exec", "gb", "--", "sh", "-c", script]);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) =
        sh("cd /workspace && git fetch -q origin && git log --format=%s origin/main");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "second\nfirst\n");
    let (code, _, err) = sh("cd /workspace && git -c user.name=b -c user.email=b@b pull -q --no-rebase --no-edit && cat b.txt");
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = sh(
        "cd /workspace && echo box > c.txt && git add c.txt && git -c user.name=b -c user.email=b@b commit -qm 'box work' && git push -q",
    );
    assert_eq!(code, Some(0), "{err}");
    let pushed = git(&remote, &["log", "--format=%s", "agentbox/gb"]);
    let pushed = pushed.trim();
    assert_eq!(
        pushed, "box work\nsecond\nfirst",
        "the box's branch is on the remote"
    );
    // Any other branch is refused, and main is untouched.
    let (code, _, err) = sh("cd /workspace && git push origin HEAD:main");
    assert_ne!(code, Some(0));
    assert!(err.contains("only its own branch"), "{err}");
    assert_eq!(
        git(&remote, &["log", "--format=%s", "main"]).trim(),
        "second\nfirst"
    );
    kill_supervisors(&env.path("home"));
}
