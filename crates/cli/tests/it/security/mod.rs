//! The box as a security boundary: each test performs an attack from inside a box, as an
//! agent with a shell would, asserts that it fails, and checks the host afterwards (root).
//!
//! One file per area of attack below this module; the shared helpers (`boxed`, `Sec::sh`,
//! `python`) are here.

mod agents;
mod base;
mod box_repos;
mod bundles;
mod config_trust;
mod disk;
mod host_data;
mod host_side;
mod host_writes;
mod kernel;
mod limits;
mod npmrc;
mod ownership;
mod red;
mod relay;
mod seccomp;
mod terminal;
mod watcher;

use std::path::PathBuf;

use crate::common::{as_nobody, code, git, kill_supervisors, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// A temporary home whose box supervisors die with the test.
pub(crate) struct Sec {
    pub(crate) env: Env,
}

impl Drop for Sec {
    fn drop(&mut self) {
        kill_supervisors(&self.env.path("home"));
    }
}

/// A root-tier test's home with one box, `name` (`None`: skipped).
pub(crate) fn boxed(test: &str, name: &str, extra: &[&str]) -> Option<Sec> {
    if !require_root(test) {
        return None;
    }
    let s = Sec { env: Env::new() };
    let proj = s.env.path("proj");
    write(&proj.join("README"), "readme\n");
    let mut args = vec!["create", name, "--from", proj.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    s.env.ok(&args);
    Some(s)
}

impl Sec {
    /// The sizes (`statfs` blocks × block size) of the file systems at `mounts`
    /// (space-separated) in box `name`, each with its mount point.
    pub(crate) fn mount_sizes(&self, name: &str, mounts: &str) -> Vec<(String, u64)> {
        let script = format!("for m in {mounts}; do stat -f -c \"$m %b %S\" $m; done");
        let (_, out, err) = self.sh(name, &script);
        out.lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let field = |i: usize| -> u64 {
                    f.get(i)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or_else(|| panic!("stat -f of {mounts}: {out}{err}"))
                };
                (f[0].to_owned(), field(1) * field(2))
            })
            .collect()
    }
    /// `sh -c SCRIPT` in box `name` → (status, stdout, stderr).
    pub(crate) fn sh(&self, name: &str, script: &str) -> (i32, String, String) {
        let out = self.env.run(&["exec", name, "--", "sh", "-c", script]);
        (
            code(&out).unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr(&out),
        )
    }
}

/// Python in the box (the host's own, seen through the base), for system calls a shell
/// cannot make. `None` (with a printed reason; a failure under CI) when there is none.
pub(crate) fn python(s: &Sec, name: &str) -> bool {
    let (status, _, _) = s.sh(name, "command -v python3");
    if status != 0 {
        agentbox_testkit::tier::skip("python3 in the box", "python3 is not installed");
        return false;
    }
    true
}

/// Runs agentbox for a git-repository box, as root or (rootless) as the user `nobody`.
struct GitBox {
    s: Sec,
    /// The host repository the box was made from.
    repo: PathBuf,
    /// `Some(home)`: the box is rootless, run by `nobody` with this agentbox home.
    nobody: Option<PathBuf>,
}

impl GitBox {
    /// A repository with one commit and box `g` made from it; `None`: skipped.
    fn new(test: &str, rootless: bool) -> Option<GitBox> {
        if !require_root(test) {
            return None;
        }
        let s = Sec { env: Env::new() };
        let root = s.env.home.path().to_owned();
        let repo = root.join("proj");
        write(&repo.join("a.txt"), "one\n");
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-qm", "first"]);
        let nobody = rootless.then(|| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            let home = root.join("nobody-home");
            std::fs::create_dir(&home).expect("mkdir");
            for p in [&home, &repo] {
                crate::common::chown_nobody(p);
            }
            home
        });
        let g = GitBox { s, repo, nobody };
        g.ok(&["create", "g", "--from", g.repo.to_str().expect("utf-8")]);
        Some(g)
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        match &self.nobody {
            Some(home) => as_nobody(home, args),
            None => self.s.env.run(args),
        }
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `sh -c SCRIPT` in the box, required to succeed; its stdout.
    pub(crate) fn sh(&self, script: &str) -> String {
        self.ok(&["exec", "g", "--", "sh", "-c", script])
    }

    /// git in the host repository (read as root, whoever owns it).
    fn host_git(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&self.repo)
            .args(["-c", "safe.directory=*"])
            .args(args)
            .output()
            .expect("git")
    }

    fn host_rev(&self, rev: &str) -> String {
        let out = self.host_git(&["rev-parse", "--verify", "--quiet", rev]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for GitBox {
    fn drop(&mut self) {
        if let Some(home) = &self.nobody {
            kill_supervisors(home);
        }
    }
}
