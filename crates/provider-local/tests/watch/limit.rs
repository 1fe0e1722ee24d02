//! The watch limit, in a user namespace with its own, tiny, limit.

use std::process::Command;

use super::*;

const LIMIT_CHILD: &str = "AGENTBOX_WATCH_LIMIT_CHILD";

/// Runs `watch_limit_child` in a new user namespace whose inotify watch limit is 10.
#[test]
fn hitting_the_watch_limit_names_the_sysctl() {
    let test = "hitting_the_watch_limit_names_the_sysctl";
    let usable = Command::new("unshare")
        .args(["--user", "--map-root-user", "true"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !usable {
        tier::skip(test, "needs `unshare --user` (util-linux, user namespaces)");
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user"])
        .arg(exe)
        .args([
            "--exact",
            "limit::watch_limit_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(LIMIT_CHILD, "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "child did not run:\n{stdout}\n{stderr}"
    );
}

#[test]
fn watch_limit_child() {
    if std::env::var_os(LIMIT_CHILD).is_none() {
        return; // runs only inside `hitting_the_watch_limit_names_the_sysctl`
    }
    fs_err::write("/proc/sys/user/max_inotify_watches", "10").expect("lower the limit");
    let t = tempdir();
    let root = t.path();
    for i in 0..20 {
        fs_err::create_dir(root.join(format!("d{i}"))).expect("mkdir");
    }
    let err = Watcher::new(root, IgnoreSet::none()).expect_err("over the limit");
    assert!(matches!(err, WatchError::WatchLimit { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("fs.inotify.max_user_watches"), "{message}");
    assert!(message.contains("backstop scan"), "{message}");

    // Within the limit at start, over it later: `poll` reports it.
    let t = tempdir();
    let root = t.path();
    let mut w = Watcher::new(root, IgnoreSet::none()).expect("one watch");
    for i in 0..20 {
        fs_err::create_dir(root.join(format!("d{i}"))).expect("mkdir");
    }
    let err = w.poll(EXPECTING).expect_err("over the limit");
    assert!(matches!(err, WatchError::WatchLimit { .. }), "{err:?}");
    // The fallback works without any watch.
    fingerprint(root, &IgnoreSet::none()).expect("fingerprint");
}
