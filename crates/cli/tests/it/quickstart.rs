//! `scripts/quickstart` runs its demo to the end with the binary under test (root: real
//! boxes), says what an agentbox commit is, and leaves no box behind.

use std::process::Command;

use crate::common::stderr;
use agentbox_testkit::tier::require_root;

#[test]
fn the_quickstart_demo_explains_snapshots_and_leaves_nothing_running() {
    if !require_root("the_quickstart_demo_explains_snapshots_and_leaves_nothing_running") {
        return;
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/quickstart");
    let out = Command::new("bash")
        .arg(&script)
        .env("AGENTBOX_BIN", env!("CARGO_BIN_EXE_agentbox"))
        .output()
        .expect("run the quickstart");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let demo = stdout
        .split("the demo's files are in ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(std::path::PathBuf::from);
    let boxes_left = demo.as_ref().map(|d| {
        std::fs::read_dir(d.join("home/boxes"))
            .map(|r| r.count())
            .unwrap_or(0)
    });
    if let Some(d) = &demo {
        let _ = std::fs::remove_dir_all(d);
    }
    assert!(out.status.success(), "{stdout}\n{}", stderr(&out));
    assert!(demo.is_some(), "the end says where the demo is: {stdout}");
    // `status` after `agentbox commit`: the box's edit is still not a git commit, and says so.
    assert!(
        stdout.contains("1 path not committed to git") && stdout.contains("are not git commits"),
        "{stdout}"
    );
    assert_eq!(
        boxes_left,
        Some(0),
        "the demo's box was destroyed: {stdout}"
    );
}
