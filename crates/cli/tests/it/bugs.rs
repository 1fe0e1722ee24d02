//! Behaviours a new user relies on at the edges: commands without a terminal, processes
//! that die at once, limits that kill, bad working directories, plain exports, names that
//! look like ids, and a current directory a checkout replaced (the real binary; most need
//! root).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{code, kill_supervisors, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// A temporary home whose box supervisors are killed when the test ends.
struct Boxes {
    env: Env,
    proj: PathBuf,
}

impl Boxes {
    /// `None`: the test is skipped (not root).
    fn new(test: &str) -> Option<Boxes> {
        if !require_root(test) {
            return None;
        }
        let env = Env::new();
        let proj = env.home.path().join("proj");
        write(&proj.join("README"), "readme\n");
        Some(Boxes { env, proj })
    }

    fn create(&self, name: &str, extra: &[&str]) {
        let from = self.proj.to_str().expect("utf-8 path");
        let mut args = vec!["create", name, "--from", from];
        args.extend_from_slice(extra);
        self.env.ok(&args);
    }
}

impl Drop for Boxes {
    fn drop(&mut self) {
        kill_supervisors(&self.env.path("home"));
    }
}

/// Wait for `child` to end; a child still running after a generous deadline is killed and
/// the test fails (it hung).
fn wait_or_fail(mut child: Child, what: &str) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("{what} hung; stderr: {}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn shell_without_a_terminal_reads_stdin_to_its_end_and_ends_on_sigterm() {
    let Some(b) = Boxes::new("shell_without_a_terminal_reads_stdin_to_its_end_and_ends_on_sigterm")
    else {
        return;
    };
    b.create("sh", &["--no-capture"]);
    // A script on stdin: its output and exit status pass through, and its end ends the shell.
    let mut child = b
        .env
        .command(&["shell", "sh"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"echo hi\necho there >&2\nexit 3\n")
        .expect("write");
    let out = wait_or_fail(child, "a shell fed a script");
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    assert!(stderr(&out).contains("there"), "{}", stderr(&out));

    // The end of input alone ends it too, with the last command's status.
    let mut child = b
        .env
        .command(&["shell", "sh"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"echo $((40 + 2))\n")
        .expect("write");
    let out = wait_or_fail(child, "a shell at the end of its input");
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "42\n");

    // SIGTERM to the client ends the shell, even in the middle of a command.
    let mut child = b
        .env
        .command(&["shell", "sh"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(b"echo ready\nsleep 1000\n").expect("write");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().expect("a line").expect("read"), "ready");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).expect("pid"),
        rustix::process::Signal::TERM,
    )
    .expect("signal");
    let out = wait_or_fail(child, "a shell sent SIGTERM");
    drop(input);
    assert_eq!(code(&out), Some(128 + 15), "{}", stderr(&out));
}

#[test]
fn a_working_directory_that_does_not_exist_is_an_error() {
    let Some(b) = Boxes::new("a_working_directory_that_does_not_exist_is_an_error") else {
        return;
    };
    b.create("wd", &["--no-capture"]);
    for args in [
        &["exec", "wd", "-w", "/nonexistent/dir", "--", "pwd"][..],
        &["spawn", "wd", "-w", "/nonexistent/dir", "--", "pwd"][..],
        &["shell", "wd", "-w", "/nonexistent/dir"][..],
    ] {
        let out = b
            .env
            .command(args)
            .stdin(Stdio::null())
            .output()
            .expect("run");
        assert_eq!(code(&out), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out)
                .contains("the working directory /nonexistent/dir does not exist in the box"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(out.stdout.is_empty(), "{args:?} ran: {:?}", out.stdout);
    }
    // A directory that exists is used as it is.
    let out = b.env.ok(&["exec", "wd", "-w", "/tmp", "--", "pwd"]);
    assert_eq!(out, "/tmp\n");
    // The default directory (the box's copy of the caller's) still falls back to the
    // nearest one the box has.
    let sub = b.proj.join("made-after-create");
    std::fs::create_dir_all(&sub).expect("mkdir");
    let out = b
        .env
        .command(&["exec", "wd", "--", "pwd"])
        .current_dir(&sub)
        .output()
        .expect("run");
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "/workspace\n");
}

