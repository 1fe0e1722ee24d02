//! Boxes end to end, with the real binary, real namespaces, overlays and processes (root):
//! the fixture here, the tests by concern in the files beside it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{code, git, kill_supervisors, stderr, supervisor_pid, write, Env};
use agentbox_testkit::tier::require_root;

mod capture;
mod exec;
mod isolation;
mod lifecycle;
mod prestage;
mod remotes;
mod seeding;

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

/// Messages of the box's nodes, oldest first.
fn messages(b: &Boxes, name: &str) -> Vec<String> {
    b.env.json(&["log", name])["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["message"].as_str().unwrap_or("").to_owned())
        .collect()
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
