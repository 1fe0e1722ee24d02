//! Crash safety: the process is killed (abort, like `kill -9`) at every named step of every
//! multi-step operation; afterwards the store must open, reconcile, pass `fsck`, keep every
//! acknowledged commit, and accept new work. Tier 2 (the layers backend mounts overlays).

use std::path::Path;

use crate::common::{log_ids, stderr, write, Env};

/// Set up an environment with two commits and return its directory.
fn prepared(t: &Env) -> std::path::PathBuf {
    let dir = t.path("crashy");
    write(&dir.join("a"), "root");
    t.ok(&["env", dir.to_str().expect("utf8")]);
    write(&dir.join("a"), "one");
    t.ok(&["commit", "crashy", "-m", "one"]);
    write(&dir.join("a"), "two");
    write(&dir.join("b"), "b");
    t.ok(&["commit", "crashy", "-m", "two"]);
    dir
}

/// Run `args` with failpoint `point` armed and require that it died there.
fn crash(t: &Env, point: &str, args: &[&str]) {
    let out = t.run_with(args, &[("AGENTBOX_FAILPOINT", point)]);
    assert!(
        out.status.code().is_none(),
        "{point}: expected the process to die at the failpoint, got {:?}\n{}",
        out.status,
        stderr(&out)
    );
    assert!(stderr(&out).contains(point), "{point}: {}", stderr(&out));
}

/// The store is consistent and usable, and the history has `expect_nodes` nodes.
fn healthy(t: &Env, dir: &Path, point: &str, expect_nodes: usize) {
    // fsck sees the store as the crash left it: whatever it finds must be repairable, and
    // `prune` must remove it all.
    let fsck = t.run(&["--json", "fsck"]);
    if !fsck.status.success() {
        assert_eq!(fsck.status.code(), Some(7), "{point}: {}", stderr(&fsck));
        // The report, then the error (both JSON on stdout).
        let report: serde_json::Value = serde_json::Deserializer::from_slice(&fsck.stdout)
            .into_iter()
            .next()
            .expect("a report")
            .expect("JSON");
        let problems = report["problems"].as_array().expect("problems");
        assert!(
            problems.iter().all(|p| p["repairable"] == true),
            "{point}: fsck after the crash: {report}"
        );
        t.ok(&["prune"]);
    }
    let fsck = t.run(&["--json", "fsck"]);
    assert!(
        fsck.status.success(),
        "{point}: fsck after the crash and prune:\n{}\n{}",
        String::from_utf8_lossy(&fsck.stdout),
        stderr(&fsck)
    );
    let log = t.json(&["log", "crashy"]);
    let nodes = log["nodes"].as_array().expect("nodes").len();
    assert_eq!(nodes, expect_nodes, "{point}: {log}");
    // The working tree is usable and matches HEAD plus nothing surprising.
    t.ok(&["mount", "crashy"]);
    write(&dir.join("after"), point);
    let after = t.json(&["commit", "crashy", "-m", "after the crash"]);
    t.ok(&["checkout", "crashy", "HEAD~1"]);
    assert!(!dir.join("after").exists(), "{point}");
    t.ok(&["checkout", "crashy", after["id"].as_str().expect("id")]);
    assert!(dir.join("after").exists(), "{point}");
    let fsck = t.run(&["fsck"]);
    assert!(fsck.status.success(), "{point}: {}", stderr(&fsck));
}

/// Every named step of a commit of the `layers` backend, in order; from `commit:after-copy`
/// on, every commit passes them, the first three only one that hands its files over.
const COMMIT_POINTS: [&str; 9] = [
    "commit:after-unmount",
    "commit:after-handoff-marker",
    "commit:after-handover",
    "commit:after-copy",
    "commit:after-layer",
    "commit:after-record",
    "commit:after-index",
    "commit:after-node",
    "commit:after-head",
];

#[test]
fn commit_survives_a_kill_at_every_step() {
    if !agentbox_testkit::tier::require_root("commit_survives_a_kill_at_every_step") {
        return;
    }
    for point in COMMIT_POINTS {
        let t = Env::new();
        let dir = prepared(&t);
        kill_a_commit(&t, &dir, point);
    }
}

