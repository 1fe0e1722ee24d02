//! A box making directories without end cannot take the host's inotify watches (every
//! watch of a supervisor is charged to its user: host root for a root box), nor keep its
//! supervisor from answering `status` and `stop`; its changes are still captured, by
//! scanning once the watcher's cap is reached.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{as_nobody, boxed, GitBox};
use crate::common::{code, stderr, supervisor_pid};

/// A guard against a hang only (a stuck supervisor fails the test instead of stalling the
/// suite); nothing asserts how long anything took.
const HANG_GUARD: Duration = Duration::from_secs(600);

/// The inotify watches process `pid` holds: the `inotify wd:` lines of its descriptors'
/// `fdinfo`, each inotify instance counted once. A watcher's descriptor is duplicated for
/// waiting on, and both list the same watches; read a moment apart while watches are
/// added, one list holds the other, so such lists count as one instance (the larger).
///
/// The descriptors are read one after the other: a watcher dropped after its descriptor
/// was read and a new one made before a later, higher-numbered descriptor is (the old
/// numbers may be taken meanwhile) would count as two instances that never lived at once.
/// So a reading counts only when the process's inotify descriptors are the same after it
/// as before it; otherwise it is read again.
fn watches_of(pid: i32) -> usize {
    for _ in 0..100 {
        let before = inotify_fds(pid);
        let count = read_watches(pid);
        if before == inotify_fds(pid) {
            return count;
        }
    }
    panic!("the inotify descriptors of {pid} changed during every reading");
}

/// The descriptors of `pid` that are inotify instances.
fn inotify_fds(pid: i32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let mut fds: Vec<String> = dir
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == "anon_inode:inotify")
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    fds.sort();
    fds
}

/// One reading of [`watches_of`].
fn read_watches(pid: i32) -> usize {
    use std::collections::HashSet;
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return 0;
    };
    let mut instances: Vec<HashSet<String>> = Vec::new();
    for e in dir.flatten() {
        let Ok(info) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let lines: HashSet<String> = info
            .lines()
            .filter(|l| l.starts_with("inotify wd:"))
            .map(str::to_owned)
            .collect();
        if lines.is_empty() {
            continue;
        }
        match instances
            .iter_mut()
            .find(|i| i.is_subset(&lines) || lines.is_subset(i))
        {
            Some(i) if i.len() < lines.len() => *i = lines,
            Some(_) => {}
            None => instances.push(lines),
        }
    }
    instances.iter().map(HashSet::len).sum()
}

/// Waits for `child`, sampling the supervisor's watches meanwhile (none for `pid` 0);
/// (output, most watches seen). Its output is read as it comes: a pipe that fills up would
/// stall it.
fn wait_sampling(mut child: Child, pid: i32) -> (Output, usize) {
    use std::io::Read;
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut v);
            }
            v
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let mut most = 0;
    loop {
        if pid != 0 {
            most = most.max(watches_of(pid));
        }
        if let Some(status) = child.try_wait().expect("wait") {
            let output = Output {
                status,
                stdout: out.join().expect("stdout"),
                stderr: err.join().expect("stderr"),
            };
            return (output, most);
        }
        if start.elapsed() > HANG_GUARD {
            let _ = child.kill();
            panic!("the box's command hung");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `cmd` to completion under the hang guard.
fn finish(mut cmd: Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_sampling(child, 0).0
}

/// The number of directories that is sure to be over the cap here.
fn over_the_cap() -> usize {
    agentbox_provider_local::watch::max_watches() + 5000
}

/// Makes the directories in box `name`, then checks the watches, `status`, `stop` and the
/// captured node. `agentbox` runs through `cmd` (root: the test's home; rootless: nobody).
fn directories_without_end(home: &std::path::Path, name: &str, cmd: &dyn Fn(&[&str]) -> Command) {
    let cap = agentbox_provider_local::watch::max_watches();
    let n = over_the_cap();
    let out = finish(cmd(&["exec", name, "--", "true"]));
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let pid = supervisor_pid(home, name).expect("the supervisor runs");
    let head = |what: &str| -> String {
        let out = finish(cmd(&["log", name, "--json"]));
        let log: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("log {what}: {e}: {}", stderr(&out)));
        log["head"].as_str().expect("head").to_owned()
    };
    let before = head("before");
    let script = format!(
        "mkdir -p /workspace/many && cd /workspace/many && seq 1 {n} | xargs mkdir && echo x > marker && echo made"
    );
    let child = cmd(&["exec", name, "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let (out, most) = wait_sampling(child, pid);
    assert_eq!(
        (code(&out), String::from_utf8_lossy(&out.stdout).as_ref()),
        (Some(0), "made\n"),
        "{}",
        stderr(&out)
    );
    let after = watches_of(pid);
    assert!(
        most <= cap && after <= cap,
        "the supervisor held {most} watches (now {after}) for {n} directories; the cap is {cap}"
    );
    // The supervisor still answers, and the change was captured (by the check after the
    // command, which walked the layer: the watcher had given up).
    let status = finish(cmd(&["status", name]));
    assert_eq!(code(&status), Some(0), "{}", stderr(&status));
    let after = head("after");
    let diff = finish(cmd(&["diff", name, &before, &after]));
    let text = String::from_utf8_lossy(&diff.stdout);
    let has = |dir: String| text.lines().any(|l| l.trim_end().ends_with(&dir));
    assert!(
        has("many/1".into()) && has(format!("many/{n}")),
        "the nodes made since {before} do not hold the directories: {}{}; the command said: {}",
        &text[..text.len().min(2000)],
        stderr(&diff),
        stderr(&out)
    );
    let stop = finish(cmd(&["stop", name]));
    assert_eq!(code(&stop), Some(0), "{}", stderr(&stop));
}

/// `agentbox ARGS` as `nobody` with agentbox home `home`, not started yet (as
/// [`as_nobody`], which copied the binary there).
fn nobody_command(home: &std::path::Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(home.join("agentbox"))
        .args(args)
        .env("AGENTBOX_HOME", home)
        .env("HOME", home)
        .current_dir("/");
    cmd
}

#[test]
fn a_box_making_directories_without_end_cannot_take_the_hosts_watches() {
    let Some(s) = boxed(
        "a_box_making_directories_without_end_cannot_take_the_hosts_watches",
        "many",
        &[],
    ) else {
        return;
    };
    let home = s.env.path("home");
    directories_without_end(&home, "many", &|args| s.env.command(args));
}

#[test]
fn a_box_making_directories_without_end_cannot_take_the_hosts_watches_rootless() {
    let Some(g) = GitBox::new(
        "a_box_making_directories_without_end_cannot_take_the_hosts_watches_rootless",
        true,
    ) else {
        return;
    };
    let home = g.nobody.clone().expect("rootless");
    // Copies the binary where `nobody` can run it.
    let out = as_nobody(&home, &["exec", "g", "--", "true"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    directories_without_end(&home, "g", &|args| nobody_command(&home, args));
}
