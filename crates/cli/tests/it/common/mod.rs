//! Helpers shared by the command-line tests: run the real binary against a temporary home.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

use agentbox_testkit::TempHome;

pub struct Env {
    pub home: TempHome,
}

impl Env {
    pub fn new() -> Env {
        Env {
            home: TempHome::new(),
        }
    }

    /// A home under `base` (for paths a box must hide that are not under the private /tmp).
    pub fn new_in(base: &Path) -> Env {
        Env {
            home: TempHome::new_in(base),
        }
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.home.path().join(p)
    }

    /// Run `agentbox ARGS` with this home; returns the output whatever the exit status.
    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, &[])
    }

    pub fn run_with(&self, args: &[&str], envs: &[(&str, &str)]) -> Output {
        let mut cmd = self.command(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd.output().expect("run agentbox")
    }

    /// Run in directory `dir` and require success; returns stdout.
    pub fn run_in(&self, dir: &Path, args: &[&str]) -> String {
        let out = self
            .command(args)
            .current_dir(dir)
            .output()
            .expect("run agentbox");
        assert!(
            out.status.success(),
            "agentbox {args:?} in {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `agentbox ARGS` with this home, not started yet.
    pub fn command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_agentbox"));
        cmd.env("AGENTBOX_HOME", self.path("home"))
            .env_remove("AGENTBOX_FAILPOINT")
            .current_dir(self.home.path())
            .args(args);
        cmd
    }

    /// Run and require success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "agentbox {args:?} failed ({:?}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run with `--json` and parse stdout.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = self.ok(&a);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: bad JSON {e}: {out}"))
    }
}

pub fn write(path: &Path, content: &str) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).expect("mkdir");
    }
    std::fs::write(path, content).expect("write");
}

/// The node ids of a `--json log` document.
pub fn log_ids(log: &serde_json::Value) -> Vec<&str> {
    log["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter_map(|n| n["id"].as_str())
        .collect()
}

pub fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Run git in `dir` (as a fixed author and committer) and require success; its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The PID of box `name`'s supervisor in agentbox home `home` (from `supervisor.json`).
pub fn supervisor_pid(home: &Path, name: &str) -> Option<i32> {
    let p = home.join("boxes").join(name).join("supervisor.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).ok()?).ok()?;
    v["pid"].as_i64().map(|p| p as i32)
}

/// SIGKILL process `pid` (gone already is fine).
pub fn kill9(pid: i32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// Kill every box supervisor of agentbox home `home` (a test's boxes must not outlive it;
/// their processes die with their supervisors).
pub fn kill_supervisors(home: &Path) {
    let Ok(dir) = std::fs::read_dir(home.join("boxes")) else {
        return;
    };
    for e in dir.flatten() {
        if let Some(pid) = supervisor_pid(home, &e.file_name().to_string_lossy()) {
            kill9(pid);
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
}

/// Give `path` and everything below it to `nobody` (65534:65534), for rootless tests that
/// run agentbox as that user.
pub fn chown_nobody(path: impl AsRef<Path>) {
    let status = std::process::Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(path.as_ref())
        .status()
        .expect("chown");
    assert!(
        status.success(),
        "chown -R nobody {}",
        path.as_ref().display()
    );
}

/// `agentbox ARGS` as the unprivileged user `nobody`, with `home` as its agentbox home
/// (and a copy of the binary there, where `nobody` can reach it whatever the checkout's
/// permissions).
pub fn as_nobody(home: &Path, args: &[&str]) -> std::process::Output {
    let exe = home.join("agentbox");
    if !exe.exists() {
        std::fs::copy(env!("CARGO_BIN_EXE_agentbox"), &exe).expect("copy the binary");
    }
    std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&exe)
        .args(args)
        .env("AGENTBOX_HOME", home)
        .env("HOME", home)
        .current_dir("/")
        .output()
        .expect("run setpriv")
}
