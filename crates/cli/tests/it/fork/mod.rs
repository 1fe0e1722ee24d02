//! `fork` and `tournament` end to end: the real binary, real boxes (root), real git
//! repositories on the host.
//!
//! The fixture is here; the tests of each command in the file named after it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::{code, git, kill_supervisors, stderr, write, Env};
use agentbox_testkit::tier::require_root;

mod branches;
mod tournament;

/// A temporary home and a host repository; the home's box supervisors are killed when the
/// test ends (and with them every box process).
struct Fixture {
    env: Env,
    repo: PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        kill_supervisors(&self.env.path("home"));
    }
}

/// A root-tier fixture (`None`: skipped) whose repository has one commit on `main`, then a
/// modified tracked file and an untracked one (the host's uncommitted work), and box `src`
/// made from it.
fn fixture(test: &str, create: &[&str]) -> Option<Fixture> {
    if !require_root(test) {
        return None;
    }
    let env = Env::new();
    let repo = env.path("repo");
    write(&repo.join("a.txt"), "one\n");
    write(&repo.join("keep.txt"), "keep\n");
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.name", "t"]);
    git(&repo, &["config", "user.email", "t@example.com"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    write(&repo.join("a.txt"), "one\nhost-dirty\n");
    write(&repo.join("host-untracked.txt"), "u\n");
    let f = Fixture { env, repo };
    let mut args = vec!["create", "src", "--from", f.repo.to_str().expect("utf-8")];
    args.extend_from_slice(create);
    f.env.ok(&args);
    Some(f)
}

impl Fixture {
    /// `exec BOX -- sh -c SCRIPT`, its node recorded; stdout.
    fn sh(&self, name: &str, script: &str) -> String {
        self.env.ok(&["exec", name, "--", "sh", "-c", script])
    }

    /// `exec --no-capture BOX -- sh -c SCRIPT`: reading, recording nothing; stdout.
    fn look(&self, name: &str, script: &str) -> String {
        self.env
            .ok(&["exec", name, "--no-capture", "--", "sh", "-c", script])
    }

    /// Box `name`'s record as the home keeps it.
    fn record(&self, name: &str) -> serde_json::Value {
        let path = self.env.path("home/boxes").join(name).join("box.json");
        serde_json::from_slice(&std::fs::read(&path).expect("a record")).expect("JSON")
    }

    fn head(&self, name: &str) -> String {
        self.env.json(&["log", name])["head"]
            .as_str()
            .expect("a HEAD")
            .to_owned()
    }

    /// The host repository's refs, one `name id` a line.
    fn refs(&self) -> String {
        git(
            &self.repo,
            &["for-each-ref", "--format=%(refname) %(objectname)"],
        )
    }

    /// The tip of host branch `branch`, if it exists.
    fn tip(&self, branch: &str) -> Option<String> {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&self.repo)
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("refs/heads/{branch}"))
            .output()
            .expect("git");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Everything of box `name` as its user sees it: the files under /workspace (contents
    /// hashed, `.git` included), git's view (branch,
    /// HEAD commit, status, stash), HEAD's node and the host's copy of its branch.
    fn state(&self, name: &str) -> String {
        let inside = self.look(
            name,
            "cd /workspace && find . -type f | LC_ALL=C sort | xargs sha256sum; \
             git branch --show-current; git rev-parse HEAD; git --no-optional-locks status --porcelain; git stash list",
        );
        format!(
            "{inside}node {}\nhost branch {:?}\n",
            self.head(name),
            self.tip(&format!("agentbox/{name}"))
        )
    }

    /// What of boxes whose names start with `prefix` is left: records, box directories,
    /// store environments, host refs, ledger entries, host mounts, box list entries.
    fn leftovers(&self, prefix: &str) -> Vec<String> {
        let home = self.env.path("home");
        let mut out = Vec::new();
        let names = |dir: PathBuf| -> Vec<String> {
            std::fs::read_dir(dir)
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        for n in names(home.join("boxes")) {
            if n.starts_with(prefix) {
                out.push(format!("box directory {n}"));
            }
        }
        for n in names(home.join("store/envs")) {
            if n.starts_with(prefix) {
                out.push(format!("store environment {n}"));
            }
        }
        for line in self.refs().lines() {
            let r = line.split(' ').next().unwrap_or_default();
            if r.starts_with(&format!("refs/heads/agentbox/{prefix}"))
                || r.starts_with(&format!("refs/agentbox/{prefix}"))
            {
                out.push(format!("host ref {r}"));
            }
        }
        let pins = std::fs::read_to_string(home.join("pins.json")).unwrap_or_default();
        if pins.contains(&format!("\"{prefix}")) {
            out.push(format!("ledger entries: {pins}"));
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        for m in mounts
            .lines()
            .filter(|m| m.contains(home.to_str().expect("utf-8")))
        {
            if m.contains(&format!("/{prefix}")) {
                out.push(format!("mount {m}"));
            }
        }
        for e in self
            .env
            .json(&["list", "--all"])
            .as_array()
            .expect("a list")
        {
            let n = e["name"].as_str().unwrap_or_default();
            if n.starts_with(prefix) {
                out.push(format!("listed {n}"));
            }
        }
        out
    }

    /// `tournament ARGS --json` → (exit status, result or error).
    fn tournament(&self, args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
        let mut a = vec!["--json", "tournament"];
        a.extend_from_slice(args);
        let out = self.env.run(&a);
        let value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "tournament {args:?}: bad JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                stderr(&out)
            )
        });
        (code(&out), value, stderr(&out))
    }
}

/// Host processes whose command line contains `marker` (candidates' commands run as box
/// processes, which the host sees).
fn processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) && !cmd.contains("agentbox") {
                out.push(pid);
            }
        }
    }
    out
}

fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Work in box `src`: a commit on its branch, then a tracked file changed and a new file,
/// neither committed (each command is a node).
fn do_work(f: &Fixture) {
    f.sh(
        "src",
        "git add -A && git commit -qm 'box commit' && echo box-dirty >> keep.txt && echo fresh > new.txt",
    );
}