#[test]
fn spawn_reports_a_process_that_dies_at_once_and_ps_shows_exits() {
    let Some(b) = Boxes::new("spawn_reports_a_process_that_dies_at_once_and_ps_shows_exits") else {
        return;
    };
    b.create("sp", &["--no-capture"]);
    let out = b.env.run(&[
        "spawn",
        "sp",
        "--",
        "sh",
        "-c",
        "echo cannot listen: address in use >&2; exit 3",
    ]);
    assert_eq!(code(&out), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("exited at once with status 3"), "{err}");
    assert!(err.contains("cannot listen: address in use"), "{err}");
    assert!(out.stdout.is_empty(), "{:?}", out.stdout);

    // A process that keeps running is started as before.
    let long = b.env.json(&["spawn", "sp", "--", "sleep", "1000"]);
    assert!(long["id"].as_u64().is_some(), "{long}");
    // `ps` lists the running process, then the exit with its status and first lines.
    let ps = b.env.json(&["ps", "sp"]);
    let ps = ps.as_array().expect("a list");
    assert_eq!(ps.len(), 2, "{ps:?}");
    assert_eq!(ps[0]["argv"], serde_json::json!(["sleep", "1000"]));
    assert!(ps[0]["exit"].is_null(), "{ps:?}");
    assert_eq!(ps[1]["exit"]["status"], 3, "{ps:?}");
    assert_eq!(
        ps[1]["exit"]["output"],
        serde_json::json!(["cannot listen: address in use"])
    );
    let human = b.env.ok(&["ps", "sp"]);
    assert!(human.contains("running"), "{human}");
    assert!(human.contains("exited 3"), "{human}");
    assert!(human.contains("| cannot listen: address in use"), "{human}");

    // Only the last 20 exits are kept.
    for i in 0..25 {
        let _ = b
            .env
            .run(&["spawn", "sp", "--", "sh", "-c", &format!("exit {}", 10 + i)]);
    }
    let ps = b.env.json(&["ps", "sp"]);
    let exits: Vec<i64> = ps
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|p| p["exit"]["status"].as_i64())
        .collect();
    assert_eq!(exits, (15..35).collect::<Vec<i64>>());
}

