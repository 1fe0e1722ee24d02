//! The red team's attacks on what agentbox decides on the host from files it did not write:
//! a cloned repository's `agentbox.yaml` that is a symlink to a file the user trusted, and
//! another local user's `agentbox.yaml` planted in a shared directory above a project.

use std::os::unix::fs::PermissionsExt;

use agentbox_testkit::tier::require_root;

use crate::common::{git, write, Env};

/// A repository in `dir` with one commit.
fn repo(dir: &std::path::Path) {
    write(&dir.join("README"), "readme\n");
    git(dir, &["init", "-q"]);
    git(dir, &["add", "."]);
    git(
        dir,
        &[
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@x",
            "commit",
            "-qm",
            "init",
        ],
    );
}

#[test]
fn a_symlinked_project_file_does_not_borrow_another_files_trust() {
    let env = Env::new();
    let trusted = env.path("trusted");
    let cloned = env.path("cloned");
    repo(&trusted);
    repo(&cloned);
    // The user trusted their own project's file, which turns the broker off.
    write(
        &trusted.join("agentbox.yaml"),
        "defaults:\n  agents.broker: false\n",
    );
    env.run_in(&trusted, &["trust"]);
    assert_eq!(
        env.run_in(&trusted, &["config", "get", "agents.broker"])
            .trim(),
        "false"
    );
    // The cloned repository links its project file to it.
    std::os::unix::fs::symlink(trusted.join("agentbox.yaml"), cloned.join("agentbox.yaml"))
        .expect("symlink");
    let out = env
        .command(&["config", "get", "agents.broker"])
        .current_dir(&cloned)
        .output()
        .expect("run");
    let said = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        said.trim(),
        "true",
        "the link applied the trusted file: {err}"
    );
    assert!(err.contains("ignored"), "{err}");
}

#[test]
fn another_users_project_file_above_a_project_is_not_its_root() {
    if !require_root("another_users_project_file_above_a_project_is_not_its_root") {
        return;
    }
    let env = Env::new();
    // A shared directory (as /tmp), a project of root's in it, a root-only file beside it.
    let shared = env.path("shared");
    std::fs::create_dir_all(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let proj = shared.join("proj");
    repo(&proj);
    write(&shared.join("rootonly"), "root's secret\n");
    std::fs::set_permissions(
        shared.join("rootonly"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    // nobody plants a project file above it, turning history off.
    let planted = shared.join("agentbox.yaml");
    write(&planted, "defaults:\n  box.capture: false\n");
    std::os::unix::fs::lchown(&planted, Some(65534), Some(65534)).expect("chown");
    let out = env
        .command(&["create", "b"])
        .current_dir(&proj)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = env.ok(&["status", "b"]);
    let canonical = std::fs::canonicalize(&proj).expect("canonical");
    assert!(
        status.contains(&format!("in project {}", canonical.display())),
        "the planted file made the shared directory the project: {status}"
    );
    assert!(status.contains("auto-capture: on"), "{status}");
    let listing = env.ok(&[
        "exec",
        "b",
        "--",
        "sh",
        "-c",
        "ls -A /workspace; cat /workspace/rootonly 2>&1 || true",
    ]);
    assert!(!listing.contains("root's secret"), "{listing}");
    assert!(!listing.contains("agentbox.yaml"), "{listing}");
    crate::common::kill_supervisors(&env.path("home"));
}
