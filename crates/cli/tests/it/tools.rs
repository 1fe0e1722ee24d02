//! The host user's tools in a box, without the user's secrets: the toolchains and package
//! caches of the home of whoever runs agentbox are in every box at their host paths,
//! read from the host and copy-on-write into the box's layer; the home's credentials are
//! never there, not even inside a shown directory. Root boxes and rootless ones (run as
//! `nobody`), against a home made for the test (agentbox takes `HOME` as the host user's
//! home when it is not run by `sudo`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::{code, kill_supervisors, stderr, write, Env};
use agentbox_testkit::tier::{require_root, skip};

/// Credentials of the test's home (relative to it), each holding [`MARKER`]: what a box
/// must never read.
const SECRETS: &[&str] = &[
    ".ssh/id_ed25519",
    ".gnupg/private-keys-v1.d/key.key",
    ".aws/credentials",
    ".azure/msal_token_cache.json",
    ".config/gcloud/credentials.db",
    ".kube/config",
    ".docker/config.json",
    ".config/gh/hosts.yml",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".claude/.credentials.json",
    ".codex/auth.json",
    ".local/share/opencode/auth.json",
];

/// The directories of [`SECRETS`] that must not exist in a box either.
const SECRET_DIRS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".config/gh",
];

const MARKER: &str = "SECRET-MARKER-4471";

/// Files next to the credentials in directories the test's `box.homeTools` shows: they are
/// the box's to read, the credentials beside them are not.
const SHOWN_BESIDE: &[&str] = &[
    ".claude/settings.json",
    ".codex/config.toml",
    ".local/share/opencode/storage.json",
    ".config/other/settings.ini",
];

/// What the test asks `box.homeTools` to show besides the defaults: ancestors of
/// credentials (which stay hidden inside), and the agentbox home (never shown).
const HOME_TOOLS: &[&str] = &[".config", ".claude", ".codex", ".local/share", ".agentbox"];

const CACHED: &str = ".npm/_cacache/index-v5/aa/marker";

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A host user's home with a toolchain, credentials and a cache, outside `/tmp` (private in
/// a box) and `/var/tmp` (ignored by auto-capture) — in `/srv`, which a box hides — and the
/// agentbox home where agentbox puts it by default, in that home.
struct Tools {
    dir: PathBuf,
    /// The host user's home.
    home: PathBuf,
    /// The agentbox home (`~/.agentbox`).
    agentbox: PathBuf,
    proj: PathBuf,
    /// Run by `nobody` (a rootless box) rather than root.
    rootless: bool,
}

impl Tools {
    fn new(test: &str, rootless: bool) -> Option<Tools> {
        if !require_root(test) {
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let dir = PathBuf::from(format!("/srv/agentbox-tools-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let home = dir.join("home");
        let t = Tools {
            agentbox: home.join(".agentbox"),
            proj: dir.join("proj"),
            home,
            dir,
            rootless,
        };
        let h = &t.home;
        write(
            &h.join(".cargo/bin/cargo"),
            "#!/bin/sh\necho 'cargo 9.9.9-fake'\n",
        );
        write(&h.join(".local/bin/tool"), "#!/bin/sh\necho tool-ok\n");
        for tool in [".cargo/bin/cargo", ".local/bin/tool"] {
            std::fs::set_permissions(h.join(tool), std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
        }
        for s in SECRETS {
            write(&h.join(s), &format!("{MARKER} {s}\n"));
        }
        for s in SHOWN_BESIDE {
            write(&h.join(s), "not a secret\n");
        }
        write(&h.join(CACHED), "cached-on-the-host\n");
        write(&t.proj.join("README"), "readme\n");
        std::fs::create_dir_all(&t.agentbox).expect("mkdir");
        if rootless {
            std::fs::copy(env!("CARGO_BIN_EXE_agentbox"), t.dir.join("agentbox"))
                .expect("copy the binary");
            crate::common::chown_nobody(&t.dir);
        }
        let mut args = vec!["config", "set", "--global", "box.homeTools"];
        args.extend_from_slice(HOME_TOOLS);
        t.ok(&args);
        Some(t)
    }

    /// `agentbox ARGS` as the host user, whose home is the test's.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = if self.rootless {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(self.dir.join("agentbox"));
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_agentbox"))
        };
        let path = format!(
            "{}:{}:/usr/local/bin:/usr/bin:/bin",
            self.home.join(".cargo/bin").display(),
            self.home.join(".local/bin").display()
        );
        cmd.args(args)
            .env("AGENTBOX_HOME", &self.agentbox)
            .env("HOME", &self.home)
            .env("PATH", path)
            // Under sudo, agentbox would take SUDO_USER's home instead.
            .env_remove("SUDO_USER")
            .env_remove("AGENTBOX_FAILPOINT")
            .current_dir("/");
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run agentbox")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn create(&self, name: &str) {
        self.ok(&["create", name, "--from", self.proj.to_str().expect("utf-8")]);
    }

    /// `sh -c SCRIPT` in box `name` → (status, stdout and stderr together).
    fn sh(&self, name: &str, script: &str) -> (i32, String) {
        let out = self.run(&["exec", name, "--", "sh", "-c", script]);
        (
            code(&out).unwrap_or(-1),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out)),
        )
    }