#[test]
fn a_memory_limit_kill_says_so() {
    let Some(b) = Boxes::new("a_memory_limit_kill_says_so") else {
        return;
    };
    b.create("mem", &["--no-capture", "--memory", "64M"]);
    // `tail` keeps the one endless line of /dev/zero in memory until the limit kills it.
    let out = b.env.run(&["exec", "mem", "--", "tail", "/dev/zero"]);
    assert_eq!(code(&out), Some(137), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "agentbox: the command was killed: the box ran out of memory (limit 64.0 MiB; --memory raises it)"
        ),
        "{}",
        stderr(&out)
    );
    // Another SIGKILL is not blamed on memory.
    let out = b.env.run(&["exec", "mem", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(code(&out), Some(137), "{}", stderr(&out));
    assert!(!stderr(&out).contains("out of memory"), "{}", stderr(&out));
}

#[test]
fn a_rootfs_export_is_a_plain_tar() {
    let t = Env::new();
    let src = t.path("tree");
    write(&src.join("small"), "small\n");
    // Above the size the writer holds in memory: its content streams.
    write(&src.join("dir/large"), &"x".repeat(3 << 20));
    std::os::unix::fs::symlink("small", src.join("link")).expect("symlink");
    t.ok(&["env", src.to_str().expect("utf-8")]);
    let tar = t.path("tree.tar");
    let tar = tar.to_str().expect("utf-8");
    t.ok(&[
        "export",
        "tree",
        "--kind",
        "rootfs",
        "--compress",
        "none",
        "-o",
        tar,
    ]);
    // GNU tar warns about every record it does not know: there must be none.
    let listed = std::process::Command::new("tar")
        .args(["-tvf", tar])
        .output()
        .expect("run tar");
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert_eq!(stderr(&listed), "", "tar warned");
    let names = String::from_utf8_lossy(&listed.stdout);
    assert!(names.contains("./dir/large"), "{names}");
    let out = t.path("unpacked");
    std::fs::create_dir_all(&out).expect("mkdir");
    let unpacked = std::process::Command::new("tar")
        .args(["-xf", tar, "-C"])
        .arg(&out)
        .output()
        .expect("run tar");
    assert!(unpacked.status.success(), "{}", stderr(&unpacked));
    assert_eq!(stderr(&unpacked), "", "tar warned");
    assert_eq!(
        std::fs::read_to_string(out.join("dir/large")).expect("large"),
        "x".repeat(3 << 20)
    );
    assert_eq!(
        std::fs::read_link(out.join("link")).expect("link"),
        Path::new("small")
    );
}

#[test]
fn names_of_hex_digits_work_unless_they_are_an_id_prefix() {
    let t = Env::new();
    // An environment named from its directory, `d`.
    let d = t.path("d");
    write(&d.join("f"), "one\n");
    let out = t.command(&["env", "./d"]).output().expect("run");
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    write(&d.join("f"), "two\n");
    t.ok(&["commit", "d", "-m", "second"]);
    let log = t.json(&["log", "d"]);
    let nodes = log["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 2, "{log}");
    // Another directory's name that is all hex.
    let cafe = t.path("cafe");
    write(&cafe.join("f"), "x\n");
    t.ok(&["env", cafe.to_str().expect("utf-8")]);
    assert_eq!(
        t.json(&["log", "cafe"])["nodes"].as_array().map(Vec::len),
        Some(1)
    );

    // A name that is a prefix of an existing node's id is refused: it would take the
    // prefix from the node.
    let id = nodes[0]["id"].as_str().expect("an id");
    let other = t.path("other");
    std::fs::create_dir_all(&other).expect("mkdir");
    let out = t.run(&["env", other.to_str().expect("utf-8"), "--name", &id[..6]]);
    assert_eq!(code(&out), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot be a prefix of an existing id"),
        "{}",
        stderr(&out)
    );
    // A directory whose name is no valid name gets one made from it.
    let spaced = t.path("my dir");
    write(&spaced.join("f"), "x\n");
    t.ok(&["env", spaced.to_str().expect("utf-8")]);
    t.ok(&["log", "my-dir"]);
}

#[test]
fn a_box_named_with_hex_digits_works() {
    let Some(b) = Boxes::new("a_box_named_with_hex_digits_works") else {
        return;
    };
    b.create("cafe", &["--no-capture"]);
    let out = b.env.ok(&["exec", "cafe", "--", "hostname"]);
    assert_eq!(out, "cafe\n");
    // A name equal to a prefix of an existing box's id is refused.
    let list = b.env.json(&["list"]);
    let id = list[0]["box"]["id"].as_str().expect("an id").to_owned();
    let from = b.proj.to_str().expect("utf-8");
    let out = b.env.run(&["create", &id[..5], "--from", from]);
    assert_eq!(code(&out), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot be a prefix of an existing id"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_current_directory_replaced_by_a_checkout_is_explained() {
    // The environment's directory is a mount, which a checkout replaces.
    if !require_root("a_current_directory_replaced_by_a_checkout_is_explained") {
        return;
    }
    let t = Env::new();
    let d = t.path("work");
    write(&d.join("sub/f"), "one\n");
    t.ok(&["env", d.to_str().expect("utf-8")]);
    write(&d.join("sub/f"), "two\n");
    t.ok(&["commit", "work", "-m", "two"]);
    // A shell inside the directory, a checkout under it, then a command from that shell.
    let agentbox = env!("CARGO_BIN_EXE_agentbox");
    let sub = d.join("sub");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"cd "$1" && "$2" checkout HEAD~1 >/dev/null 2>&1 && "$2" commit -m three"#)
        .args(["sh", sub.to_str().expect("utf-8"), agentbox])
        .env("AGENTBOX_HOME", t.path("home"))
        .output()
        .expect("run sh");
    assert_eq!(code(&out), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "the current directory {} no longer exists (a checkout replaced it); run cd \"$PWD\"",
            sub.display()
        )),
        "{err}"
    );
    assert!(!err.contains("os error"), "{err}");
}

#[test]
fn diff_takes_a_box_and_shows_contents_with_patch() {
    let Some(b) = Boxes::new("diff_takes_a_box_and_shows_contents_with_patch") else {
        return;
    };
    b.create("df", &[]);
    b.env.ok(&[
        "exec",
        "df",
        "--no-capture",
        "--",
        "sh",
        "-c",
        "echo more >> README; printf '\\0bin' > data; mkdir -p r/.git/objects; echo x > r/.git/objects/o; echo y > r/.git/HEAD",
    ]);
    // `diff BOX`: the box's working tree against its HEAD.
    let out = b.env.ok(&["diff", "df"]);
    assert!(out.contains("M workspace/README"), "{out}");
    assert!(out.contains("+ workspace/data"), "{out}");
    // A repository's git directory is one line, not one per object.
    assert!(
        out.lines()
            .any(|l| l.starts_with("~ workspace/r/.git  (")
                && l.ends_with("inside the git directory)")),
        "{out}"
    );
    assert!(!out.contains("objects/o"), "{out}");
    // `-p`: the content, as a unified diff; binary files are named.
    let out = b.env.ok(&["diff", "df", "-p"]);
    assert!(out.contains("--- a/workspace/README"), "{out}");
    assert!(out.contains("+more"), "{out}");
    assert!(out.contains("binary file workspace/data differs"), "{out}");
    let json = b.env.json(&["diff", "df", "-p"]);
    let readme = json
        .as_array()
        .and_then(|a| a.iter().find(|c| c["path"] == "workspace/README"))
        .expect("README in the JSON");
    assert!(
        readme["patch"]
            .as_str()
            .is_some_and(|p| p.contains("+more")),
        "{readme}"
    );
    // Inside the box too.
    let out = b
        .env
        .ok(&["exec", "df", "--no-capture", "--", "agentbox", "diff", "-p"]);
    assert!(out.contains("+more"), "{out}");
}

/// A file name is box-controlled: one holding a newline and a forged header must not add a
/// line of its own to the patch (git quotes such names; so does agentbox).
#[test]
fn a_file_name_cannot_forge_lines_of_a_patch() {
    let Some(b) = Boxes::new("a_file_name_cannot_forge_lines_of_a_patch") else {
        return;
    };
    b.create("fp", &[]);
    b.env.ok(&[
        "exec",
        "fp",
        "--no-capture",
        "--",
        "sh",
        "-c",
        "printf 'x\\n' > \"$(printf 'z\\n+++ forged\\n@@ -0,0 +1 @@\\n+owned')\"; printf 'v\\n' > 'q\"uote'",
    ]);
    let out = b.env.ok(&["diff", "fp", "-p"]);
    let forged: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("+++ forged") || *l == "+owned")
        .collect();
    assert!(forged.is_empty(), "forged lines {forged:?} in:\n{out}");
    // The name is there, quoted as git quotes it.
    assert!(
        out.contains("+++ \"b/workspace/z\\n+++ forged\\n@@ -0,0 +1 @@\\n+owned\""),
        "{out}"
    );
    assert!(out.contains("+++ \"b/workspace/q\\\"uote\""), "{out}");
    // Each added file has exactly one header pair.
    assert_eq!(
        out.lines().filter(|l| l.starts_with("+++ ")).count(),
        2,
        "{out}"
    );
}

