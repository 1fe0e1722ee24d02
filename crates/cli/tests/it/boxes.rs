//! Boxes end to end, with the real binary, real namespaces, overlays and processes (root).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{as_nobody, code, git, kill_supervisors, stderr, supervisor_pid, write, Env};
use agentbox_testkit::basefix::BaseFixture;
use agentbox_testkit::tier::require_root;

/// A temporary home whose box supervisors are killed when the test ends (which, through
/// the parent-death signals, ends every box process too).
struct Boxes {
    env: Env,
}

impl Boxes {
    fn new() -> Boxes {
        Boxes { env: Env::new() }
    }

    fn create(&self, name: &str, from: &Path, extra: &[&str]) {
        let from = from.to_str().expect("utf-8 path");
        let mut args = vec!["create", name, "--from", from];
        args.extend_from_slice(extra);
        self.env.ok(&args);
    }

    /// `agentbox exec BOX -- sh -c SCRIPT` → (status, stdout, stderr).
    fn sh(&self, name: &str, script: &str) -> (i32, String, String) {
        let out = self.env.run(&["exec", name, "--", "sh", "-c", script]);
        (
            code(&out).unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr(&out),
        )
    }

    fn sh_ok(&self, name: &str, script: &str) -> String {
        let (status, out, err) = self.sh(name, script);
        assert_eq!(status, 0, "{script:?} failed: {err}");
        out
    }

    fn command(&self, args: &[&str]) -> Command {
        self.env.command(args)
    }

    fn node_count(&self, name: &str) -> usize {
        self.env.json(&["log", name])["nodes"]
            .as_array()
            .map_or(0, |a| a.len())
    }

    fn supervisor_pid(&self, name: &str) -> Option<i32> {
        supervisor_pid(&self.env.path("home"), name)
    }
}

impl Drop for Boxes {
    fn drop(&mut self) {
        kill_supervisors(&self.env.path("home"));
    }
}

/// Host processes whose command line contains `marker`, other than agentbox itself.
fn host_processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd);
            if cmd.contains(marker) && !cmd.contains("agentbox") {
                out.push(pid);
            }
        }
    }
    out
}

/// The running processes of a `ps --json` (it lists recent exits after them).
fn running(ps: &serde_json::Value) -> Vec<serde_json::Value> {
    ps.as_array()
        .map(|a| a.iter().filter(|p| p["exit"].is_null()).cloned().collect())
        .unwrap_or_default()
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A root-tier test's boxes and a small project to copy into them (`None`: skipped).
fn boxes(test: &str) -> Option<(Boxes, PathBuf)> {
    if !require_root(test) {
        return None;
    }
    let b = Boxes::new();
    let proj = project(b.env.home.path());
    Some((b, proj))
}

fn project(root: &Path) -> PathBuf {
    let p = root.join("proj");
    write(&p.join("src/main.js"), "console.log('hi')\n");
    write(&p.join("README"), "readme\n");
    p
}

#[test]
fn exec_passes_arguments_stdio_and_status_exactly() {
    let Some((b, proj)) = boxes("exec_passes_arguments_stdio_and_status_exactly") else {
        return;
    };
    b.create("web", &proj, &[]);

    // Arguments arrive exactly: no extra `--`, no re-splitting, no expansion.
    let out = b.env.ok(&[
        "exec", "web", "--", "printf", "[%s]\n", "--", "-m", "a b", "$HOME", "",
    ]);
    assert_eq!(out, "[--]\n[-m]\n[a b]\n[$HOME]\n[]\n");

    // The exit status passes through.
    assert_eq!(b.sh("web", "exit 7").0, 7);
    // A signal's death is 128 + signal.
    assert_eq!(b.sh("web", "kill -TERM $$").0, 128 + 15);

    // stdin is the caller's.
    let mut child = b
        .command(&["exec", "web", "--", "tr", "a-z", "A-Z"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"hello box\n")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "HELLO BOX\n");

    // Start directory, host name, the project copy, PID namespace.
    let out = b.sh_ok("web", "pwd; hostname; cat src/main.js; echo $$");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "/workspace");
    assert_eq!(lines[1], "web");
    assert_eq!(lines[2], "console.log('hi')");
    let pid: i32 = lines[3].parse().expect("pid");
    assert!(
        pid < 100,
        "the box has its own PID namespace (got pid {pid})"
    );

    // A command that does not exist.
    let out = b.env.run(&["exec", "web", "--", "no-such-command-xyz"]);
    assert_eq!(code(&out), Some(127), "as a shell would say");
    assert!(
        stderr(&out).contains("no-such-command-xyz"),
        "{}",
        stderr(&out)
    );

    // Only allow-listed variables pass, plus --env.
    let out = b
        .command(&["exec", "web", "--env", "EXTRA=1", "--", "env"])
        .env("SECRET_TOKEN", "hunter2")
        .output()
        .expect("run");
    let env = String::from_utf8_lossy(&out.stdout);
    assert!(env.contains("EXTRA=1"), "{env}");
    assert!(!env.contains("hunter2"), "{env}");
    assert!(env.contains("HOME=/root"), "{env}");
}

#[test]
fn host_paths_are_hidden_and_unwritable() {
    if !require_root("host_paths_are_hidden_and_unwritable") {
        return;
    }
    // Outside /tmp, which is private in a box anyway: the home and the project must be
    // hidden on their own merits.
    let b = Boxes {
        env: Env::new_in(Path::new("/var/tmp")),
    };
    let tag = format!("agentbox-test-{}", std::process::id());
    let proj = project(b.env.home.path());
    // The host project is a git repository: its .git must be out of reach.
    git(&proj, &["init", "-q"]);
    git(&proj, &["add", "-A"]);
    git(&proj, &["commit", "-qm", "first"]);
    let secrets = [
        PathBuf::from(format!("/root/{tag}")),
        PathBuf::from(format!("/home/{tag}/secret")),
        b.env.path(&format!("home/{tag}")),
        proj.join(".git/config"),
    ];
    for s in &secrets[..3] {
        write(s, "secret\n");
    }
    // A container-engine style socket on the host.
    let sock_path = PathBuf::from(format!("/run/{tag}.sock"));
    let _sock = std::os::unix::net::UnixListener::bind(&sock_path).expect("bind socket");

    b.create("one", &proj, &[]);
    b.create("two", &proj, &[]);
    b.sh_ok("two", "echo private > /workspace/two-only");
    let two_upper = b
        .env
        .path("home/store/envs/two/work/upper/workspace/two-only");
    assert!(two_upper.exists(), "box two's write lands in its own layer");

    let mut targets: Vec<PathBuf> = secrets.to_vec();
    targets.push(sock_path.clone());
    targets.push(two_upper.clone());
    targets.push(b.env.path("home/store/store.json"));
    for t in &targets {
        let t = t.display();
        let (status, out, _) = b.sh("one", &format!("cat '{t}'"));
        assert_ne!(status, 0, "{t} is readable inside the box: {out}");
        // Writing either fails or lands inside the box; the host copy never changes.
        let _ = b.sh(
            "one",
            &format!("mkdir -p \"$(dirname '{t}')\" && echo pwned > '{t}'"),
        );
    }
    for s in &secrets[..3] {
        assert_eq!(
            std::fs::read_to_string(s).expect("read"),
            "secret\n",
            "{}",
            s.display()
        );
    }
    assert!(!std::fs::read_to_string(proj.join(".git/config"))
        .expect("config")
        .contains("pwned"));
    assert_eq!(
        std::fs::read_to_string(&two_upper).expect("two"),
        "private\n"
    );
    // Home directories look empty; the engine socket does not exist.
    let out = b.sh_ok("one", &format!("ls -A /root /home | grep -c {tag} || true; test -S /run/{tag}.sock && echo socket || echo nosocket"));
    assert!(out.contains("nosocket"), "{out}");
    // Changes inside never reach the host project.
    b.sh_ok(
        "one",
        "echo changed > /workspace/README; rm /workspace/src/main.js",
    );
    assert_eq!(
        std::fs::read_to_string(proj.join("README")).expect("readme"),
        "readme\n"
    );
    assert!(proj.join("src/main.js").exists());
    // /proc is the box's own, /sys read-only, /dev minimal, /tmp private.
    let out = b.sh_ok(
        "one",
        "ls /proc | grep -c '^[0-9]'; touch /sys/x 2>/dev/null && echo sys-writable; ls /dev | tr '\\n' ' '; ls -A /tmp | wc -l",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].parse::<u32>().expect("count") < 10, "{out}");
    assert!(!out.contains("sys-writable"));
    for dev in [
        "null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm",
    ] {
        assert!(
            lines[1].split(' ').any(|d| d == dev),
            "/dev lacks {dev}: {}",
            lines[1]
        );
    }
    assert!(
        !lines[1]
            .split(' ')
            .any(|d| d == "vda" || d == "sda" || d == "mem"),
        "{}",
        lines[1]
    );
    // The host's password hashes are not there; the rest of /etc is.
    if Path::new("/etc/shadow").exists() {
        let (status, out, _) = b.sh("one", "cat /etc/shadow");
        assert_ne!(status, 0, "/etc/shadow is readable in the box: {out}");
    }
    b.sh_ok("one", "test -r /etc/passwd");
    // No mounting, no module loading, no raw device access: those capabilities are gone.
    let (status, _, _) = b.sh("one", "mount -t tmpfs none /mnt");
    assert_ne!(status, 0, "a box mounted a filesystem");
    let caps = b.sh_ok("one", "grep CapBnd /proc/self/status");
    let bnd = u64::from_str_radix(caps.split_whitespace().nth(1).expect("mask"), 16).expect("hex");
    assert_eq!(
        bnd & (1 << 21),
        0,
        "CAP_SYS_ADMIN is not in the bounding set: {caps}"
    );
    assert_eq!(
        bnd & (1 << 2),
        0,
        "CAP_DAC_READ_SEARCH is not in the bounding set: {caps}"
    );
    let _ = std::fs::remove_file(&sock_path);
    let _ = std::fs::remove_file(&secrets[0]);
    let _ = std::fs::remove_dir_all(format!("/home/{tag}"));
}

