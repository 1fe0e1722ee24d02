//! What auto-capture records while commands run (root: real boxes): a batch command's
//! writes become one node at its end, never half-written nodes in its middle; a
//! `--no-capture` command's writes become no node from either path; background authors are
//! still captured within the maximum delay, and a node taken while a batch command runs says
//! so.

use std::time::{Duration, Instant};

use crate::common::{kill_supervisors, write, Env};
use agentbox_testkit::tier::require_root;

/// Longer than the capture loop's maximum delay (10 s) under a stream of writes.
const STREAM: &str = "i=0; while [ $i -lt 130 ]; do echo $i > /workspace/w$((i % 7)); \
                      i=$((i+1)); sleep 0.1; done";

struct Boxes(Env);

impl Drop for Boxes {
    fn drop(&mut self) {
        kill_supervisors(&self.0.path("home"));
    }
}

fn setup(test: &str) -> Option<Boxes> {
    if !require_root(test) {
        return None;
    }
    let b = Boxes(Env::new());
    let proj = b.0.path("proj");
    write(&proj.join("README"), "readme\n");
    b.0.ok(&["create", "cap", "--from", proj.to_str().expect("utf-8")]);
    Some(b)
}

fn messages(env: &Env) -> Vec<String> {
    env.json(&["log", "cap"])["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["message"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_batch_command_that_writes_without_pause_makes_one_node_at_its_end() {
    let Some(b) = setup("a_batch_command_that_writes_without_pause_makes_one_node_at_its_end")
    else {
        return;
    };
    let out = b.0.run(&["exec", "cap", "--", "sh", "-c", STREAM]);
    assert!(out.status.success(), "{out:?}");
    let msgs = messages(&b.0);
    assert_eq!(msgs.len(), 2, "one node for the command: {msgs:?}");
    assert!(
        msgs[1].starts_with("sh -c "),
        "labelled with the command: {msgs:?}"
    );
    // The node holds what the command left.
    let shown = b.0.ok(&["exec", "cap", "--", "cat", "/workspace/w3"]);
    // The last of the 130 writes (129) went to w3.
    assert_eq!(shown, "129\n");
}

#[test]
fn a_no_capture_command_makes_no_node_from_either_path() {
    let Some(b) = setup("a_no_capture_command_makes_no_node_from_either_path") else {
        return;
    };
    let out =
        b.0.run(&["exec", "--no-capture", "cap", "--", "sh", "-c", STREAM]);
    assert!(out.status.success(), "{out:?}");
    // Well past the loop's quiet period after the command: still nothing.
    std::thread::sleep(Duration::from_secs(3));
    let msgs = messages(&b.0);
    assert_eq!(msgs.len(), 1, "no node from the writes: {msgs:?}");
    // The writes stay in the box, uncommitted.
    let diff = b.0.ok(&["diff", "cap"]);
    assert!(
        diff.contains("w3"),
        "the box keeps its uncommitted writes: {diff}"
    );
}

#[test]
fn a_background_author_is_captured_while_a_batch_command_runs_and_the_label_says_so() {
    let Some(b) =
        setup("a_background_author_is_captured_while_a_batch_command_runs_and_the_label_says_so")
    else {
        return;
    };
    b.0.ok(&[
        "spawn",
        "cap",
        "--",
        "sh",
        "-c",
        "while true; do date >> /workspace/agent.log; sleep 0.1; done",
    ]);
    let mut batch =
        b.0.command(&["exec", "cap", "--", "sh", "-c", "sleep 25"])
            .spawn()
            .expect("start the batch command");
    // Within the maximum delay (plus slack for a loaded machine), while the batch command
    // still runs.
    wait_until(
        "a node while the batch command runs",
        Duration::from_secs(20),
        || messages(&b.0).len() > 1,
    );
    assert!(
        batch.try_wait().expect("wait").is_none(),
        "the batch command was still running"
    );
    let msgs = messages(&b.0);
    let last = msgs.last().expect("a node");
    assert!(last.starts_with("auto: while "), "{msgs:?}");
    assert!(
        last.contains("sh -c 'sleep 25' still running"),
        "the label names the running command: {msgs:?}"
    );
    // The box was thawed after the node: the author goes on writing.
    let before = b.0.ok(&[
        "exec",
        "--no-capture",
        "cap",
        "--",
        "wc",
        "-l",
        "/workspace/agent.log",
    ]);
    std::thread::sleep(Duration::from_millis(600));
    let after = b.0.ok(&[
        "exec",
        "--no-capture",
        "cap",
        "--",
        "wc",
        "-l",
        "/workspace/agent.log",
    ]);
    assert_ne!(before, after, "the box's processes run again");
    let _ = batch.kill();
    let _ = batch.wait();
}
