//! One list of box behaviours, driven through the binary, run against the local provider and
//! the Docker provider (a real engine, its test image built from the host's busybox and
//! `git`): create from a dirty repository (the work carried over), exec (exact argv, stdin,
//! statuses), status, commit/log/show/diff, tag, checkout/undo, fork, sync/push/pull,
//! checkpoint create/ls/rm, create --checkpoint, spawn/ps/logs/kill, stop/start, destroy,
//! prune. Where a provider cannot do something, the exact refusal is asserted
//! ([`Subject::refuses`]); nothing is skipped for one provider only.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use agentbox_core::Home;

use crate::common::{code, git, kill_supervisors, log_ids, stderr, write, Env};
use crate::docker::{engine, on_engine, Sweep};
use crate::docker_history::git_image;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Local,
    Docker,
}

/// The provider under test, its home and project.
struct Subject<'a> {
    kind: Kind,
    env: &'a Env,
    project: PathBuf,
    remote: PathBuf,
    /// What `create` takes to make a box of this provider.
    create: Vec<String>,
}

impl Subject<'_> {
    fn run(&self, args: &[&str]) -> Output {
        self.env.run(args)
    }

    /// `agentbox ARGS`, required to succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            code(&out),
            Some(0),
            "{:?}: agentbox {args:?}: {}",
            self.kind,
            stderr(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        serde_json::from_str(&self.ok(&a)).expect("JSON")
    }

    /// `create [provider args] ARGS NAME` in the project.
    fn create(&self, args: &[&str], name: &str) -> String {
        let mut a: Vec<&str> = vec!["create"];
        a.extend(self.create.iter().map(String::as_str));
        a.extend_from_slice(args);
        a.push(name);
        self.env.run_in(&self.project, &a)
    }

    /// `exec BOX -- sh -c SCRIPT`: status, stdout, stderr.
    fn sh(&self, name: &str, script: &str) -> (Option<i32>, String, String) {
        let out = self.run(&["exec", name, "--", "sh", "-c", script]);
        (
            code(&out),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr(&out),
        )
    }

    /// `sh -c SCRIPT` in the box, required to succeed; its stdout.
    fn sh_ok(&self, name: &str, script: &str) -> String {
        let (status, out, err) = self.sh(name, script);
        assert_eq!(status, Some(0), "{:?}: {script}: {err}", self.kind);
        out
    }

    /// `agentbox ARGS` fails on the Docker provider with exit status `status` and a message
    /// holding `message`; on the local provider it succeeds, its stdout.
    fn refuses(&self, args: &[&str], status: i32, message: &str) -> Option<String> {
        if self.kind == Kind::Local {
            return Some(self.ok(args));
        }
        let out = self.run(args);
        assert_eq!(code(&out), Some(status), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(message),
            "{args:?}: expected {message:?} in:\n{}",
            stderr(&out)
        );
        None
    }
}

/// The project: `a.txt` committed on `main`, pushed to a bare remote it tracks; then
/// `a.txt` changed and `u.txt` untracked (the work a box carries over).
fn project(root: &Path) -> (PathBuf, PathBuf) {
    let remote = root.join("remote.git");
    let project = root.join("project");
    git(
        root,
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            remote.to_str().expect("utf-8"),
        ],
    );
    write(&project.join(".gitignore"), "deps/\n");
    write(&project.join("a.txt"), "one\n");
    git(&project, &["init", "-q", "-b", "main"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "first"]);
    git(
        &project,
        &["remote", "add", "origin", remote.to_str().expect("utf-8")],
    );
    git(&project, &["push", "-q", "-u", "origin", "main"]);
    write(&project.join("a.txt"), "one, uncommitted\n");
    write(&project.join("u.txt"), "untracked\n");
    (project, remote)
}

fn suite(s: &Subject<'_>) {
    let name = "conf";

    // create from a dirty repository: the uncommitted and untracked work is carried over.
    s.create(&[], name);
    assert_eq!(
        s.sh_ok(name, "cat a.txt u.txt"),
        "one, uncommitted\nuntracked\n"
    );

    exec_passes_argv_stdin_and_statuses(s, name);

    // status.
    let status = s.json(&["status", name]);
    assert_eq!(status["box"]["state"], "running", "{status}");

    history(s, name);
    git_round_trip(s, name);
    fork(s, name);
    checkpoints(s, name);
    processes(s, name);

    // stop/start: the tree stays, the box runs again.
    s.ok(&["stop", name]);
    assert_eq!(s.json(&["status", name])["box"]["state"], "stopped");
    s.ok(&["start", name]);
    assert_eq!(s.json(&["status", name])["box"]["state"], "running");
    assert_eq!(s.sh_ok(name, "cat b.txt"), "two\n");

    // destroy, then gc and prune leave nothing of the box.
    s.ok(&["destroy", name]);
    let out = s.run(&["status", name]);
    assert_ne!(code(&out), Some(0));
    assert!(stderr(&out).contains(name), "{}", stderr(&out));
    assert!(!s.ok(&["list", "--all"]).contains(name));
    s.ok(&["gc"]);
    s.ok(&["prune", "--min-age", "0"]);
    assert!(s
        .ok(&["prune", "--min-age", "0", "--dry-run"])
        .contains("nothing to prune"));
}

