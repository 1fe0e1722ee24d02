//! Auto-capture: commands and background writes become nodes, whole, however the tree was
//! replaced; a capture that fails says so.

use std::time::{Duration, Instant};

use crate::common::{code, stderr};
use agentbox_testkit::basefix::BaseFixture;
use agentbox_testkit::tier::require_root;

use super::*;

#[test]
fn commands_that_change_something_become_nodes() {
    let Some((b, proj)) = boxes("commands_that_change_something_become_nodes") else {
        return;
    };
    b.create("hist", &proj, &[]);
    assert_eq!(b.node_count("hist"), 1);
    b.sh_ok("hist", "true");
    assert_eq!(
        b.node_count("hist"),
        1,
        "a command that changed nothing makes no node"
    );
    b.sh_ok(
        "hist",
        "mkdir -p /var/cache/x /root/.cache && echo c > /var/cache/x/f && echo c > /root/.cache/f",
    );
    assert_eq!(
        b.node_count("hist"),
        1,
        "changes to ignored paths alone make no node"
    );
    b.sh_ok("hist", "echo v2 > /workspace/README");
    b.sh_ok(
        "hist",
        "mkdir -p /usr/local/agentbox-test-tool && echo bin > /usr/local/agentbox-test-tool/run",
    );
    let log = b.env.json(&["log", "hist"]);
    let nodes = log["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3);
    let text = serde_json::to_string(&log).expect("json");
    assert!(
        text.contains("sh -c 'echo v2 > /workspace/README'"),
        "{text}"
    );
    // Roll back one step: the system install is gone, the README edit stays.
    b.env.ok(&["undo", "hist"]);
    let out = b.sh_ok(
        "hist",
        "cat README; test -e /usr/local/agentbox-test-tool/run && echo tool || echo notool",
    );
    assert_eq!(out, "v2\nnotool\n");
    b.env.ok(&["undo", "hist"]);
    assert_eq!(b.sh_ok("hist", "cat README"), "readme\n");
    // --no-capture.
    b.env.ok(&[
        "exec",
        "hist",
        "--no-capture",
        "--",
        "touch",
        "/workspace/x",
    ]);
    assert_eq!(b.node_count("hist"), 3);
    // A manual commit through the running box, and a diff against the working tree.
    b.env.ok(&["commit", "hist", "-m", "-m"]);
    let log = serde_json::to_string(&b.env.json(&["log", "hist"])).expect("json");
    assert!(log.contains("\"message\":\"-m\""), "{log}");
}

#[test]
fn background_changes_are_captured_once_they_settle() {
    let Some((b, proj)) = boxes("background_changes_are_captured_once_they_settle") else {
        return;
    };
    b.create("bg", &proj, &[]);
    // Only ignored paths: no node, even after the quiet period has long passed.
    b.env.ok(&[
        "spawn",
        "bg",
        "--",
        "sh",
        "-c",
        "mkdir -p /var/cache/t && echo x > /var/cache/t/f; sleep 1000",
    ]);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(b.node_count("bg"), 1, "{:?}", messages(&b, "bg"));
    // A burst of writes, then quiet: one node, labelled with the background command.
    b.env.ok(&[
        "spawn",
        "bg",
        "--",
        "sh",
        "-c",
        "for i in 1 2 3; do echo $i >> /workspace/burst; sleep 0.1; done; sleep 1000",
    ]);
    // (A slow machine may split the burst over two nodes; the last one holds it whole.)
    let head_shows = |path: &str| b.env.ok(&["show", "bg", "HEAD"]).contains(path);
    wait_until("a node for the burst", || head_shows("workspace/burst"));
    let msgs = messages(&b, "bg");
    assert!(
        msgs.last().is_some_and(|m| m.starts_with("auto: while ")),
        "{msgs:?}"
    );
    // A stream that never settles is still captured: the maximum delay bounds it.
    b.env.ok(&[
        "spawn",
        "bg",
        "--",
        "sh",
        "-c",
        "while true; do date >> /workspace/stream; sleep 0.1; done",
    ]);
    wait_until("a node while the stream continues", || {
        head_shows("workspace/stream")
    });
}

/// A background process in box `name` writes `/workspace/FILE`; wait for the node that
/// holds it (auto-capture's promise: within its 10 s maximum delay; the wait allows twice
/// that). The supervisor's log is in the failure message.
fn background_write_is_captured(b: &Boxes, name: &str, file: &str, after: &str) {
    b.env.ok(&[
        "spawn",
        name,
        "--",
        "sh",
        "-c",
        &format!("echo bg > /workspace/{file}; sleep 1000"),
    ]);
    let deadline = Instant::now() + Duration::from_secs(25);
    while !b
        .env
        .ok(&["show", name, "HEAD"])
        .contains(&format!("workspace/{file}"))
    {
        assert!(
            Instant::now() < deadline,
            "a background write after {after} was never captured\nstatus: {}\nsupervisor log:\n{}",
            b.env.ok(&["status", name]),
            std::fs::read_to_string(b.env.path(&format!("home/boxes/{name}/supervisor.log")))
                .unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let health = &b.env.json(&["status", name])["box"]["capture_state"];
    assert_eq!(health["mode"], "watching", "after {after}: {health}");
    assert!(health["problem"].is_null(), "after {after}: {health}");
}

/// Every way the box's working tree is replaced — checkout, undo, checkout that keeps the
/// processes, a restart after the supervisor was killed, a stop and start — leaves
/// auto-capture watching the tree the box writes to, on both backends.
#[test]
fn background_writes_are_captured_however_the_tree_was_replaced() {
    if !require_root("background_writes_are_captured_however_the_tree_was_replaced") {
        return;
    }
    for fs in [
        agentbox_testkit::loopfs::LoopFs::btrfs(512 << 20),
        agentbox_testkit::loopfs::LoopFs::ext4(512 << 20),
    ] {
        let Some(fs) = fs else {
            return;
        };
        let b = Boxes::new();
        std::os::unix::fs::symlink(fs.path(), b.env.path("home")).expect("symlink home");
        let proj = project(b.env.home.path());
        b.create("tree", &proj, &[]);
        let backend = b.env.json(&["status", "tree"])["backend"].clone();
        b.sh_ok("tree", "echo v2 > /workspace/README");
        b.sh_ok("tree", "echo v3 > /workspace/README");
        b.env.ok(&["checkout", "tree", "HEAD~1"]);
        background_write_is_captured(&b, "tree", "bg1", &format!("a checkout ({backend})"));
        b.env.ok(&["undo", "tree"]);
        background_write_is_captured(&b, "tree", "bg2", &format!("an undo ({backend})"));
        b.env
            .ok(&["checkout", "tree", "HEAD~1", "--keep-processes"]);
        background_write_is_captured(
            &b,
            "tree",
            "bg3",
            &format!("a checkout keeping the processes ({backend})"),
        );
        let pid = b.supervisor_pid("tree").expect("supervisor pid");
        crate::common::kill9(pid);
        wait_until("the supervisor to be gone", || {
            std::fs::read_dir(format!("/proc/{pid}/task")).map_or(true, |d| d.count() == 0)
        });
        b.env.ok(&["start", "tree"]);
        background_write_is_captured(
            &b,
            "tree",
            "bg4",
            &format!("a restart after a killed supervisor ({backend})"),
        );
        b.env.ok(&["stop", "tree"]);
        b.env.ok(&["start", "tree"]);
        background_write_is_captured(&b, "tree", "bg5", &format!("a stop and start ({backend})"));
        let log = std::fs::read_to_string(b.env.path("home/boxes/tree/supervisor.log"))
            .unwrap_or_default();
        assert!(!log.contains("auto-capture:"), "{backend}: {log}");
        b.env.ok(&["destroy", "tree"]);
    }
}

/// Removing a large base directory makes overlayfs copy up and whiteout its entries while
/// the watcher walks them: a whiteout found where a directory was is not an error, and the
/// watcher keeps watching.
#[test]
fn replacing_a_base_directory_keeps_the_watcher() {
    let Some((b, proj)) = boxes("replacing_a_base_directory_keeps_the_watcher") else {
        return;
    };
    let base = BaseFixture::new();
    let f = base.display();
    b.create("rmbase", &proj, &[]);
    b.env.ok(&["start", "rmbase"]);
    b.env.ok(&[
        "spawn",
        "rmbase",
        "--",
        "sh",
        "-c",
        &format!("rm -rf {f}/tree; mkdir {f}/tree; echo mine > {f}/tree/only; sleep 1000"),
    ]);
    let want = format!("{}/tree/only", f.trim_start_matches('/'));
    wait_until("a node for the replaced base directory", || {
        b.env.ok(&["show", "rmbase", "HEAD"]).contains(&want)
    });
    let health = &b.env.json(&["status", "rmbase"])["box"]["capture_state"];
    assert_eq!(health["mode"], "watching", "{health}");
    let log =
        std::fs::read_to_string(b.env.path("home/boxes/rmbase/supervisor.log")).unwrap_or_default();
    assert!(!log.contains("auto-capture:"), "{log}");
    background_write_is_captured(&b, "rmbase", "after", "a replaced base directory");
}

/// A capture that cannot be made (the store's disk is full) says so: on the command's
/// stderr, in the supervisor's log and in `status`; once there is room again, capture
/// works again.
#[test]
fn a_capture_that_fails_says_so() {
    if !require_root("a_capture_that_fails_says_so") {
        return;
    }
    let Some(fs) = agentbox_testkit::loopfs::LoopFs::ext4(128 << 20) else {
        return;
    };
    let b = Boxes::new();
    std::os::unix::fs::symlink(fs.path(), b.env.path("home")).expect("symlink home");
    let proj = project(b.env.home.path());
    b.create("full", &proj, &[]);
    // Copying, not handing the layer over (which needs no room) as a quiet box's node does.
    b.env.ok(&["stop", "full"]);
    let out = b
        .env
        .run_with(&["start", "full"], &[("AGENTBOX_QUIET_HANDOFF", "0")]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    // The write fits; a second copy of it (the node) does not.
    let out = b.env.run(&[
        "exec",
        "full",
        "--",
        "sh",
        "-c",
        "head -c 70000000 /dev/urandom > /workspace/big",
    ]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("not recorded as a node"), "{err}");
    let health = &b.env.json(&["status", "full"])["box"]["capture_state"];
    assert_eq!(health["mode"], "failing", "{health}");
    assert!(
        health["problem"]
            .as_str()
            .is_some_and(|p| p.contains("space")),
        "{health}"
    );
    let human = b.env.ok(&["status", "full"]);
    assert!(human.contains("FAILING"), "{human}");
    let log =
        std::fs::read_to_string(b.env.path("home/boxes/full/supervisor.log")).unwrap_or_default();
    assert!(log.contains("auto-capture"), "{log}");
    // Room again: the next change is captured and the state recovers.
    b.sh_ok("full", "rm /workspace/big; echo small > /workspace/small");
    assert!(b
        .env
        .ok(&["show", "full", "HEAD"])
        .contains("workspace/small"));
    background_write_is_captured(&b, "full", "later", "a full disk was freed");
}

/// The check after each command trusts the layer's watcher once it has looked at the whole
/// layer (a box that wrote thousands of files then looks at a few paths per command). Every
/// command's node must still hold everything it changed, and nothing may be left
/// uncommitted: new trees, removed and moved trees, a directory replaced by a symlink, a
/// file written through a shared mapping that a background process holds (which raises no
/// event), and a burst of events that overflows the watcher's queue.
#[test]
fn every_command_is_captured_whole_when_the_check_trusts_the_watcher() {
    let Some((b, proj)) =
        boxes("every_command_is_captured_whole_when_the_check_trusts_the_watcher")
    else {
        return;
    };
    b.create("jr", &proj, &[]);
    let exec = |script: &str| b.env.ok(&["exec", "jr", "--", "sh", "-c", script]);
    let changed = |a: &str, z: &str| -> Vec<String> {
        b.env
            .json(&["diff", "jr", a, z])
            .as_array()
            .expect("changes")
            .iter()
            .map(|c| c["path"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    let nothing_left = |after: &str| {
        let left = b.env.json(&["diff", "jr", "HEAD"]);
        assert_eq!(
            left,
            serde_json::json!([]),
            "left uncommitted after {after}\nsupervisor log:\n{}",
            std::fs::read_to_string(b.env.path("home/boxes/jr/supervisor.log")).unwrap_or_default()
        );
    };
    // Thousands of files, then commands that change one thing each.
    exec("mkdir -p /workspace/big && cd /workspace/big && for d in $(seq 1 40); do mkdir $d; for f in $(seq 1 50); do echo $d$f > $d/$f; done; done");
    nothing_left("the big tree");
    exec("echo one > /workspace/one");
    nothing_left("one file");
    let step = |what: &str, script: &str, expect: &[&str]| {
        exec(script);
        let took = changed("HEAD~1", "HEAD");
        for p in expect {
            assert!(
                took.iter().any(|t| t == p),
                "{what}: {p} missing from the node: {took:?}"
            );
        }
        nothing_left(what);
    };
    step("a rewrite", "echo two > /workspace/one", &["workspace/one"]);
    step(
        "a removed tree",
        "rm -r /workspace/big/7",
        &["workspace/big/7"],
    );
    step(
        "a moved tree",
        "mv /workspace/big/8 /workspace/moved && echo x >> /workspace/moved/3",
        &["workspace/big/8", "workspace/moved/3"],
    );
    step(
        "a tree made in one go",
        "mkdir -p /workspace/new/a/b && echo deep > /workspace/new/a/b/c",
        &["workspace/new/a/b/c"],
    );
    step(
        "a directory replaced by a symlink",
        "rm -r /workspace/big/9 && ln -s /etc /workspace/big/9",
        &["workspace/big/9"],
    );
    step(
        "a hard link",
        "ln /workspace/big/10/1 /workspace/big/10/linked && echo more >> /workspace/big/10/1",
        &["workspace/big/10/linked", "workspace/big/10/1"],
    );
    // A background process maps a file shared and writable, closes its descriptor, and
    // writes through the mapping whenever a command asks (no inotify event).
    exec("head -c 4096 /dev/zero > /workspace/db");
    let writer = "import mmap, os, time\n\
        f = open('/workspace/db', 'r+b')\n\
        m = mmap.mmap(f.fileno(), 0)\n\
        f.close()\n\
        i = 0\n\
        while True:\n\
        \x20   if os.path.exists('/tmp/go'):\n\
        \x20       i += 1\n\
        \x20       m[0:8] = b'%08d' % i\n\
        \x20       m.flush()\n\
        \x20       os.unlink('/tmp/go')\n\
        \x20   time.sleep(0.02)\n";
    exec(&format!("cat > /tmp/writer.py <<'EOF'\n{writer}EOF"));
    b.env
        .ok(&["spawn", "jr", "--", "python3", "/tmp/writer.py"]);
    for _ in 0..3 {
        step(
            "a write through a shared mapping",
            "touch /tmp/go; while [ -e /tmp/go ]; do sleep 0.02; done",
            &["workspace/db"],
        );
    }
    // With nobody asking: the backstop scan looks at the files the box holds, and the write
    // through the mapping becomes a node of its own.
    let before = b.node_count("jr");
    exec("touch /tmp/go");
    wait_until(
        "a node for a write through a mapping, with no command",
        || b.node_count("jr") > before,
    );
    assert!(changed("HEAD~1", "HEAD")
        .iter()
        .any(|p| p == "workspace/db"));
    nothing_left("a write through a mapping, with no command");
    // More events at once than the kernel queues (16384 by default): events are lost, so
    // the next check looks at everything again.
    step(
        "a burst that overflows the queue",
        "mkdir /workspace/burst && cd /workspace/burst && seq 1 12000 | xargs touch && seq 1 12000 | xargs chmod 600",
        &["workspace/burst/11999"],
    );
    step(
        "one file after the burst",
        "echo three > /workspace/one",
        &["workspace/one"],
    );
}
