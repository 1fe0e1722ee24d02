//! A session outlives its terminal: killing the attached client, a checkout (supervised
//! sessions relaunched), and an attach without a terminal.

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::kill9;

use super::*;

#[test]
fn killing_the_attached_command_leaves_the_session_running() {
    let Some(f) = Fixture::new(
        "killing_the_attached_command_leaves_the_session_running",
        "sess6",
    ) else {
        return;
    };
    f.start(
        "survivor",
        &[],
        &[
            "sh",
            "-c",
            "echo up; while read x; do echo \"got:$x\"; done",
        ],
    );
    let mut t = f.attach("survivor");
    t.expect("up");
    f.wait_for("survivor", "one client", |s| s["clients"] == 1);
    kill9(t.child.id() as i32);
    let _ = t.wait();
    drop(t);
    f.wait_for("survivor", "running with no client", |s| {
        s["state"] == "running" && s["clients"] == 0
    });
    let mut again = f.attach("survivor");
    again.type_(b"after\r");
    again.expect("got:after");
    assert_eq!(again.detach(), 0);
}

#[test]
fn a_checkout_kills_sessions_and_supervised_ones_are_relaunched() {
    let Some(f) = Fixture::new(
        "a_checkout_kills_sessions_and_supervised_ones_are_relaunched",
        "sess7",
    ) else {
        return;
    };
    f.start("watched", &[], &["sleep", "1000"]);
    f.start("alone", &[], &["sleep", "1001"]);
    f.start(
        "agent",
        &["--supervise"],
        &["sh", "-c", "echo launched-$((40+2)); sleep 1002"],
    );
    let mut watched = f.attach("watched");
    f.wait_for("watched", "one client", |s| s["clients"] == 1);
    let mut agent = f.attach("agent");
    agent.expect("launched-42");
    f.env.ok(&["checkout", f.name, "HEAD"]);
    // The attached one ends as a command a checkout killed does.
    assert_eq!(watched.wait(), 137);
    watched.expect_printed("killed by a checkout");
    // The one nobody watched stays listed, killed, until a prune.
    f.wait_for("alone", "killed by the checkout", |s| {
        s["state"] == "exited" && s["killed_by_checkout"] == true && s["status"] == 137
    });
    // The supervised one came back, and its terminal stayed attached.
    f.wait_for("agent", "relaunched", |s| {
        s["state"] == "running" && s["launches"] == 2 && s["clients"] == 1
    });
    agent.expect_printed("relaunching");
    let printed = |t: &Term| {
        String::from_utf8_lossy(&t.seen)
            .matches("launched-42")
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while printed(&agent) < 2 {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            String::from_utf8_lossy(&agent.seen)
        );
        agent.pump(Duration::from_millis(50));
    }
    assert_eq!(agent.detach(), 0);
    let pruned = f.env.run(&["sessions", f.name, "--prune"]);
    assert!(pruned.status.success());
    let names: Vec<String> = f
        .sessions()
        .iter()
        .map(|s| s["name"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(names, ["agent"]);
}

#[test]
fn without_a_terminal_attach_streams_output_and_forwards_stdin_until_its_end() {
    let Some(f) = Fixture::new(
        "without_a_terminal_attach_streams_output_and_forwards_stdin_until_its_end",
        "sess8",
    ) else {
        return;
    };
    f.start(
        "plain",
        &[],
        &[
            "sh",
            "-c",
            "echo first; while read x; do echo \"got:$x\"; done",
        ],
    );
    let mut child = f
        .env
        .command(&["attach", f.name, "plain"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("attach");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"piped\n")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("first") && text.contains("got:piped"),
        "{text}"
    );
    // The end of its input detached it; the session goes on.
    f.wait_for("plain", "running with no client", |s| {
        s["state"] == "running" && s["clients"] == 0
    });
    // Names are unique; the default is the command's name.
    let taken = f.env.run(&[
        "session", "start", f.name, "-d", "--name", "plain", "--", "true",
    ]);
    assert_eq!(taken.status.code(), Some(4));
    f.env
        .ok(&["session", "start", f.name, "-d", "--", "sleep", "1000"]);
    f.env
        .ok(&["session", "start", f.name, "-d", "--", "sleep", "1000"]);
    let names: Vec<String> = f
        .sessions()
        .iter()
        .map(|s| s["name"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(names, ["plain", "sleep", "sleep-2"]);
    let table = f.env.ok(&["sessions", f.name]);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.contains("sleep-2") && table.contains("running"),
        "{table}"
    );
    // Several sessions: attach needs a name.
    let which = f.env.run(&["attach", f.name]);
    assert_eq!(which.status.code(), Some(2), "{which:?}");
}