    fn nodes(&self, name: &str) -> usize {
        let out = self.ok(&["--json", "log", name]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("log --json");
        v["nodes"].as_array().map_or(0, Vec::len)
    }

    /// The paths the box's HEAD node changed.
    fn head_changes(&self, name: &str) -> Vec<String> {
        let out = self.ok(&["--json", "show", name, "HEAD"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("show --json");
        v["changes"]
            .as_array()
            .map(|c| {
                c.iter()
                    .filter_map(|c| c["path"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn at(&self, rel: &str) -> String {
        self.home.join(rel).display().to_string()
    }
}

impl Drop for Tools {
    fn drop(&mut self) {
        kill_supervisors(&self.agentbox);
        agentbox_testkit::unmount_below(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The toolchains run in the box at their host paths; a write to one lands in the box's
/// layer (the host's file unchanged, the box's history has the change, a restart keeps it).
fn tools_run_at_their_host_paths_and_writes_stay_in_the_box(test: &str, rootless: bool) {
    let Some(t) = Tools::new(test, rootless) else {
        return;
    };
    t.create("b");
    let (status, out) = t.sh("b", "cargo; tool; command -v cargo");
    assert_eq!(status, 0, "{out}");
    assert!(out.contains("cargo 9.9.9-fake"), "{out}");
    assert!(out.contains("tool-ok"), "{out}");
    assert!(out.contains(&t.at(".cargo/bin/cargo")), "{out}");

    let before = t.nodes("b");
    let (status, out) = t.sh(
        "b",
        &format!(
            "echo 'echo patched-in-the-box' >> {cargo} && cargo",
            cargo = t.at(".cargo/bin/cargo")
        ),
    );
    assert_eq!(status, 0, "{out}");
    assert!(out.contains("patched-in-the-box"), "{out}");
    let host = std::fs::read_to_string(t.home.join(".cargo/bin/cargo")).expect("read");
    assert!(
        !host.contains("patched"),
        "the host's cargo is unchanged: {host}"
    );
    assert_eq!(t.nodes("b"), before + 1, "the write made a node");
    let rel = t
        .home
        .join(".cargo/bin/cargo")
        .strip_prefix("/")
        .expect("absolute")
        .display()
        .to_string();
    let changes = t.head_changes("b");
    assert!(changes.contains(&rel), "{rel} in {changes:?}");
    // The box's layer keeps it across a restart, and a rollback takes it back.
    t.ok(&["stop", "b"]);
    let (_, out) = t.sh("b", "cargo");
    assert!(out.contains("patched-in-the-box"), "{out}");
    t.ok(&["undo", "b"]);
    let (_, out) = t.sh("b", "cargo");
    assert!(!out.contains("patched"), "{out}");
    assert!(out.contains("cargo 9.9.9-fake"), "{out}");
}

#[test]
fn tools_run_at_their_host_paths_and_writes_stay_in_the_box_root() {
    tools_run_at_their_host_paths_and_writes_stay_in_the_box(
        "tools_run_at_their_host_paths_and_writes_stay_in_the_box_root",
        false,
    );
}

#[test]
fn tools_run_at_their_host_paths_and_writes_stay_in_the_box_rootless() {
    tools_run_at_their_host_paths_and_writes_stay_in_the_box(
        "tools_run_at_their_host_paths_and_writes_stay_in_the_box_rootless",
        true,
    );
}

/// Every credential of the home is missing in the box (`ENOENT`), also inside a shown
/// `~/.cargo` and inside the directories `box.homeTools` asks for, while what is next to
/// them there is shown; the agentbox home is never shown.
fn secrets_never_show(test: &str, rootless: bool) {
    let Some(t) = Tools::new(test, rootless) else {
        return;
    };
    t.create("b");
    let mut script = String::new();
    for p in SECRETS.iter().chain(SECRET_DIRS) {
        let p = t.at(p);
        script.push_str(&format!(
            "if [ -e '{p}' ] || [ -L '{p}' ]; then echo 'VISIBLE {p}'; fi; cat '{p}' 2>&1; "
        ));
    }
    for p in SHOWN_BESIDE {
        script.push_str(&format!("cat '{}' || echo 'MISSING {p}'; ", t.at(p)));
    }
    script.push_str(&format!(
        "ls -A '{cargo}'; ls -A '{ab}' 2>&1; ls -A '{home}'",
        cargo = t.at(".cargo"),
        ab = t.agentbox.display(),
        home = t.home.display()
    ));
    let (_, out) = t.sh("b", &script);
    assert!(
        !out.contains(MARKER),
        "a secret was read in the box:\n{out}"
    );
    assert!(!out.contains("VISIBLE"), "{out}");
    assert!(!out.contains("MISSING"), "{out}");
    assert_eq!(
        out.matches("No such file or directory").count(),
        SECRETS.len() + SECRET_DIRS.len() + 1,
        "every secret and the agentbox home are missing:\n{out}"
    );
    assert_eq!(
        out.matches("not a secret").count(),
        SHOWN_BESIDE.len(),
        "{out}"
    );
    for name in [".ssh", ".aws", ".agentbox", ".netrc", "credentials.toml"] {
        assert!(
            !out.lines().any(|l| l.trim() == name),
            "{name} is listed:\n{out}"
        );
    }
    // A credential the host makes while the box runs stays hidden too.
    write(
        &t.home.join(".cargo/credentials.toml"),
        &format!("{MARKER} later\n"),
    );
    write(&t.home.join(".ssh/id_rsa"), &format!("{MARKER} later\n"));
    let (_, out) = t.sh(
        "b",
        &format!(
            "cat '{}' '{}' 2>&1",
            t.at(".cargo/credentials.toml"),
            t.at(".ssh/id_rsa")
        ),
    );
    assert!(!out.contains(MARKER), "{out}");
}

#[test]
fn secrets_never_show_root() {
    secrets_never_show("secrets_never_show_root", false);
}

#[test]
fn secrets_never_show_rootless() {
    secrets_never_show("secrets_never_show_rootless", true);
}

/// The host's package cache is read in the box; what a box writes there reaches neither
/// the host's cache nor another box; package managers' logs make no node.
fn caches_are_copy_on_write(test: &str, rootless: bool) {
    let Some(t) = Tools::new(test, rootless) else {
        return;
    };
    t.create("one");
    t.create("two");
    let cached = t.at(CACHED);
    let (status, out) = t.sh(
        "one",
        &format!("cat '{cached}' && echo written-by-box-one >> '{cached}' && cat '{cached}'"),
    );
    assert_eq!(status, 0, "{out}");
    assert!(out.starts_with("cached-on-the-host\n"), "{out}");
    assert!(out.contains("written-by-box-one"), "{out}");
    assert_eq!(
        std::fs::read_to_string(t.home.join(CACHED)).expect("read"),
        "cached-on-the-host\n",
        "the host's cache is unchanged"
    );
    let (_, out) = t.sh("two", &format!("cat '{cached}'"));
    assert_eq!(out, "cached-on-the-host\n", "box two sees the host's cache");
    // What npm writes on every run is no change worth a node.
    let before = t.nodes("two");
    let (status, out) = t.sh(
        "two",
        "mkdir -p /root/.npm/_logs && echo log > /root/.npm/_logs/1-debug-0.log \
         && touch /root/.npm/_update-notifier-last-checked",
    );
    assert_eq!(status, 0, "{out}");
    // In the host user's home too, where the box's npm writes when that home is not
    // `/root` (a rootless box's copy of a home outside /home is read-only but for what it
    // shows).
    let (status, out) = t.sh(
        "two",
        &format!(
            "mkdir -p '{npm}/_logs' && echo log > '{npm}/_logs/1-debug-0.log'",
            npm = t.at(".npm")
        ),
    );
    if !rootless {
        assert_eq!(status, 0, "{out}");
    }
    assert_eq!(t.nodes("two"), before, "{out}");
}

#[test]
fn caches_are_copy_on_write_root() {
    caches_are_copy_on_write("caches_are_copy_on_write_root", false);
}

#[test]
fn caches_are_copy_on_write_rootless() {
    caches_are_copy_on_write("caches_are_copy_on_write_rootless", true);
}

#[test]
fn home_tools_that_hold_credentials_are_refused() {
    let env = Env::new();
    for secret in [
        ".ssh",
        "~/.aws",
        ".cargo/credentials.toml",
        ".codex/auth.json",
    ] {
        let out = env.run(&["config", "set", "--global", "box.homeTools", secret]);
        assert_ne!(code(&out), Some(0), "{secret}: {}", stderr(&out));
        assert!(stderr(&out).contains("secrets"), "{}", stderr(&out));
    }
    let out = env.run(&["config", "set", "--global", "box.homeTools", "/opt/x"]);
    assert_ne!(code(&out), Some(0), "an absolute path: {}", stderr(&out));
    env.ok(&[
        "config",
        "set",
        "--global",
        "box.homeTools",
        ".sdkman",
        "!.pyenv",
    ]);
}

/// The host's real toolchains, where the machine has them under the home of whoever runs
/// the tests (a CI machine does): a tiny crate builds with the host's rustup toolchain, and
/// a virtual environment of the host's Python installs a local wheel, offline.
#[test]
fn the_hosts_real_toolchains_build_in_a_box() {
    let test = "the_hosts_real_toolchains_build_in_a_box";
    if !require_root(test) {
        return;
    }
    let Some(home) = std::env::var_os("HOME").map(PathBuf::from) else {
        skip(test, "HOME is not set");
        return;
    };
    if !home.join(".cargo/bin/cargo").exists() || !home.join(".rustup").is_dir() {
        skip(
            test,
            "needs rustup's toolchain under $HOME/.cargo and $HOME/.rustup",
        );
        return;
    }
    let env = Env::new();
    let proj = env.path("proj");
    write(
        &proj.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    );
    write(
        &proj.join("src/main.rs"),
        "fn main() { println!(\"tiny built in a box\"); }\n",
    );
    make_wheel(&proj.join("tinypkg-0.1-py3-none-any.whl"));
    let run = |args: &[&str]| {
        env.command(args)
            .env_remove("SUDO_USER")
            .env("PATH", path_with(&home.join(".cargo/bin")))
            .output()
            .expect("run agentbox")
    };
    let out = run(&["create", "b", "--from", proj.to_str().expect("utf-8")]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let out = run(&[
        "exec",
        "b",
        "--",
        "sh",
        "-c",
        "cargo build --offline -q && ./target/debug/tiny",
    ]);
    kill_supervisors(&env.path("home"));
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("tiny built in a box"),
        "{}",
        stderr(&out)
    );
    assert!(
        !proj.join("target").exists(),
        "the build stays in the box's layer"
    );

    if Command::new("python3")
        .args(["-c", "import venv, ensurepip"])
        .status()
        .map_or(true, |s| !s.success())
    {
        skip(test, "needs python3 with venv and ensurepip on PATH");
        return;
    }
    let out = run(&[
        "exec",
        "b",
        "--",
        "sh",
        "-c",
        "python3 -m venv /workspace/venv && /workspace/venv/bin/pip install -q --no-index \
         /workspace/tinypkg-0.1-py3-none-any.whl && /workspace/venv/bin/python -c \
         'import tinypkg; print(tinypkg.hello())'",
    ]);
    kill_supervisors(&env.path("home"));
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("tinypkg ok"),
        "{}",
        stderr(&out)
    );
    assert!(!proj.join("venv").exists());
}

/// `dir` first on the caller's `PATH`.
fn path_with(dir: &Path) -> String {
    let rest = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
    format!("{}:{rest}", dir.display())
}

/// A pure-Python wheel of a package `tinypkg` (a zip with its metadata and record), made
/// with the host's `python3`: `pip install` needs nothing from an index for it.
fn make_wheel(at: &Path) {
    let script = r#"
import base64, hashlib, sys, zipfile
files = {
    "tinypkg/__init__.py": b"def hello():\n    return 'tinypkg ok'\n",
    "tinypkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
    "tinypkg-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{name},sha256={digest},{len(data)}")
record.append("tinypkg-0.1.dist-info/RECORD,,")
files["tinypkg-0.1.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, data in files.items():
        z.writestr(name, data)
"#;
    // Without python3 the wheel is not needed: the test stops before it.
    let _ = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(at)
        .status();
}