#[test]
fn network_none_has_only_loopback() {
    let Some((b, proj)) = boxes("network_none_has_only_loopback") else {
        return;
    };
    b.create("offline", &proj, &["--network", "none"]);
    let out = b.sh_ok(
        "offline",
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
    );
    assert_eq!(out.trim(), "lo");
}

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
fn checkout_kills_every_process_of_the_box() {
    let Some((b, proj)) = boxes("checkout_kills_every_process_of_the_box") else {
        return;
    };
    b.create("k", &proj, &[]);
    let marker = format!("{}", 900_000 + std::process::id() % 99_999);
    b.env
        .ok(&["spawn", "k", "--", "sleep", &format!("{marker}1")]);
    b.env.ok(&[
        "spawn",
        "k",
        "--",
        "sh",
        "-c",
        &format!("sleep {marker}2; true"),
    ]);
    let mut fg = b
        .command(&["exec", "k", "--", "sleep", &format!("{marker}3")])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn exec");
    wait_until("the foreground command", || {
        !host_processes_with(&format!("{marker}3")).is_empty()
    });
    let ps = b.env.json(&["ps", "k"]);
    assert_eq!(running(&ps).len(), 3, "{ps}");

    let out = b.env.run(&["checkout", "k", "HEAD"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("killed 3 processes"),
        "{}",
        stderr(&out)
    );
    let status = fg.wait().expect("wait");
    assert_eq!(
        status.code(),
        Some(137),
        "the foreground exec was killed too"
    );
    assert!(host_processes_with(&marker).is_empty());
    assert_eq!(running(&b.env.json(&["ps", "k"])).len(), 0);
    // The box is running again.
    assert_eq!(b.sh_ok("k", "echo alive"), "alive\n");
}

#[test]
fn a_killed_supervisor_leaks_nothing_and_the_box_restarts() {
    let Some((b, proj)) = boxes("a_killed_supervisor_leaks_nothing_and_the_box_restarts") else {
        return;
    };
    b.create("crash", &proj, &[]);
    b.sh_ok("crash", "echo kept > /workspace/kept");
    let marker = format!("{}", 800_000 + std::process::id() % 99_999);
    b.env.ok(&["spawn", "crash", "--", "sleep", &marker]);
    wait_until("the spawned process", || {
        !host_processes_with(&marker).is_empty()
    });
    let pid = b.supervisor_pid("crash").expect("supervisor pid");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).expect("pid"),
        rustix::process::Signal::KILL,
    )
    .expect("kill supervisor");
    wait_until("the box's processes to die", || {
        host_processes_with(&marker).is_empty()
    });
    // The supervisor's other threads (and its socket) may outlive its main thread briefly.
    // A zombie leader whose other threads still exit keeps its socket open.
    wait_until("the supervisor to be gone", || {
        std::fs::read_dir(format!("/proc/{pid}/task")).map_or(true, |d| d.count() == 0)
    });
    let upper = b.env.path("home/store/envs/crash/work/upper");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(
        !mounts.contains(upper.to_str().expect("utf-8")),
        "a box mount leaked"
    );
    let out = b.env.run(&["start", "crash"]);
    assert_eq!(
        code(&out),
        Some(0),
        "{}\nsupervisor log:\n{}",
        stderr(&out),
        std::fs::read_to_string(b.env.path("home/boxes/crash/supervisor.log")).unwrap_or_default()
    );
    assert_eq!(b.sh_ok("crash", "cat /workspace/kept"), "kept\n");
    assert_eq!(b.node_count("crash"), 2);
}

#[test]
fn agentbox_inside_a_box_reaches_only_its_own_box() {
    let Some((b, proj)) = boxes("agentbox_inside_a_box_reaches_only_its_own_box") else {
        return;
    };
    b.create("self", &proj, &[]);
    b.create("other", &proj, &[]);
    let out = b.sh_ok(
        "self",
        "echo x > /workspace/x && agentbox commit -m 'from inside' && agentbox log --json",
    );
    assert!(out.contains("from inside"), "{out}");
    // Its status, and with --usage its history counted.
    let st = b.sh_ok("self", "agentbox status --usage");
    assert!(st.contains("box:          self"), "{st}");
    assert!(st.contains("branch tip"), "{st}");
    assert!(
        !b.sh_ok("self", "agentbox status").contains("branch tip"),
        "counted only when asked"
    );
    for refused in [
        "agentbox list",
        "agentbox -b other log",
        "agentbox destroy other",
        "agentbox ps other",
    ] {
        let (status, _, err) = b.sh("self", refused);
        assert_ne!(status, 0, "{refused} was allowed");
        assert!(err.contains("inside a box"), "{refused}: {err}");
    }
    assert_eq!(b.node_count("other"), 1);
}