/// `exec`: the argv exactly as given, stdin passed, the command's status as its own.
fn exec_passes_argv_stdin_and_statuses(s: &Subject<'_>, name: &str) {
    assert_eq!(
        s.ok(&["exec", name, "--", "printf", "%s|", "a b", "*", "", "-x"]),
        "a b|*||-x|"
    );
    let mut child = s
        .env
        .command(&["exec", "-T", name, "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentbox");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"piped in\n")
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "piped in\n");
    let (status, out, err) = s.sh(name, "echo out; echo err >&2; exit 7");
    assert_eq!(
        (status, out.as_str(), err.as_str()),
        (Some(7), "out\n", "err\n")
    );
    assert_eq!(code(&s.run(&["exec", name, "--", "false"])), Some(1));
    assert_eq!(
        code(&s.run(&["exec", name, "--", "no-such-command-xyz"])),
        Some(127)
    );
}

/// commit/log/show/diff, tag, checkout and undo.
fn history(s: &Subject<'_>, name: &str) {
    let before = log_ids(&s.json(&["log", name])).len();
    // A command's change is a node of its own.
    s.sh_ok(name, "echo two > b.txt");
    let log = s.json(&["log", name]);
    assert_eq!(log_ids(&log).len(), before + 1, "{log}");
    let show = s.ok(&["show", name, "HEAD"]);
    assert!(show.contains("b.txt"), "{show}");
    // An explicit commit of a change made without capture.
    s.ok(&[
        "exec",
        "--no-capture",
        name,
        "--",
        "sh",
        "-c",
        "echo three > c.txt",
    ]);
    let diff = s.ok(&["diff", name]);
    assert!(diff.contains("c.txt"), "{diff}");
    s.ok(&["commit", name, "-m", "by hand"]);
    let log = s.json(&["log", name]);
    assert_eq!(log_ids(&log).len(), before + 2, "{log}");
    assert!(log.to_string().contains("by hand"), "{log}");
    let diff = s.ok(&["diff", name, "HEAD~2", "HEAD"]);
    assert!(diff.contains("b.txt") && diff.contains("c.txt"), "{diff}");
    let patch = s.ok(&["diff", "-p", name, "HEAD~1", "HEAD"]);
    assert!(patch.contains("+three"), "{patch}");
    // A diff from a node other than HEAD to the working tree.
    if let Some(d) = s.refuses(
        &["diff", name, "HEAD~1"],
        4,
        "box \"conf\": the docker provider cannot list the changes from a node other than HEAD to the working tree yet",
    ) {
        assert!(d.contains("c.txt"), "{d}");
    }

    // tag: set, list, check out by it (and back), delete.
    s.ok(&["tag", name, "two", "HEAD~1"]);
    s.ok(&["tag", name, "tip"]);
    let tags = s.ok(&["tag", name]);
    assert!(tags.contains("two") && tags.contains("tip"), "{tags}");
    s.ok(&["checkout", name, "two"]);
    let (status, _, _) = s.sh(name, "cat c.txt");
    assert_ne!(status, Some(0), "c.txt is gone with the checkout");
    s.ok(&["checkout", name, "tip"]);
    assert_eq!(s.sh_ok(name, "cat c.txt"), "three\n");
    s.ok(&["tag", name, "-d", "two"]);
    s.ok(&["tag", name, "-d", "tip"]);
    let tags = s.ok(&["tag", name]);
    assert!(!tags.contains("two") && !tags.contains("tip"), "{tags}");

    // undo moves back to HEAD's parent.
    s.sh_ok(name, "echo four > d.txt");
    s.ok(&["undo", name]);
    let (status, _, _) = s.sh(name, "cat d.txt");
    assert_ne!(status, Some(0), "d.txt is gone with the undo");
    assert_eq!(s.sh_ok(name, "cat b.txt"), "two\n");
}

/// sync brings the box's commits to `agentbox/BOX` on the host; push sends it to the
/// remote; pull merges the remote's new commit into the box.
fn git_round_trip(s: &Subject<'_>, name: &str) {
    s.sh_ok(
        name,
        "git add b.txt && git -c user.name=b -c user.email=b@b commit -qm 'box work'",
    );
    let tip = s.sh_ok(name, "git rev-parse HEAD");
    s.ok(&["sync", name]);
    assert_eq!(
        git(&s.project, &["rev-parse", &format!("agentbox/{name}")]),
        tip
    );
    s.ok(&["push", name]);
    assert_eq!(
        git(&s.remote, &["rev-parse", &format!("agentbox/{name}")]),
        tip
    );
    // Someone else pushes to main; the box pulls it.
    let root = s.remote.parent().expect("root");
    let other = root.join(format!("other-{:?}", s.kind));
    git(
        root,
        &[
            "clone",
            "-q",
            s.remote.to_str().expect("utf-8"),
            other.to_str().expect("utf-8"),
        ],
    );
    write(&other.join("e.txt"), "from elsewhere\n");
    git(&other, &["add", "-A"]);
    git(&other, &["commit", "-qm", "elsewhere"]);
    git(&other, &["push", "-q", "origin", "main"]);
    s.ok(&["pull", name]);
    assert_eq!(s.sh_ok(name, "cat e.txt"), "from elsewhere\n");
}