#[test]
fn boxes_listed_across_projects_name_their_project_and_status_lists_a_projects_boxes() {
    let Some(b) = Boxes::new(
        "boxes_listed_across_projects_name_their_project_and_status_lists_a_projects_boxes",
    ) else {
        return;
    };
    let other = b.env.path("other");
    write(&other.join("README"), "other\n");
    b.create("first", &[]);
    b.create("second", &[]);
    b.env.ok(&[
        "create",
        "elsewhere",
        "--from",
        other.to_str().expect("utf-8"),
    ]);
    // Outside both projects: the numbers repeat (#1 in each), so the project is shown.
    let out = b.env.ok(&["list"]);
    assert!(
        out.lines().next().is_some_and(|h| h.contains("PROJECT")),
        "{out}"
    );
    let row = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(2) == Some(name))
            .unwrap_or_else(|| panic!("{name} listed: {out}"))
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
    };
    assert_eq!(row("first"), ["1", "proj"]);
    assert_eq!(row("elsewhere"), ["1", "other"]);
    // In a project with two boxes, plain `status` lists them.
    let out = b.env.run_in(&b.proj, &["status"]);
    assert!(out.contains("box #1") && out.contains("first"), "{out}");
    assert!(out.contains("box #2") && out.contains("second"), "{out}");
}

#[test]
fn a_box_that_cannot_start_says_why() {
    let Some(b) = Boxes::new("a_box_that_cannot_start_says_why") else {
        return;
    };
    b.create("broken", &[]);
    // Its base image is gone (as if removed behind agentbox's back).
    let record = b.env.path("home/boxes/broken/box.json");
    let mut rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record).expect("read")).expect("json");
    rec["image"] = serde_json::json!("gone");
    std::fs::write(&record, rec.to_string()).expect("write");
    let out = b.env.run(&["exec", "broken", "--", "true"]);
    assert_eq!(code(&out), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    // The supervisor's own error, as it reported it on its startup pipe.
    assert!(
        err.contains("box \"broken\" could not start: setting up the box failed"),
        "{err}"
    );
    assert!(err.contains("images/gone"), "{err}");
    assert_eq!(err.matches("could not start").count(), 1, "{err}");
}

#[test]
fn a_box_of_another_provider_is_not_run_by_this_one() {
    let Some(b) = Boxes::new("a_box_of_another_provider_is_not_run_by_this_one") else {
        return;
    };
    b.create("theirs", &[]);
    let record = b.env.path("home/boxes/theirs/box.json");
    let mut rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record).expect("read")).expect("json");
    // A provider this binary lacks (docker is one it has).
    rec["provider"] = serde_json::json!("elsewhere");
    std::fs::write(&record, rec.to_string()).expect("write");
    let out = b.env.run(&["exec", "theirs", "--", "true"]);
    assert_ne!(code(&out), Some(0));
    assert!(
        stderr(&out).contains("is run by the \"elsewhere\" provider"),
        "{}",
        stderr(&out)
    );
}