#[test]
fn supervise_relaunches_after_a_rollback_but_not_after_an_exit() {
    let Some((b, proj)) = boxes("supervise_relaunches_after_a_rollback_but_not_after_an_exit")
    else {
        return;
    };
    b.create("agent", &proj, &["--no-capture"]);
    let mut run = b
        .command(&[
            "run",
            "agent",
            "--supervise",
            "--",
            "sh",
            "-c",
            "echo launched; while [ ! -e /workspace/stop ]; do sleep 0.05; done; echo finished",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn run");
    let mut lines = BufReader::new(run.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().expect("line").expect("read"), "launched");
    b.env.ok(&["checkout", "agent", "HEAD"]);
    assert_eq!(lines.next().expect("line").expect("read"), "launched");
    b.env
        .ok(&["exec", "agent", "--", "touch", "/workspace/stop"]);
    assert_eq!(lines.next().expect("line").expect("read"), "finished");
    assert!(
        lines.next().is_none(),
        "no relaunch after the agent exited by itself"
    );
    assert_eq!(run.wait().expect("wait").code(), Some(0));
}

#[test]
fn box_errors_are_clear() {
    if !require_root("box_errors_are_clear") {
        return;
    }
    let b = Boxes::new();
    let out = b.env.run(&["exec", "nope", "--", "true"]);
    assert_eq!(code(&out), Some(3));
    assert!(
        stderr(&out).contains("no box named \"nope\""),
        "{}",
        stderr(&out)
    );
    let proj = project(b.env.home.path());
    b.create("dup", &proj, &[]);
    let out = b
        .env
        .run(&["create", "dup", "--from", proj.to_str().expect("utf-8")]);
    assert_eq!(code(&out), Some(4), "{}", stderr(&out));
    let out = b.env.run(&["checkout", "dup", "no-such-ref"]);
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    let out = b.env.run(&["logs", "dup", "42"]);
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    b.sh_ok("dup", "echo x > /workspace/x");
    b.env.ok(&["destroy", "dup"]);
    assert!(!b.env.path("home/boxes/dup").exists());
    let out = b.env.run(&["exec", "dup", "--", "true"]);
    assert_eq!(code(&out), Some(3));
    // A new box of the same name starts with its own history only.
    b.create("dup", &proj, &[]);
    assert_eq!(b.node_count("dup"), 1);
}

#[test]
fn a_box_runs_on_an_imported_image() {
    if !require_root("a_box_runs_on_an_imported_image") {
        return;
    }
    let b = Boxes::new();
    let tar = b.env.path("rootfs.tar");
    agentbox_testkit::rootfs::build_tar(b.env.home.path(), &tar);
    b.env
        .ok(&["image", "import", "mini", tar.to_str().expect("utf-8")]);
    let list = b.env.json(&["image", "list"]);
    assert_eq!(list[0]["name"], "mini");
    let proj = project(b.env.home.path());
    b.create("onimage", &proj, &["--image", "mini"]);
    let out = b.sh_ok(
        "onimage",
        "cat /etc/os-release; ls /usr/bin | wc -l; cat /workspace/README",
    );
    assert_eq!(
        out.lines().next(),
        Some("ID=agentbox-test-rootfs"),
        "the image is the base, not the host: {out}"
    );
    assert!(out.ends_with("readme\n"), "{out}");
    // Writes go to the box's layer; the image stays as imported.
    b.sh_ok("onimage", "echo changed > /etc/os-release");
    let img = b.env.path("home/images/mini/rootfs/etc/os-release");
    assert_eq!(
        std::fs::read_to_string(img).expect("read"),
        "ID=agentbox-test-rootfs\n"
    );
    // In use: refused; after the box is gone: removed.
    assert_eq!(code(&b.env.run(&["image", "rm", "mini"])), Some(4));
    b.env.ok(&["destroy", "onimage"]);
    b.env.ok(&["image", "rm", "mini"]);
    // A bad archive leaves nothing.
    let bad = b.env.path("bad.tar");
    write(&bad, "not a tar at all");
    let out = b
        .env
        .run(&["image", "import", "broken", bad.to_str().expect("utf-8")]);
    assert_eq!(code(&out), Some(8), "{}", stderr(&out));
    assert!(!b.env.path("home/images/broken").exists());
    assert!(b
        .env
        .json(&["image", "list"])
        .as_array()
        .is_some_and(|a| a.is_empty()));
}

/// Messages of the box's nodes, oldest first.
fn messages(b: &Boxes, name: &str) -> Vec<String> {
    b.env.json(&["log", name])["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["message"].as_str().unwrap_or("").to_owned())
        .collect()
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

#[test]
fn exec_forwards_signals_to_the_command() {
    let Some((b, proj)) = boxes("exec_forwards_signals_to_the_command") else {
        return;
    };
    b.create("sig", &proj, &[]);
    let mut child = b
        .command(&[
            "exec",
            "sig",
            "--",
            "sh",
            "-c",
            "trap 'echo got-int; exit 42' INT; echo ready; while true; do sleep 0.05; done",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().expect("line").expect("read"), "ready");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).expect("pid"),
        rustix::process::Signal::INT,
    )
    .expect("signal");
    assert_eq!(lines.next().expect("line").expect("read"), "got-int");
    assert_eq!(child.wait().expect("wait").code(), Some(42));
}

#[test]
fn resource_limits_are_enforced() {
    let Some((b, proj)) = boxes("resource_limits_are_enforced") else {
        return;
    };
    b.create(
        "small",
        &proj,
        &["--memory", "32M", "--pids", "20", "--cpus", "0.5"],
    );
    // Memory: a process that needs far more than 32 MiB is killed.
    let (status, _, _) = b.sh("small", "head -c 200M /dev/zero | tail > /dev/null");
    assert_ne!(
        status, 0,
        "a 200 MiB allocation succeeded under a 32 MiB limit"
    );
    // Processes: at most 20 at once; the kernel counts the refusals.
    let _ = b.sh(
        "small",
        "for i in $(seq 1 40); do sleep 30 >/dev/null 2>&1 & done 2>/dev/null; true",
    );
    // The box's pids cgroup, as the kernel reports it for a process of the box.
    let marker = format!("{}", 700_000 + std::process::id() % 99_999);
    b.env.ok(&["spawn", "small", "--", "sleep", &marker]);
    wait_until("the marker process", || {
        !host_processes_with(&marker).is_empty()
    });
    let pid = host_processes_with(&marker)[0];
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
    let rel = cgroups
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
            (ctrl.split(',').any(|c| c == "pids") || ctrl.is_empty()).then(|| path.to_owned())
        })
        .expect("a pids cgroup");
    let cg = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"]
        .iter()
        .map(|m| Path::new(m).join(rel.trim_start_matches('/')))
        .find(|p| p.join("pids.current").exists())
        .expect("the box's pids cgroup directory");
    assert!(rel.contains("/agentbox/small-"), "{rel}");
    let current: u32 = std::fs::read_to_string(cg.join("pids.current"))
        .expect("pids.current")
        .trim()
        .parse()
        .expect("number");
    assert!(current <= 20, "{current} processes under a limit of 20");
    let events = std::fs::read_to_string(cg.join("pids.events")).expect("pids.events");
    assert!(events.trim() != "max 0", "no fork was refused: {events}");
    b.env.ok(&["checkout", "small", "HEAD"]);
    // The box still works afterwards, and stop removes its cgroup.
    assert_eq!(b.sh_ok("small", "echo ok"), "ok\n");
    b.env.ok(&["stop", "small"]);
    assert!(
        !cg.exists(),
        "stop leaves the cgroup {}: {}",
        cg.display(),
        std::fs::read_to_string(b.env.path("home/boxes/small/supervisor.log")).unwrap_or_default()
    );
    // Bad values are refused before anything is made.
    let out = b.env.run(&[
        "create",
        "limited",
        "--from",
        proj.to_str().expect("utf-8"),
        "--memory",
        "lots",
    ]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(!b.env.path("home/boxes/limited").exists());
}

#[test]
fn spawned_processes_have_logs_ps_and_kill() {
    let Some((b, proj)) = boxes("spawned_processes_have_logs_ps_and_kill") else {
        return;
    };
    b.create("svc", &proj, &["--no-capture"]);
    let started = b.env.json(&[
        "spawn",
        "svc",
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; sleep 0.3; echo late",
    ]);
    let id = started["id"].as_u64().expect("id").to_string();
    // -f follows until the process ends, then returns.
    let out = b.env.ok(&["logs", "svc", &id, "-f"]);
    assert_eq!(out, "out\nerr\nlate\n");
    let long = b.env.json(&["spawn", "svc", "--", "sleep", "1000"]);
    let long_id = long["id"].as_u64().expect("id").to_string();
    let ps = running(&b.env.json(&["ps", "svc"]));
    assert_eq!(ps.len(), 1, "{ps:?}");
    assert_eq!(ps[0]["argv"], serde_json::json!(["sleep", "1000"]));
    b.env.ok(&["kill", "svc", &long_id, "--signal", "KILL"]);
    wait_until("the killed process to leave ps", || {
        running(&b.env.json(&["ps", "svc"])).is_empty()
    });
    let out = b.env.run(&["kill", "svc", "999"]);
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    let status = b.env.json(&["status", "svc"]);
    assert_eq!(status["box"]["state"], "running");
    b.env.ok(&["stop", "svc"]);
    assert_eq!(b.env.json(&["status", "svc"])["box"]["state"], "stopped");
    assert_eq!(b.env.json(&["list"])[0]["state"], "stopped");
}

#[test]
fn boxes_run_on_a_btrfs_store() {
    if !require_root("boxes_run_on_a_btrfs_store") {
        return;
    }
    let Some(fs) = agentbox_testkit::loopfs::LoopFs::btrfs(768 << 20) else {
        return;
    };
    let b = Boxes::new();
    std::os::unix::fs::symlink(fs.path(), b.env.path("home")).expect("symlink home");
    let proj = project(b.env.home.path());
    b.create("onbtrfs", &proj, &[]);
    assert_eq!(b.env.json(&["status", "onbtrfs"])["backend"], "btrfs");
    b.sh_ok("onbtrfs", "echo v2 > /workspace/README");
    // Deleting a file of the base (the host's /) and replacing a base directory: the
    // layer keeps the overlay markers, across commits and restarts. The base files are the
    // test's own, so the result does not depend on what this machine's / holds.
    let base = BaseFixture::new();
    let f = base.display();
    b.sh_ok(
        "onbtrfs",
        &format!("rm {f}/file; rm -rf {f}/tree; mkdir {f}/tree; echo mine > {f}/tree/only"),
    );
    b.sh_ok("onbtrfs", "echo v3 > /workspace/README");
    assert_eq!(
        b.node_count("onbtrfs"),
        4,
        "{}",
        std::fs::read_to_string(b.env.path("home/boxes/onbtrfs/supervisor.log"))
            .unwrap_or_default()
    );
    b.env.ok(&["stop", "onbtrfs"]);
    let out = b.sh_ok(
        "onbtrfs",
        &format!("cat README; test -e {f}/file && echo base-file || echo gone; ls -A {f}/tree"),
    );
    assert_eq!(out, "v3\ngone\nonly\n");
    // Looking at the tree after a restart changed nothing: no node (overlayfs marks the
    // merged directories it looks into, which is not a change of the box).
    assert_eq!(b.node_count("onbtrfs"), 4, "{:?}", messages(&b, "onbtrfs"));
    b.env.ok(&["undo", "onbtrfs"]);
    b.env.ok(&["undo", "onbtrfs"]);
    let out = b.sh_ok(
        "onbtrfs",
        &format!(
            "cat README; test -e {f}/file && echo base-file || echo gone; ls {f}/tree | wc -l"
        ),
    );
    assert_eq!(out, format!("v2\nbase-file\n{}\n", BaseFixture::DIRS));
    let diff = b.env.ok(&["diff", "onbtrfs", "HEAD~1", "HEAD"]);
    assert!(diff.contains("workspace/README"), "{diff}");
    // Background writes are captured on btrfs too.
    b.env.ok(&[
        "spawn",
        "onbtrfs",
        "--",
        "sh",
        "-c",
        "echo bg > /workspace/bg; sleep 1000",
    ]);
    wait_until("a node for the background write", || {
        b.env
            .ok(&["show", "onbtrfs", "HEAD"])
            .contains("workspace/bg")
    });
    let msgs = messages(&b, "onbtrfs");
    assert!(
        msgs.last().is_some_and(|m| m.starts_with("auto: while")),
        "{msgs:?}"
    );
    b.env.ok(&["destroy", "onbtrfs"]);
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

#[test]
fn a_normal_user_gets_a_rootless_box() {
    let Some((b, proj)) = boxes("a_normal_user_gets_a_rootless_box") else {
        return;
    };
    let root = b.env.home.path();
    let chown = |p: &Path| {
        crate::common::chown_nobody(p);
    };
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let home = root.join("nobody-home");
    std::fs::create_dir(&home).expect("mkdir");
    chown(&home);
    chown(&proj);
    let ok = |args: &[&str]| {
        let out = as_nobody(&home, args);
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    ok(&["create", "mine", "--from", proj.to_str().expect("utf-8")]);
    let out = ok(&["exec", "mine", "--", "sh", "-c", "id -u; cat /proc/self/uid_map | tr -s ' '; echo v2 > README; touch /usr/x 2>/dev/null && echo usr-writable; ls -A /root | wc -l"]);
    assert_eq!(
        out, "0\n 0 65534 1\n0\n",
        "root inside, mapped to the user outside; /usr read-only; an empty /root"
    );
    let log = ok(&["--json", "log", "mine"]);
    assert!(log.contains("echo v2 > README"), "{log}");
    // Deletions and replaced directories use the unprivileged overlay attributes.
    ok(&[
        "exec",
        "mine",
        "--",
        "sh",
        "-c",
        "rm -rf src && mkdir src && echo new > src/only",
    ]);
    ok(&["undo", "mine"]);
    assert_eq!(ok(&["exec", "mine", "--", "ls", "src"]), "main.js\n");
    ok(&["checkout", "mine", "HEAD~1"]);
    assert_eq!(ok(&["exec", "mine", "--", "cat", "README"]), "readme\n");
    ok(&["spawn", "mine", "--", "sleep", "1000"]);
    assert!(ok(&["ps", "mine"]).contains("sleep 1000"));
    ok(&["stop", "mine"]);
    ok(&["destroy", "mine"]);
    // Written by the user, never by root.
    for e in walkdir::WalkDir::new(&home)
        .into_iter()
        .flatten()
        .filter(|e| e.path() != home.join("agentbox"))
    {
        let uid = std::os::unix::fs::MetadataExt::uid(&e.metadata().expect("lstat"));
        assert_eq!(uid, 65534, "{} belongs to uid {uid}", e.path().display());
    }
}

#[test]
fn a_rootless_box_from_a_git_repository_syncs_its_branch() {
    let Some((b, _)) = boxes("a_rootless_box_from_a_git_repository_syncs_its_branch") else {
        return;
    };
    let root = b.env.home.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let home = root.join("nobody-home");
    let repo = root.join("nobody-repo");
    write(&repo.join("a.txt"), "one\n");
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    write(&repo.join("a.txt"), "one\nuncommitted\n");
    std::fs::create_dir(&home).expect("mkdir");
    for p in [&home, &repo] {
        crate::common::chown_nobody(p);
    }
    let ok = |args: &[&str]| {
        let out = as_nobody(&home, args);
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The host repository belongs to the user; root reads it here only to check.
    let host = |args: &[&str]| {
        let mut a = vec!["-c", "safe.directory=*"];
        a.extend_from_slice(args);
        git(&repo, &a).trim().to_owned()
    };
    ok(&["create", "mine", "--from", repo.to_str().expect("utf-8")]);
    assert_eq!(
        ok(&["exec", "mine", "--", "git", "status", "--short"]),
        " M a.txt\n"
    );
    // `status` looks inside the running box for its uncommitted files.
    let st: serde_json::Value =
        serde_json::from_str(&ok(&["--json", "status", "mine"])).expect("json");
    assert_eq!(
        st["box"]["branches"][0]["dirty"],
        serde_json::json!(["a.txt"]),
        "{st}"
    );
    ok(&[
        "exec",
        "mine",
        "--",
        "sh",
        "-c",
        "git -c user.name=u -c user.email=u@x commit -qam work",
    ]);
    let tip = ok(&["exec", "mine", "--", "git", "rev-parse", "HEAD"]);
    assert_eq!(
        host(&["rev-parse", "agentbox/mine"]),
        tip.trim(),
        "the host has the box's commit"
    );
    // A rollback moves the host branch back.
    ok(&["undo", "mine"]);
    ok(&["sync", "mine"]);
    assert_eq!(
        host(&["rev-parse", "agentbox/mine"]),
        host(&["rev-parse", "HEAD"])
    );
    let log = ok(&["--json", "log", "mine"]);
    assert!(
        log.contains("\"tip\""),
        "nodes record the branch tip: {log}"
    );
    ok(&["destroy", "mine"]);
}

#[test]
fn checkout_can_keep_the_processes_running() {
    let Some((b, proj)) = boxes("checkout_can_keep_the_processes_running") else {
        return;
    };
    b.create("self", &proj, &[]);
    b.sh_ok("self", "echo v1 > f");
    // Mistakes, including a symlink where the target has a directory: restoring must
    // replace it, never write through it.
    b.sh_ok(
        "self",
        "echo v2 > f; mkdir gone; echo g > gone/x; rm -rf src; ln -s /etc src",
    );
    let marker = format!("{}", 600_000 + std::process::id() % 99_999);
    b.env.ok(&["spawn", "self", "--", "sleep", &marker]);
    let out = b
        .env
        .run(&["checkout", "self", "HEAD~1", "--keep-processes"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(
        !host_processes_with(&marker).is_empty(),
        "the process was kept"
    );
    let out = b.sh_ok(
        "self",
        "cat f; test -e gone && echo gone-present; test -L src && echo src-link; cat src/main.js; test -e /etc/main.js && echo leaked; true",
    );
    assert_eq!(out, "v1\nconsole.log('hi')\n");
    let msgs = messages(&b, "self");
    assert!(
        msgs.last().is_some_and(|m| m.starts_with("restored ")),
        "{msgs:?}"
    );
    let diff = b.env.ok(&["diff", "self", "HEAD~2", "HEAD"]);
    assert!(diff.starts_with("0 added, 0 removed, 0 modified"), "{diff}");
}

#[test]
fn a_flattened_box_chain_keeps_its_deletions() {
    let Some((b, proj)) = boxes("a_flattened_box_chain_keeps_its_deletions") else {
        return;
    };
    b.create("deep", &proj, &[]);
    // A deletion of a base file and a replaced base directory, then enough commits for the
    // layer chain to be flattened (it is capped at 24 layers).
    let base = BaseFixture::new();
    let f = base.display();
    b.sh_ok(
        "deep",
        &format!("rm {f}/file; rm -rf {f}/tree; mkdir {f}/tree; echo mine > {f}/tree/only"),
    );
    for i in 0..26 {
        b.sh_ok("deep", &format!("echo {i} > /workspace/n{}", i % 3));
    }
    let depth = b.env.json(&["status", "deep"])["env"]["chain_depth"]
        .as_u64()
        .expect("chain depth");
    assert!(depth < 24, "the chain was flattened (depth {depth})");
    b.env.ok(&["stop", "deep"]);
    let out = b.sh_ok(
        "deep",
        &format!("test -e {f}/file && echo base-file || echo gone; ls -A {f}/tree; cat n0 n1 n2"),
    );
    assert_eq!(out, "gone\nonly\n24\n25\n23\n");
}

#[test]
fn shell_runs_on_a_terminal() {
    let Some((b, proj)) = boxes("shell_runs_on_a_terminal") else {
        return;
    };
    b.create("term", &proj, &[]);
    // `script` gives agentbox a terminal as stdin/stdout and feeds it our input.
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c"])
        .arg(format!("{} shell term", env!("CARGO_BIN_EXE_agentbox")))
        .arg("/dev/null")
        .env("AGENTBOX_HOME", b.env.path("home"))
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("script (util-linux)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"tty; echo \"term=$TERM\"; sleep 0.5 & wait; exit 7\n")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("/dev/pts/"),
        "the shell has a terminal: {text}"
    );
    assert!(text.contains("term=xterm"), "{text}");
    assert_eq!(out.status.code(), Some(7), "{text}");
}

/// Drives `agentbox shell BOX` on a real pseudo-terminal (Python's `pty`): the window size
/// reaches the box and follows a resize, Ctrl-C interrupts the foreground command but not the
/// shell, and the shell's exit status is agentbox's. Prints `ok` or what went wrong.
const PTY_DRIVER: &str = r#"
import fcntl, os, pty, select, struct, sys, termios, time
exe, home, box = sys.argv[1:4]
pid, fd = pty.fork()
if pid == 0:
    os.environ["AGENTBOX_HOME"] = home
    os.environ["TERM"] = "xterm"
    os.execv(exe, [exe, "shell", box, "sh", "-i"])
def size(rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
seen = b""
def expect(what, timeout=15):
    global seen
    end = time.time() + timeout
    while what.encode() not in seen:
        left = end - time.time()
        if left <= 0:
            print("timed out waiting for %r; got %r" % (what, seen[-400:]))
            sys.exit(1)
        r, _, _ = select.select([fd], [], [], left)
        if r:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
    if what.encode() not in seen:
        print("ended before %r; got %r" % (what, seen[-400:]))
        sys.exit(1)
    seen = seen[seen.index(what.encode()) + len(what):]
size(30, 100)
time.sleep(0.3)
os.write(fd, b"stty size; echo size-done\n")
expect("30 100")
size(40, 120)
time.sleep(0.5)
os.write(fd, b"stty size; echo resized-done\n")
expect("40 120")
os.write(fd, b"sleep 100; echo after-$((20+1))\n")
time.sleep(1)
os.write(fd, b"\x03")
os.write(fd, b"echo alive-$((40+2))\n")
expect("alive-42")
os.write(fd, b"exit 3\n")
_, status = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(status)
if code != 3:
    print("exit status %d, not 3" % code)
    sys.exit(1)
print("ok")
"#;

#[test]
fn a_shell_follows_resizes_and_ctrl_c_interrupts_only_its_command() {
    let test = "a_shell_follows_resizes_and_ctrl_c_interrupts_only_its_command";
    if !agentbox_testkit::tier::require_tool(test, "python3") {
        return;
    }
    let Some((b, proj)) = boxes(test) else {
        return;
    };
    b.create("tty", &proj, &[]);
    let out = Command::new("python3")
        .arg("-c")
        .arg(PTY_DRIVER)
        .arg(env!("CARGO_BIN_EXE_agentbox"))
        .arg(b.env.path("home"))
        .arg("tty")
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.trim_end().ends_with("ok"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Everything of a host repository a box must never change: the working tree's files, the
/// index, the stash list, every ref but the box's own, hooks and config.
fn host_state(repo: &Path) -> String {
    let mut s = String::new();
    for e in walkdir::WalkDir::new(repo)
        .sort_by_file_name()
        .into_iter()
        .flatten()
    {
        let rel = e.path().strip_prefix(repo).expect("below");
        let in_git = rel.starts_with(".git");
        let keep = !in_git
            || rel.starts_with(".git/hooks")
            || rel == Path::new(".git/index")
            || rel == Path::new(".git/config");
        if keep && e.file_type().is_file() {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            std::fs::read(e.path()).expect("read").hash(&mut h);
            s.push_str(&format!("{} {:016x}\n", rel.display(), h.finish()));
        }
    }
    s.push_str(&git(repo, &["stash", "list"]));
    for line in git(repo, &["for-each-ref", "--format=%(refname) %(objectname)"]).lines() {
        if !line.starts_with("refs/heads/agentbox/") && !line.starts_with("refs/agentbox/") {
            s.push_str(line);
            s.push('\n');
        }
    }
    s
}

#[test]
fn a_box_from_a_git_repository_gets_its_own_branch_and_leaves_the_host_alone() {
    let Some((b, _)) =
        boxes("a_box_from_a_git_repository_gets_its_own_branch_and_leaves_the_host_alone")
    else {
        return;
    };
    let repo = b.env.path("repo");
    write(&repo.join("a.txt"), "one\n");
    write(&repo.join("b.txt"), "keep\n");
    write(&repo.join("gone.txt"), "x\n");
    write(&repo.join("both.txt"), "v1\n");
    write(&repo.join("staged-rm.txt"), "x\n");
    write(&repo.join(".gitignore"), ".env\n");
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    git(&repo, &["stash", "list"]);
    // Stat data the index no longer matches (a build tool touched files): not a change.
    std::thread::sleep(Duration::from_millis(1100));
    for f in ["a.txt", "b.txt", "both.txt"] {
        let file = std::fs::File::options()
            .append(true)
            .open(repo.join(f))
            .expect("open");
        file.set_modified(std::time::SystemTime::now())
            .expect("touch");
    }
    let repo_s = repo.to_str().expect("utf-8");
    b.env.ok(&["create", "clean", "--from", repo_s]);
    assert_eq!(b.sh_ok("clean", "git status --short"), "");
    b.env.ok(&["destroy", "clean", "--delete-branch"]);
    // Uncommitted work of every kind.
    write(&repo.join("a.txt"), "one\ntwo\n");
    git(&repo, &["add", "a.txt"]);
    write(&repo.join("b.txt"), "keep\nunstaged\n");
    std::fs::remove_file(repo.join("gone.txt")).expect("rm");
    write(&repo.join("both.txt"), "v2\n");
    git(&repo, &["add", "both.txt"]);
    write(&repo.join("both.txt"), "v3\n");
    git(&repo, &["rm", "-q", "staged-rm.txt"]);
    write(&repo.join("new.txt"), "untracked\n");
    write(&repo.join(".env"), "SECRET=1\n");
    let before = host_state(&repo);

    b.env.ok(&["create", "agent", "--from", repo_s]);
    b.env
        .ok(&["create", "agent2", "--from", repo_s, "--no-carry"]);
    let out = b.sh_ok(
        "agent",
        "git branch --show-current; git status --short; test -e .env && echo env || echo no-env",
    );
    assert_eq!(
        out,
        "agentbox/agent\nM  a.txt\n M b.txt\nMM both.txt\n D gone.txt\nD  staged-rm.txt\n?? new.txt\nno-env\n"
    );
    // Staged and working-tree contents both arrived.
    assert_eq!(
        b.sh_ok("agent", "git show :both.txt; cat both.txt"),
        "v2\nv3\n"
    );
    // The host keeps the carried-over objects alive (its gc must not drop what the box's
    // index refers to).
    assert!(git(&repo, &["for-each-ref", "refs/agentbox/agent/carried"]).contains("carried"));
    assert_eq!(b.sh_ok("agent2", "git status --short; cat a.txt"), "one\n");
    // The box commits on its branch; the host's objects and .git are out of reach.
    b.sh_ok(
        "agent",
        "git add -A && git commit -qm 'from the box' && git log --format=%s | head -1",
    );
    // The box's commit is on the host's copy of its branch; a rollback moves it back, and
    // the host's reflog keeps the old tip.
    let base = git(&repo, &["rev-parse", "HEAD"]);
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", "agentbox/agent"]),
        "from the box\n"
    );
    b.env.ok(&["undo", "agent"]);
    assert_eq!(git(&repo, &["rev-parse", "agentbox/agent"]), base);
    assert!(git(&repo, &["reflog", "agentbox/agent"]).contains("agentbox sync"));
    let synced = b.env.json(&["sync", "agent"]);
    assert_eq!(
        synced["repos"][0]["tip"].as_str().map(|t| format!("{t}\n")),
        Some(base.clone())
    );
    let (status, _, _) = b.sh("agent", "touch /run/agentbox/git/objects/x");
    assert_ne!(status, 0, "the host's objects are read-only");
    let (status, _, _) = b.sh("agent", &format!("ls {}/.git", repo.display()));
    assert_ne!(status, 0, "the host repository is not visible");
    assert_eq!(
        host_state(&repo),
        before,
        "the host repository changed while the box ran"
    );
    // The host got the boxes' branches and base pins, nothing else.
    let refs = git(&repo, &["for-each-ref", "--format=%(refname)"]);
    for r in [
        "refs/heads/agentbox/agent",
        "refs/heads/agentbox/agent2",
        "refs/agentbox/agent/base",
    ] {
        assert!(refs.contains(r), "{r} missing: {refs}");
    }
    // A third box of a taken name gets the next free branch.
    b.env.ok(&["destroy", "agent"]);
    b.env
        .ok(&["create", "agent", "--from", repo_s, "--with-env"]);
    assert_eq!(
        b.sh_ok("agent", "git branch --show-current; cat .env"),
        "agentbox/agent-2\nSECRET=1\n"
    );
    b.env.ok(&["destroy", "agent"]);
    b.env.ok(&["destroy", "agent2"]);
    let refs = git(&repo, &["for-each-ref", "--format=%(refname)"]);
    assert!(
        !refs.contains("refs/agentbox/"),
        "pins removed on destroy: {refs}"
    );
    assert!(
        refs.contains("refs/heads/agentbox/agent\n"),
        "branches stay: {refs}"
    );
    assert_eq!(host_state(&repo), before, "the host repository changed");
}

#[test]
fn twenty_boxes_created_and_destroyed_in_parallel_lose_nothing() {
    let Some((b, _)) = boxes("twenty_boxes_created_and_destroyed_in_parallel_lose_nothing") else {
        return;
    };
    let repo = b.env.path("repo");
    for i in 0..50 {
        write(&repo.join(format!("src/f{i}.txt")), "x\n");
    }
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    write(&repo.join("untracked.txt"), "u\n");
    let repo_s = repo.to_str().expect("utf-8").to_owned();
    let run_all = |args: Vec<Vec<String>>| {
        let children: Vec<_> = args
            .into_iter()
            .map(|a| {
                b.command(&a.iter().map(String::as_str).collect::<Vec<_>>())
                    .output()
            })
            .collect();
        for c in children {
            let out = c.expect("run");
            assert_eq!(code(&out), Some(0), "{}", stderr(&out));
        }
    };
    // Started together, not one after the other.
    let creates: Vec<Vec<String>> = (0..20)
        .map(|i| {
            vec![
                "create".into(),
                format!("par-{i}"),
                "--from".into(),
                repo_s.clone(),
            ]
        })
        .collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = creates
            .into_iter()
            .map(|a| s.spawn(|| run_all(vec![a])))
            .collect();
        for h in handles {
            h.join().expect("create thread");
        }
    });
    let list = b.env.json(&["list"]);
    let names: Vec<&str> = list
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(names.len(), 20, "{names:?}");
    // Every box got its own number in the project: 1 to 20, none twice.
    let mut numbers: Vec<u64> = list
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|e| e["box"]["index"].as_u64())
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=20).collect::<Vec<u64>>());
    let refs = git(
        &repo,
        &[
            "for-each-ref",
            "--format=%(refname)",
            "refs/heads/agentbox/",
        ],
    );
    assert_eq!(refs.lines().count(), 20, "{refs}");
    // Half of them go, in parallel too.
    std::thread::scope(|s| {
        for i in 0..10 {
            let a = vec!["destroy".to_owned(), format!("par-{i}")];
            s.spawn(move || run_all(vec![a]));
        }
    });
    assert_eq!(b.env.json(&["list"]).as_array().map(|a| a.len()), Some(10));
    // `destroy` returns before a box's working files are deleted: they wait in `tmp/` as
    // `discarded-*` for a removal process of their own. Once those are done, nothing else
    // may be left there.
    let tmp_entries = || -> Vec<String> {
        std::fs::read_dir(b.env.path("home/store/tmp"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while tmp_entries().iter().any(|e| e.starts_with("discarded-"))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(tmp_entries(), Vec::<String>::new(), "staging left behind");
    // No half-written record, stray environment, pin or directory either.
    assert_eq!(
        b.env.json(&["prune", "--dry-run", "--min-age", "0"]),
        serde_json::json!([])
    );
    let pins = git(
        &repo,
        &["for-each-ref", "--format=%(refname)", "refs/agentbox/"],
    );
    assert_eq!(pins.lines().count(), 10, "{pins}");
    // A new box takes the next number, not a freed one.
    b.env.ok(&["create", "par-next", "--from", &repo_s]);
    assert_eq!(b.env.json(&["status", "par-next"])["box"]["index"], 21);
    assert_eq!(
        b.sh_ok("par-15", "cat untracked.txt; git branch --show-current"),
        "u\nagentbox/par-15\n"
    );
}

/// A repository at `dir` holding `files`, committed once, with an identity of its own and
/// a credential helper in its config (which must never reach a box).
fn repo_with(dir: &Path, files: &[(&str, &str)]) {
    for (name, content) in files {
        write(&dir.join(name), content);
    }
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.name", "t"]);
    git(dir, &["config", "user.email", "t@example.com"]);
    git(
        dir,
        &["config", "credential.helper", "store --file /secret-creds"],
    );
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "first"]);
}

/// [`host_state`] of a project root, leaving out its sub-repositories (checked on their own).
fn root_state(root: &Path, subs: &[&str]) -> String {
    host_state(root)
        .lines()
        .filter(|l| !subs.iter().any(|s| l.starts_with(&format!("{s}/"))))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn refs_of(repo: &Path) -> String {
    git(repo, &["for-each-ref", "--format=%(refname)"])
}

#[test]
fn a_monorepo_gets_a_branch_per_repository_and_leaves_every_host_repository_alone() {
    let Some((b, _)) =
        boxes("a_monorepo_gets_a_branch_per_repository_and_leaves_every_host_repository_alone")
    else {
        return;
    };
    let mono = b.env.path("mono");
    // The root ignores `web/`; `api/` is simply untracked by it.
    repo_with(&mono, &[("README", "root\n"), (".gitignore", "web/\n")]);
    repo_with(&mono.join("api"), &[("a.txt", "one\n")]);
    repo_with(&mono.join("web"), &[("w.txt", "w\n")]);
    write(&mono.join("api/a.txt"), "one\ntwo\n");
    write(&mono.join("api/new.txt"), "untracked\n");
    write(&mono.join("notes.txt"), "root untracked\n");
    let states = |which: &str| -> Vec<String> {
        let _ = which;
        vec![
            root_state(&mono, &["api", "web"]),
            host_state(&mono.join("api")),
            host_state(&mono.join("web")),
        ]
    };
    let before = states("before");
    let bases: Vec<String> = ["", "api", "web"]
        .iter()
        .map(|s| git(&mono.join(s), &["rev-parse", "HEAD"]))
        .collect();

    b.create("m", &mono, &[]);
    let out = b.sh_ok(
        "m",
        "git branch --show-current; git status --short; \
         cd api && git branch --show-current && git status --short && cat .git/objects/info/alternates; \
         cd ../web && git branch --show-current && git status --short",
    );
    assert_eq!(
        out,
        "agentbox/m\n?? api/\n?? notes.txt\n\
         agentbox/m--api\n M a.txt\n?? new.txt\n/run/agentbox/git/sub/api/objects\n\
         agentbox/m--web\n"
    );
    // No credential helper, no host config beyond the identity.
    let (_, creds, _) = b.sh(
        "m",
        "for d in . api web; do git -C $d config --get-regexp 'credential|remote' ; done; \
         env | grep -i -e cred -e askpass; cat /secret-creds",
    );
    assert_eq!(creds, "", "host configuration leaked into the box");
    assert_eq!(b.sh_ok("m", "git -C api config user.name"), "t\n");

    // One node with a commit in every repository: every host branch follows.
    b.sh_ok(
        "m",
        "git add notes.txt && git commit -qm 'box .' && \
         for d in api web; do (cd $d && git add -A && git commit -q --allow-empty -m \"box $d\") || exit 1; done",
    );
    for (sub, branch, msg) in [
        ("", "agentbox/m", "box .\n"),
        ("api", "agentbox/m--api", "box api\n"),
        ("web", "agentbox/m--web", "box web\n"),
    ] {
        assert_eq!(
            git(&mono.join(sub), &["log", "-1", "--format=%s", branch]),
            msg,
            "{branch}"
        );
        assert!(refs_of(&mono.join(sub)).contains("refs/agentbox/m/base"));
    }
    // The node records every repository's tip.
    let log = b.env.json(&["log", "m"]);
    let text = log.to_string();
    assert!(
        text.contains("agentbox/m--api") && text.contains("agentbox/m--web"),
        "{text}"
    );
    b.env.ok(&["undo", "m"]);
    for (i, (sub, branch)) in [
        ("", "agentbox/m"),
        ("api", "agentbox/m--api"),
        ("web", "agentbox/m--web"),
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(
            git(&mono.join(sub), &["rev-parse", branch]),
            bases[i],
            "{branch}"
        );
    }
    assert_eq!(states("after"), before, "a host repository changed");
    b.env.ok(&["destroy", "m"]);
    for sub in ["", "api", "web"] {
        let refs = refs_of(&mono.join(sub));
        assert!(!refs.contains("refs/agentbox/"), "pins removed: {refs}");
        assert!(
            refs.contains("refs/heads/agentbox/m"),
            "branches stay: {refs}"
        );
    }
    assert_eq!(states("end"), before, "a host repository changed");
}

#[test]
fn a_plain_directory_of_repositories_is_copied_and_each_repository_seeded() {
    let Some((b, _)) =
        boxes("a_plain_directory_of_repositories_is_copied_and_each_repository_seeded")
    else {
        return;
    };
    let mono = b.env.path("plain");
    write(&mono.join("top.txt"), "top\n");
    write(&mono.join("docs/d.txt"), "doc\n");
    repo_with(&mono.join("api"), &[("a.txt", "one\n")]);
    repo_with(&mono.join("web"), &[("w.txt", "w\n")]);
    write(&mono.join("web/dirty.txt"), "untracked\n");
    // The name is taken in `api` only: its branch is bumped, `web`'s is not.
    git(&mono.join("api"), &["branch", "agentbox/p--api"]);
    let before: Vec<String> = ["api", "web"]
        .iter()
        .map(|s| host_state(&mono.join(s)))
        .collect();
    b.create("p", &mono, &[]);
    let out = b.sh_ok(
        "p",
        "cat top.txt docs/d.txt; test -e .git && echo root-repo; \
         git -C api branch --show-current; git -C web branch --show-current; \
         git -C web status --short; grep -c . api/.git/config >/dev/null && echo fresh",
    );
    assert_eq!(
        out,
        "top\ndoc\nagentbox/p--api-2\nagentbox/p--web\n?? dirty.txt\nfresh\n"
    );
    b.sh_ok("p", "cd web && git add -A && git commit -qm 'from the box'");
    assert_eq!(
        git(
            &mono.join("web"),
            &["log", "-1", "--format=%s", "agentbox/p--web"]
        ),
        "from the box\n"
    );
    let synced = b.env.json(&["sync", "p"]);
    assert_eq!(
        synced["repos"].as_array().map(|a| a.len()),
        Some(2),
        "{synced}"
    );
    b.env.ok(&["destroy", "p"]);
    let after: Vec<String> = ["api", "web"]
        .iter()
        .map(|s| host_state(&mono.join(s)))
        .collect();
    assert_eq!(after, before);
}

#[test]
fn a_linked_worktree_is_a_project_and_its_main_repository_stays_hidden() {
    let Some((b, _)) = boxes("a_linked_worktree_is_a_project_and_its_main_repository_stays_hidden")
    else {
        return;
    };
    let main = b.env.path("main");
    repo_with(&main, &[("a.txt", "one\n")]);
    let wt = b.env.path("wt");
    git(
        &main,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "feature",
            wt.to_str().expect("utf-8"),
        ],
    );
    write(&wt.join("a.txt"), "one\nfeature work\n");
    let before = host_state(&main);
    b.create("w", &wt, &[]);
    assert_eq!(
        b.sh_ok("w", "git branch --show-current; git status --short"),
        "agentbox/w\n M a.txt\n"
    );
    // The main repository's .git (config, credentials, hooks) is out of sight.
    let (status, _, _) = b.sh("w", &format!("ls {}/.git/config", main.display()));
    assert_ne!(status, 0, "the main repository's .git is visible");
    b.sh_ok("w", "git commit -qam 'in the worktree box'");
    // Branch and pin live in the common repository.
    assert_eq!(
        git(&main, &["log", "-1", "--format=%s", "agentbox/w"]),
        "in the worktree box\n"
    );
    assert!(refs_of(&main).contains("refs/agentbox/w/base"));
    assert_eq!(git(&wt, &["branch", "--show-current"]), "feature\n");
    b.env.ok(&["destroy", "w"]);
    assert!(!refs_of(&main).contains("refs/agentbox/"));
    assert_eq!(host_state(&main), before);
}

/// A bare repository at `remote` holding `main` of `repo`, which tracks it as `origin`.
fn with_remote(repo: &Path, remote: &Path) {
    git(
        Path::new("/"),
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            remote.to_str().expect("utf-8"),
        ],
    );
    git(
        repo,
        &["remote", "add", "origin", remote.to_str().expect("utf-8")],
    );
    git(repo, &["push", "-q", "-u", "origin", "main"]);
}

#[test]
fn push_sends_the_box_branch_to_the_remote_from_the_host() {
    let Some((b, _)) = boxes("push_sends_the_box_branch_to_the_remote_from_the_host") else {
        return;
    };
    let repo = b.env.path("repo");
    let remote = b.env.path("remote.git");
    repo_with(&repo, &[("a.txt", "one\n")]);
    with_remote(&repo, &remote);
    b.create("pu", &repo, &[]);
    b.sh_ok("pu", "echo two >> a.txt && git commit -qam 'box work'");
    let tip = b.sh_ok("pu", "git rev-parse HEAD");
    let pushed = b.env.json(&["push", "pu"]);
    assert_eq!(pushed[0]["outcome"], "pushed", "{pushed}");
    assert_eq!(pushed[0]["remote"], "origin", "{pushed}");
    assert_eq!(git(&remote, &["rev-parse", "agentbox/pu"]), tip);
    // A remote the repository does not have: a clear error, naming both.
    let out = b.env.run(&["push", "pu", "--remote", "nowhere"]);
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("nowhere") && err.contains(repo.to_str().expect("utf-8")),
        "{err}"
    );
    assert!(err.contains("remote add"), "{err}");
    // From inside the box, through the relay: the push runs on the host (the remote's path
    // is under the test's /tmp, which the box does not even see) for this box only.
    let (_, seen, _) = b.sh("pu", &format!("ls {}", remote.display()));
    assert_eq!(seen, "", "the remote is not reachable from the box");
    b.sh_ok(
        "pu",
        "echo three >> a.txt && git commit -qam 'more box work'",
    );
    let tip = b.sh_ok("pu", "git rev-parse HEAD");
    let out = b.sh_ok("pu", "agentbox push");
    assert!(out.contains("pushed"), "{out}");
    assert_eq!(git(&remote, &["rev-parse", "agentbox/pu"]), tip);
    // A configured `git.remote` is the default remote.
    let backup = b.env.path("backup.git");
    git(
        Path::new("/"),
        &["init", "-q", "--bare", backup.to_str().expect("utf-8")],
    );
    git(
        &repo,
        &["remote", "add", "backup", backup.to_str().expect("utf-8")],
    );
    b.env
        .ok(&["config", "set", "--global", "git.remote", "backup"]);
    assert_eq!(b.env.json(&["push", "pu"])[0]["remote"], "backup");
    assert_eq!(git(&backup, &["rev-parse", "agentbox/pu"]), tip);
    b.env.ok(&["config", "unset", "--global", "git.remote"]);
    let (status, _, err) = b.sh("pu", "agentbox push other-box");
    assert_ne!(status, 0);
    assert!(err.contains("not reachable"), "{err}");
}

#[test]
fn pull_merges_the_remote_branch_inside_the_box() {
    let Some((b, _)) = boxes("pull_merges_the_remote_branch_inside_the_box") else {
        return;
    };
    let repo = b.env.path("repo");
    let remote = b.env.path("remote.git");
    repo_with(&repo, &[("a.txt", "one\n"), ("b.txt", "b\n")]);
    with_remote(&repo, &remote);
    b.create("pl", &repo, &[]);
    // Someone else pushes to the remote.
    let other = b.env.path("other");
    git(
        Path::new("/"),
        &[
            "clone",
            "-q",
            remote.to_str().expect("utf-8"),
            other.to_str().expect("utf-8"),
        ],
    );
    write(&other.join("upstream.txt"), "from upstream\n");
    git(&other, &["add", "-A"]);
    git(&other, &["commit", "-qm", "upstream work"]);
    git(&other, &["push", "-q", "origin", "main"]);
    let upstream = git(&other, &["rev-parse", "HEAD"]);
    let before = host_state(&repo);
    let pulled = b.env.json(&["pull", "pl"]);
    assert_eq!(pulled[0]["outcome"], "merged", "{pulled}");
    assert_eq!(
        b.sh_ok("pl", "cat upstream.txt; git branch --show-current"),
        "from upstream\nagentbox/pl\n"
    );
    b.sh_ok(
        "pl",
        &format!("git merge-base --is-ancestor {} HEAD", upstream.trim()),
    );
    // The merge is a node, and the host's copy of the branch has it.
    git(
        &repo,
        &[
            "merge-base",
            "--is-ancestor",
            upstream.trim(),
            "agentbox/pl",
        ],
    );
    assert_eq!(host_state(&repo), before, "the host repository changed");

    // The agent asks from inside the box: the relay fetches on the host and merges here.
    write(&other.join("second.txt"), "second\n");
    git(&other, &["add", "-A"]);
    git(&other, &["commit", "-qm", "second upstream"]);
    git(&other, &["push", "-q", "origin", "main"]);
    let out = b.sh_ok("pl", "agentbox pull >/dev/null && cat second.txt");
    assert_eq!(out, "second\n");

    // A conflicting change on both sides: non-zero, the box is left mid-merge.
    write(&other.join("b.txt"), "upstream b\n");
    git(&other, &["commit", "-qam", "upstream b"]);
    git(&other, &["push", "-q", "origin", "main"]);
    b.sh_ok("pl", "echo 'box b' > b.txt && git commit -qam 'box b'");
    let out = b.env.run(&["pull", "pl"]);
    assert_eq!(code(&out), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("conflict"), "{}", stderr(&out));
    assert_eq!(
        b.sh_ok("pl", "test -f .git/MERGE_HEAD && git status --short b.txt"),
        "UU b.txt\n"
    );
}

#[test]
fn nothing_in_a_box_can_write_to_a_host_repository() {
    let Some((b, _)) = boxes("nothing_in_a_box_can_write_to_a_host_repository") else {
        return;
    };
    let mono = b.env.path("mono");
    repo_with(&mono, &[("README", "root\n"), (".gitignore", "api/\n")]);
    repo_with(&mono.join("api"), &[("a.txt", "one\n")]);
    write(&mono.join(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n");
    let before = [root_state(&mono, &["api"]), host_state(&mono.join("api"))];
    b.create("x", &mono, &[]);
    for (host, inside, objects) in [
        (mono.clone(), "/workspace", "/run/agentbox/git/objects"),
        (
            mono.join("api"),
            "/workspace/api",
            "/run/agentbox/git/sub/api/objects",
        ),
    ] {
        let h = host.display();
        for attempt in [
            format!("echo evil >> {h}/.git/hooks/pre-commit"),
            format!("git --git-dir={h}/.git config core.evil yes"),
            format!("git --git-dir={h}/.git update-ref refs/heads/evil HEAD"),
            format!("touch {objects}/evil"),
            format!("mkdir {objects}/ee"),
            format!("cp {inside}/.git/HEAD {objects}/info/evil"),
        ] {
            // Whether it fails or lands in the box's own layer, the host must not see it.
            let _ = b.sh("x", &attempt);
        }
        // The box's own writes go to its own repository.
        b.sh_ok(
            "x",
            &format!("cd {inside} && echo blob | git hash-object -w --stdin >/dev/null && git update-ref refs/heads/mine HEAD"),
        );
        let (status, _, _) = b.sh("x", &format!("touch {objects}/evil"));
        assert_ne!(status, 0, "{objects} is writable");
        assert!(!refs_of(&host).contains("refs/heads/evil"), "{h}");
        assert!(!refs_of(&host).contains("refs/heads/mine"), "{h}");
    }
    assert_eq!(
        [root_state(&mono, &["api"]), host_state(&mono.join("api"))],
        before,
        "a host repository changed"
    );
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
