//! A box from a checkpoint keeps the checkpoint's untracked files that its git does not
//! ignore (root): kept where the host has none, the box's where the host's uncommitted work
//! also changes the path, reported by `create` (human and `--json`), `status` (human and
//! `--json`) and the in-box file.

use crate::checkpoint::{setup, Home};
use crate::common::{git, stderr, write};

/// The warm box: an install (ignored) and files its setup generated that nobody ignored.
fn generated_box(h: &Home, proj: &std::path::Path) {
    h.env
        .ok(&["create", "warm", "--from", proj.to_str().expect("utf-8")]);
    h.sh(
        "warm",
        "cd /workspace && mkdir -p node_modules/dep gen/out && echo warm > node_modules/dep/index.js \
         && echo 'made by the setup' > generated.txt && echo deep > gen/out/a.txt \
         && echo 'checkpoint local' > setup.local && echo identical > same.cfg \
         && echo 'checkpoint extra' > extra.txt",
    );
}

#[test]
fn a_checkpoints_untracked_files_stay_and_collisions_are_the_boxs_reported() {
    let Some((h, proj)) =
        setup("a_checkpoints_untracked_files_stay_and_collisions_are_the_boxs_reported")
    else {
        return;
    };
    generated_box(&h, &proj);
    h.env.ok(&["checkpoint", "create", "warm", "--name", "gen"]);
    // The host: `extra.txt` committed then deleted (uncommitted), `setup.local` with other
    // content and `same.cfg` with the same, both untracked, and a file of its own.
    write(&proj.join("extra.txt"), "host extra\n");
    git(&proj, &["add", "extra.txt"]);
    git(&proj, &["commit", "-qm", "extra"]);
    std::fs::remove_file(proj.join("extra.txt")).expect("rm");
    write(&proj.join("setup.local"), "host local\n");
    write(&proj.join("same.cfg"), "identical\n");
    write(&proj.join("new.txt"), "host's untracked\n");
    let from = proj.to_str().expect("utf-8");
    let expected = serde_json::json!(["extra.txt", "setup.local"]);

    let rec = h
        .env
        .json(&["create", "b", "--from", from, "--checkpoint", "gen"]);
    assert_eq!(rec["resync_conflicts"], expected, "{rec}");
    let cat = |p: &str| {
        h.sh(
            "b",
            &format!("cat /workspace/{p} 2>/dev/null || echo MISSING"),
        )
    };
    assert_eq!(cat("generated.txt"), "made by the setup\n", "kept");
    assert_eq!(cat("gen/out/a.txt"), "deep\n", "kept");
    assert_eq!(cat("node_modules/dep/index.js"), "warm\n", "the warm state");
    assert_eq!(cat("setup.local"), "checkpoint local\n", "box wins");
    assert_eq!(cat("same.cfg"), "identical\n");
    assert_eq!(cat("extra.txt"), "checkpoint extra\n", "box wins");
    assert_eq!(cat("new.txt"), "host's untracked\n", "carried over");
    assert_eq!(
        h.sh("b", "cat /run/agentbox/ctl/resync-conflicts"),
        "extra.txt\nsetup.local\n"
    );
    let porcelain = h.sh("b", "cd /workspace && git status --porcelain");
    for line in ["?? generated.txt", "?? gen/", "?? new.txt", " M extra.txt"] {
        assert!(
            porcelain.lines().any(|l| l == line),
            "{line:?} in {porcelain}"
        );
    }
    let status = h.env.json(&["status", "b"]);
    assert_eq!(status["box"]["resync_conflicts"], expected, "{status}");
    let human = h.env.ok(&["status", "b"]);
    assert!(
        human.contains("kept from the checkpoint (your uncommitted work also changes them): extra.txt, setup.local"),
        "{human}"
    );

    // The human `create` says the same.
    let out = h
        .env
        .run(&["create", "c", "--from", from, "--checkpoint", "gen"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains(
            "kept the checkpoint's version of 2 paths your uncommitted work also changes"
        ),
        "{said}"
    );
    assert!(
        said.contains("  extra.txt\n") && said.contains("  setup.local\n"),
        "{said}"
    );
    assert_eq!(
        h.sh("c", "cat /workspace/generated.txt"),
        "made by the setup\n"
    );
}

/// `--no-resync` carries nothing over: the checkpoint's untracked files stay, nothing
/// collides. An agent's launch that makes its box from the project's default checkpoint
/// reports the collisions as `create` does.
#[test]
fn without_resync_they_stay_and_an_agents_new_box_reports_collisions() {
    let Some((h, proj)) =
        setup("without_resync_they_stay_and_an_agents_new_box_reports_collisions")
    else {
        return;
    };
    generated_box(&h, &proj);
    h.env.ok(&[
        "checkpoint",
        "create",
        "warm",
        "--name",
        "gen",
        "--set-default",
    ]);
    write(&proj.join("setup.local"), "host local\n");
    let from = proj.to_str().expect("utf-8");
    let rec = h.env.json(&[
        "create",
        "quiet",
        "--from",
        from,
        "--checkpoint",
        "gen",
        "--no-resync",
    ]);
    assert_eq!(rec["resync_conflicts"], serde_json::Value::Null, "{rec}");
    assert_eq!(
        h.sh(
            "quiet",
            "cat /workspace/generated.txt /workspace/setup.local"
        ),
        "made by the setup\ncheckpoint local\n"
    );

    write(
        &h.env.path("home/agents.yaml"),
        "myagent:\n  command: [cat, /workspace/setup.local, /workspace/generated.txt]\n",
    );
    let out = h
        .env
        .command(&["agent", "myagent", "--new"])
        .current_dir(&proj)
        .env("HOME", h.env.path("user"))
        .output()
        .expect("run agentbox");
    let said = stderr(&out);
    assert!(out.status.success(), "{said}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "checkpoint local\nmade by the setup\n"
    );
    assert!(said.contains("from checkpoint gen"), "{said}");
    assert!(
        said.contains("kept the checkpoint's version of 1 path your uncommitted work also changes")
            && said.contains("  setup.local\n"),
        "{said}"
    );
}