/// Kill a commit of `dir` (which has an uncommitted file) at `point`, then check the store
/// recovered: before HEAD moved the commit never happened, after it did, and the
/// uncommitted file is never lost.
fn kill_a_commit(t: &Env, dir: &Path, point: &str) {
    write(&dir.join("c"), "uncommitted");
    crash(t, point, &["commit", "crashy", "-m", "interrupted"]);
    let expect = if point == "commit:after-head" { 4 } else { 3 };
    healthy(t, dir, point, expect);
    assert_eq!(
        std::fs::read_to_string(dir.join("c")).expect(point),
        "uncommitted",
        "{point}"
    );
}

/// [`prepared`], in a store whose chains reach their maximum depth at the next commit, with
/// enough files in the first layer that the commit compacts the chain (folds its small diff
/// layers and its own changes into one layer over the first) rather than flattening it.
fn prepared_to_compact(t: &Env) -> std::path::PathBuf {
    for i in 0..40 {
        write(&t.path(&format!("crashy/lib/{i}")), "a library file");
    }
    let dir = prepared(t);
    let config = t.path("home/store/store.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).expect("read store.json")).expect("JSON");
    json["max_depth"] = 3.into();
    std::fs::write(&config, serde_json::to_vec(&json).expect("JSON")).expect("write store.json");
    dir
}

#[test]
fn a_compacting_commit_survives_a_kill_at_every_step() {
    if !agentbox_testkit::tier::require_root("a_compacting_commit_survives_a_kill_at_every_step") {
        return;
    }
    // Uninterrupted, the commit leaves a chain two deep.
    let t = Env::new();
    let dir = prepared_to_compact(&t);
    assert_eq!(t.json(&["status", "crashy"])["env"]["chain_depth"], 3);
    write(&dir.join("c"), "committed");
    t.ok(&["commit", "crashy", "-m", "compacts"]);
    assert_eq!(t.json(&["status", "crashy"])["env"]["chain_depth"], 2);
    assert_eq!(
        t.json(&["log", "crashy"])["nodes"].as_array().map(Vec::len),
        Some(4)
    );

    // A compaction copies its changes: it hands nothing over.
    for point in &COMMIT_POINTS[3..] {
        let t = Env::new();
        let dir = prepared_to_compact(&t);
        kill_a_commit(&t, &dir, point);
    }
}

/// On btrfs a commit writes its node before the snapshot that makes both durable (one
/// transaction commit): killed at any step, the store recovers the same way.
#[test]
fn a_btrfs_commit_survives_a_kill_at_every_step() {
    if !agentbox_testkit::tier::require_root("a_btrfs_commit_survives_a_kill_at_every_step") {
        return;
    }
    for point in [
        "commit:after-record",
        "commit:after-index",
        "commit:after-layer",
        "commit:after-head",
    ] {
        let Some(fs) = agentbox_testkit::loopfs::LoopFs::btrfs(512 << 20) else {
            return;
        };
        let t = Env::new();
        std::os::unix::fs::symlink(fs.path(), t.path("home")).expect("symlink home");
        let dir = prepared(&t);
        assert_eq!(t.json(&["status", "crashy"])["backend"], "btrfs", "{point}");
        kill_a_commit(&t, &dir, point);
        let _ = std::process::Command::new("umount").arg(&dir).status();
    }
}

/// On btrfs a commit is on disk when it returns, with one flush after its snapshot: the
/// image of the filesystem taken right then (every write that completed, nothing only in
/// memory; no periodic transaction commit in between) holds the new HEAD, its node and its
/// layer, and the store opens from it, passes `fsck` and takes new work.
#[test]
fn a_btrfs_commit_is_on_disk_when_it_returns() {
    use agentbox_testkit::loopfs::LoopFs;
    if !agentbox_testkit::tier::require_root("a_btrfs_commit_is_on_disk_when_it_returns") {
        return;
    }
    let Some(fs) = LoopFs::btrfs(512 << 20) else {
        return;
    };
    let t = Env::new();
    std::os::unix::fs::symlink(fs.path(), t.path("home")).expect("symlink home");
    let dir = prepared(&t);
    assert_eq!(t.json(&["status", "crashy"])["backend"], "btrfs");
    // From here on only an fsync (btrfs's log tree) or the commit's own snapshot (a
    // transaction commit) puts anything on the disk.
    fs.remount("commit=3600");
    t.ok(&["checkout", "crashy", "HEAD~1"]);
    write(&dir.join("a"), "after the checkout");
    let node = t.json(&["commit", "crashy", "-m", "durable"]);
    let id = node["id"].as_str().expect("id").to_owned();
    let image = fs.crash_image();
    let _ = std::process::Command::new("umount").arg(&dir).status();
    drop(fs);
    let fs = LoopFs::mount_crashed(image);
    let store = fs.path().join("store");
    let env: serde_json::Value = serde_json::from_slice(
        &std::fs::read(store.join("envs/crashy/env.json")).expect("env.json after the crash"),
    )
    .expect("env.json is whole");
    assert_eq!(env["head"], id.as_str(), "HEAD after the crash: {env}");
    assert!(store.join(format!("nodes/{id}.json")).is_file(), "the node");
    assert_eq!(
        std::fs::read_to_string(store.join(format!("layers/{id}/a"))).expect("the layer"),
        "after the checkout"
    );
    // The store itself, as agentbox finds it after the reboot.
    let t = Env::new();
    std::os::unix::fs::symlink(fs.path(), t.path("home")).expect("symlink home");
    t.ok(&["fsck"]);
    let log = t.json(&["log", "crashy"]);
    let ids = log_ids(&log);
    assert!(ids.contains(&id.as_str()), "{log}");
    // The environment still lives at `dir`, which the first test environment holds.
    t.ok(&["mount", "crashy"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("a")).expect("read"),
        "after the checkout"
    );
    write(&dir.join("b"), "new work");
    t.ok(&["commit", "crashy", "-m", "after the crash"]);
    let _ = std::process::Command::new("umount").arg(&dir).status();
}

/// A commit that hands the working files to its layer unmounts the working tree for a
/// moment; a crash then leaves it unmounted. Whatever was written at the mount point
/// meanwhile is part of the working tree once it is mounted again, not hidden under it.
#[test]
fn writes_while_a_commit_had_the_tree_unmounted_are_kept() {
    if !agentbox_testkit::tier::require_root(
        "writes_while_a_commit_had_the_tree_unmounted_are_kept",
    ) {
        return;
    }
    for point in ["commit:after-handover", "commit:after-head"] {
        let t = Env::new();
        let dir = prepared(&t);
        crash(&t, point, &["commit", "crashy", "-m", "interrupted"]);
        write(&dir.join("meanwhile"), "written while unmounted");
        t.ok(&["mount", "crashy"]);
        assert_eq!(
            std::fs::read_to_string(dir.join("meanwhile")).expect(point),
            "written while unmounted",
            "{point}"
        );
        assert!(
            std::fs::read_dir(&dir).expect("list").count() > 1,
            "{point}: the rest of the tree is there too"
        );
    }
}

#[test]
fn checkout_survives_a_kill_at_every_step() {
    if !agentbox_testkit::tier::require_root("checkout_survives_a_kill_at_every_step") {
        return;
    }
    for point in ["checkout:after-unmount", "checkout:after-reset"] {
        let t = Env::new();
        let dir = prepared(&t);
        crash(&t, point, &["checkout", "crashy", "HEAD~2"]);
        // The next writer finishes the checkout: HEAD and the tree agree.
        t.ok(&["mount", "crashy"]);
        assert_eq!(
            std::fs::read_to_string(dir.join("a")).expect("a"),
            "root",
            "{point}"
        );
        let log = t.json(&["log", "crashy", "--ancestors"]);
        assert_eq!(
            log.as_array().map(Vec::len),
            Some(1),
            "{point}: HEAD is the root"
        );
        t.ok(&["checkout", "crashy", "HEAD"]);
        healthy(&t, &dir, point, 3);
    }
}

/// Every step of a delete a kill can interrupt.
const DELETE_POINTS: [&str; 3] = [
    "delete:after-tombstone",
    "delete:after-reparent",
    "delete:after-tips",
];

#[test]
fn delete_gc_and_create_survive_a_kill() {
    if !agentbox_testkit::tier::require_root("delete_gc_and_create_survive_a_kill") {
        return;
    }
    for point in DELETE_POINTS {
        let t = Env::new();
        let dir = prepared(&t);
        crash(&t, point, &["delete", "crashy", "HEAD~1"]);
        // The tombstone is the commit point: the deletion completes on the next open.
        healthy(&t, &dir, point, 2);
        assert_eq!(std::fs::read_to_string(dir.join("a")).expect("a"), "two");
    }
    // A branch tip: its place among the environment's tips (what the history is read
    // from) goes to its parent, whichever step the kill interrupts.
    for point in DELETE_POINTS {
        let t = Env::new();
        let dir = prepared(&t);
        let two = t.json(&["log", "crashy", "-n", "1"])[0]["id"]
            .as_str()
            .expect("id")
            .to_owned();
        t.ok(&["checkout", "crashy", "HEAD~1"]);
        write(&dir.join("x"), "branch");
        t.ok(&["commit", "crashy", "-m", "branch"]);
        crash(&t, point, &["delete", "crashy", &two]);
        // root, one and branch.
        healthy(&t, &dir, point, 3);
    }
    {
        let point = "gc:after-record";
        let t = Env::new();
        let dir = prepared(&t);
        t.ok(&["checkout", "crashy", "HEAD~2"]);
        write(&dir.join("x"), "branch");
        t.ok(&["commit", "crashy", "-m", "branch"]);
        t.ok(&["delete", "crashy", "HEAD~1"]);
        // Free the abandoned branch's layers: its nodes are deleted one by one.
        let log = t.json(&["log", "crashy", "--leaves"]);
        for leaf in log.as_array().expect("leaves") {
            let id = leaf["id"].as_str().expect("id");
            if leaf["message"] == "two" {
                t.ok(&["delete", "crashy", id]);
            }
        }
        crash(&t, point, &["gc"]);
        // Left: "one" (its parent, the root, was deleted) and "branch".
        healthy(&t, &dir, point, 2);
    }
    {
        let point = "create:after-layer";
        let t = Env::new();
        let dir = prepared(&t);
        let other = t.path("second");
        write(&other.join("f"), "f");
        crash(&t, point, &["env", other.to_str().expect("utf8")]);
        let list = t.json(&["list"]);
        assert_eq!(list.as_array().map(Vec::len), Some(1), "{point}: {list}");
        healthy(&t, &dir, point, 3);
        // The name is free again.
        t.ok(&["env", other.to_str().expect("utf8")]);
        let _ = std::process::Command::new("umount").arg(&other).status();
    }
}

#[test]
fn import_survives_a_kill() {
    if !agentbox_testkit::tier::require_root("import_survives_a_kill") {
        return;
    }
    for point in ["import:after-stage", "import:after-nodes"] {
        let t = Env::new();
        let dir = prepared(&t);
        let bundle = t.path("crashy.bundle");
        t.ok(&["export", "crashy", "-o", bundle.to_str().expect("utf8")]);
        // Into a second home, so the nodes are new there.
        let t2 = Env::new();
        let target = t2.path("imported");
        let out = t2.run_with(
            &[
                "import",
                bundle.to_str().expect("utf8"),
                "--dir",
                target.to_str().expect("utf8"),
            ],
            &[("AGENTBOX_FAILPOINT", point)],
        );
        assert!(out.status.code().is_none(), "{point}: {}", stderr(&out));
        let fsck = t2.run(&["fsck", "--repair"]);
        assert!(fsck.status.success(), "{point}: {}", stderr(&fsck));
        t2.ok(&["gc"]);
        let fsck = t2.run(&["fsck"]);
        assert!(fsck.status.success(), "{point}: {}", stderr(&fsck));
        let list = t2.json(&["list"]);
        assert_eq!(list.as_array().map(Vec::len), Some(0), "{point}");
        // Importing again works and gives the whole history.
        let rep = t2.json(&[
            "import",
            bundle.to_str().expect("utf8"),
            "--dir",
            target.to_str().expect("utf8"),
        ]);
        assert_eq!(rep["nodes"], 3, "{point}");
        healthy(&t, &dir, point, 3);
        let _ = std::process::Command::new("umount").arg(&target).status();
    }
}
