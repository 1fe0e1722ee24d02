//! The node at the end of a command in a quiet box (root: real boxes, the `layers` store
//! backend): the box's working files become the node's layer by a rename (the very inodes
//! the command wrote), the box runs on over the node with nothing lost, and a box that is
//! not quiet (a background process, files left in its `/tmp`) keeps the copy, its process
//! and its files.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use crate::common::{kill_supervisors, supervisor_pid, write, Env};
use agentbox_testkit::tier::require_root;

struct Boxes(Env);

impl Drop for Boxes {
    fn drop(&mut self) {
        kill_supervisors(&self.0.path("home"));
    }
}

/// A box `q` of a small project, or `None` when the test cannot run here (no root, or a
/// store that is not on the `layers` backend).
fn setup(test: &str) -> Option<Boxes> {
    if !require_root(test) {
        return None;
    }
    let b = Boxes(Env::new());
    let proj = b.0.path("proj");
    write(&proj.join("README"), "readme\n");
    b.0.ok(&["create", "q", "--from", proj.to_str().expect("utf-8")]);
    let config = std::fs::read(b.0.path("home/store/store.json")).expect("store.json");
    let config: serde_json::Value = serde_json::from_slice(&config).expect("JSON");
    let backend = config["backend"].as_str().unwrap_or_default().to_owned();
    if backend != "layers" {
        // The temporary home's filesystem decides; CI runs it on ext4.
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: the store's backend is {backend:?}, not layers"
        );
        eprintln!("skipping {test}: the store's backend is {backend:?}, not layers");
        return None;
    }
    Some(b)
}

impl Boxes {
    fn head(&self) -> String {
        self.0.json(&["log", "q"])["head"]
            .as_str()
            .expect("a HEAD")
            .to_owned()
    }

    /// Path `rel` (below the box's root) in the layer of node `id`, on the host.
    fn in_layer(&self, id: &str, rel: &str) -> PathBuf {
        self.0.path("home/store/layers").join(id).join(rel)
    }

    fn sh(&self, script: &str) -> String {
        self.0.ok(&["exec", "q", "--", "sh", "-c", script])
    }
}

/// Inode number of `/workspace/d/f` as the box sees it, after writing `text` there.
const WRITE: &str =
    "mkdir -p /workspace/d && printf \"$0\" > /workspace/d/f && stat -c %i /workspace/d/f";

fn write_in_box(b: &Boxes, text: &str) -> u64 {
    let out = b.0.ok(&["exec", "q", "--", "sh", "-c", WRITE, text]);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("an inode: {out:?}"))
}

#[test]
fn a_quiet_box_hands_its_working_files_to_the_node() {
    let Some(b) = setup("a_quiet_box_hands_its_working_files_to_the_node") else {
        return;
    };
    let before = b.head();
    let ino = write_in_box(&b, "one");
    let first = b.head();
    assert_ne!(first, before, "the command made a node");
    let layer_file = b.in_layer(&first, "workspace/d/f");
    let meta = std::fs::metadata(&layer_file).expect("the file in the node's layer");
    assert_eq!(
        meta.ino(),
        ino,
        "the node's layer holds the file the command wrote (renamed, not copied)"
    );
    // The box runs on over the node: the file is there, and writing it again makes a
    // new node without touching the first one's layer.
    assert_eq!(b.sh("cat /workspace/d/f"), "one");
    write_in_box(&b, "two");
    let second = b.head();
    assert_ne!(second, first);
    assert_eq!(std::fs::read_to_string(&layer_file).expect("read"), "one");
    assert_eq!(b.sh("cat /workspace/d/f"), "two");
    // Both states are there to go back to.
    b.0.ok(&["checkout", "q", &first]);
    assert_eq!(b.sh("cat /workspace/d/f"), "one");
    assert_eq!(b.head(), first, "reading made no node");
}

#[test]
fn a_busy_box_keeps_its_processes_and_scratch_files_and_copies_instead() {
    let Some(b) = setup("a_busy_box_keeps_its_processes_and_scratch_files_and_copies_instead")
    else {
        return;
    };
    // A file left in /tmp: a stop would lose it, so the node is copied.
    b.sh("echo kept > /tmp/scratch");
    let ino = write_in_box(&b, "one");
    let copied = b.in_layer(&b.head(), "workspace/d/f");
    assert_ne!(
        std::fs::metadata(&copied)
            .expect("the file in the layer")
            .ino(),
        ino,
        "copied, the box was not stopped"
    );
    assert_eq!(b.sh("cat /tmp/scratch"), "kept\n");
    b.sh("rm /tmp/scratch");

    // A background process: it keeps running and the node is copied.
    b.0.ok(&["spawn", "q", "--", "sleep", "4711"]);
    let ino = write_in_box(&b, "two");
    let copied = b.in_layer(&b.head(), "workspace/d/f");
    assert_ne!(
        std::fs::metadata(&copied)
            .expect("the file in the layer")
            .ino(),
        ino,
        "copied while a background process ran"
    );
    let ps = b.0.json(&["ps", "q"]);
    assert!(
        ps.to_string().contains("4711"),
        "the background process still runs: {ps}"
    );
}

#[test]
fn a_handoff_cut_short_loses_nothing() {
    // Before the commit point the files go back to the box; after it the box runs over
    // the node with a fresh working layer.
    for point in ["commit:after-handover", "commit:after-head"] {
        let Some(b) = setup("a_handoff_cut_short_loses_nothing") else {
            return;
        };
        let before = b.head();
        b.0.ok(&["stop", "q"]);
        let out =
            b.0.run_with(&["start", "q"], &[("AGENTBOX_FAILPOINT", point)]);
        assert!(out.status.success(), "{point}: {out:?}");
        let supervisor = supervisor_pid(&b.0.path("home"), "q");
        // The supervisor dies at the failpoint, and the command's reply with it.
        let out = b.0.run(&[
            "exec",
            "q",
            "--",
            "sh",
            "-c",
            "mkdir -p /workspace/d && echo kept > /workspace/d/f",
        ]);
        assert!(
            !out.status.success(),
            "{point}: the supervisor aborted: {out:?}"
        );
        // The next command starts the box again (once the dead supervisor is reaped: until
        // then the command finds it and fails).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while supervisor.is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
            && !b.0.run(&["exec", "q", "--", "true"]).status.success()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{point}: no box again"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        // The next command starts the box again: the file is there, in the box and, once
        // committed, in the history.
        assert_eq!(b.sh("cat /workspace/d/f"), "kept\n", "{point}");
        b.sh("echo more > /workspace/more");
        let log = b.0.json(&["log", "q"]);
        let head = b.head();
        assert_ne!(head, before, "{point}: {log}");
        let diff = b.0.ok(&["diff", "q", &before, &head]);
        assert!(diff.contains("workspace/d/f"), "{point}: {diff}");
        assert!(diff.contains("workspace/more"), "{point}: {diff}");
        assert!(
            !diff.contains("README"),
            "{point}: nothing else changed: {diff}"
        );
        b.0.ok(&["fsck"]);
    }
}