/// fork: a box of the same provider on its own branch with the source's work; the source
/// is untouched.
fn fork(s: &Subject<'_>, name: &str) {
    s.sh_ok(name, "echo forked > f.txt");
    let made = s.json(&["fork", name, "conf-fork"]);
    let kind = match s.kind {
        Kind::Local => "local",
        Kind::Docker => "docker",
    };
    assert_eq!(made["provider"], kind, "{made}");
    assert_eq!(s.sh_ok("conf-fork", "cat f.txt"), "forked\n");
    assert_eq!(
        s.sh_ok("conf-fork", "git symbolic-ref --short HEAD"),
        "agentbox/conf-fork\n"
    );
    s.sh_ok("conf-fork", "echo only-in-fork > g.txt");
    let (status, _, _) = s.sh(name, "cat g.txt");
    assert_ne!(status, Some(0), "the source is untouched");
    s.ok(&["destroy", "conf-fork"]);
}

/// checkpoint create/ls/rm, and a box from a checkpoint: warm (its ignored files kept),
/// on a fresh branch at the host's commit, the host's work carried over.
fn checkpoints(s: &Subject<'_>, name: &str) {
    s.sh_ok(name, "mkdir -p deps && echo warm > deps/lib.txt");
    let c = s.json(&["checkpoint", "create", name, "--name", "warm"]);
    assert_eq!(c["name"], "warm", "{c}");
    let listed = s.ok(&["checkpoint", "ls", "--all"]);
    assert!(listed.contains("warm"), "{listed}");
    s.env
        .run_in(&s.project, &["create", "--checkpoint", "warm", "conf-warm"]);
    assert_eq!(s.sh_ok("conf-warm", "cat deps/lib.txt"), "warm\n");
    assert_eq!(s.sh_ok("conf-warm", "cat u.txt"), "untracked\n");
    assert_eq!(
        s.sh_ok("conf-warm", "git symbolic-ref --short HEAD"),
        "agentbox/conf-warm\n"
    );
    let status = s.json(&["status", "conf-warm"]);
    assert_eq!(status["box"]["state"], "running", "{status}");
    s.ok(&["destroy", "conf-warm"]);
    s.ok(&["checkpoint", "rm", "warm"]);
    assert!(!s.ok(&["checkpoint", "ls", "--all"]).contains("warm"));
}

/// spawn/ps/logs/kill by id; `logs -f` returns once the process has ended.
fn processes(s: &Subject<'_>, name: &str) {
    let started = s.json(&[
        "spawn",
        name,
        "--",
        "sh",
        "-c",
        "echo from-the-box; exec sleep 300",
    ]);
    let id_n = started["id"].as_u64().expect("id");
    let id = id_n.to_string();
    let mut logged = String::new();
    for _ in 0..200 {
        logged = s.ok(&["logs", name, &id]);
        if !logged.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(logged, "from-the-box\n");
    let ps = s.ok(&["ps", name]);
    assert!(
        ps.lines()
            .any(|l| l.starts_with(&format!("{id} ")) && l.contains("running")),
        "{ps}"
    );
    s.ok(&["kill", name, &id, "--signal", "TERM"]);
    assert_eq!(s.ok(&["logs", name, &id, "-f"]), "from-the-box\n");
    let ps = s.json(&["ps", name]);
    let ended = ps
        .as_array()
        .expect("list")
        .iter()
        .find(|p| p["id"] == id_n)
        .expect("listed")
        .clone();
    assert_eq!(ended["exit"]["status"], 143, "{ps}");
    let out = s.run(&["logs", name, "99"]);
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
}

#[test]
fn the_local_provider_conforms_through_the_binary() {
    let test = "the_local_provider_conforms_through_the_binary";
    if !agentbox_testkit::tier::require_root(test) {
        return;
    }
    let env = Env::new();
    let (project, remote) = project(env.home.path());
    let s = Subject {
        kind: Kind::Local,
        env: &env,
        project,
        remote,
        create: Vec::new(),
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| suite(&s)));
    kill_supervisors(&env.path("home"));
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn the_docker_provider_conforms_through_the_binary() {
    let test = "the_docker_provider_conforms_through_the_binary";
    let Some(engine) = engine(test) else { return };
    if !agentbox_testkit::tier::require_tool(test, "git") {
        return;
    }
    let image = git_image(&engine);
    let env = Env::new();
    let home = Home::at(env.path("home"));
    let _sweep = Sweep(&engine, home.clone());
    let (project, remote) = project(env.home.path());
    let s = Subject {
        kind: Kind::Docker,
        env: &env,
        project,
        remote,
        create: vec![
            "--provider".into(),
            "docker".into(),
            "--image".into(),
            image,
        ],
    };
    suite(&s);
    assert_eq!(
        on_engine(&engine, &home),
        (0, 0),
        "nothing left on the engine"
    );
}
