//! Commands in a box: `exec`'s arguments, stdio and status, signals, spawned processes, the
//! shell on a terminal, `run --supervise`, and the errors of box commands.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use crate::common::{code, stderr};
use agentbox_testkit::tier::require_root;

use super::*;

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
