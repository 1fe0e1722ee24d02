//! The box as a security boundary: each test performs an attack from inside a box, as an
//! agent with a shell would, asserts that it fails, and checks the host afterwards (root).
//!
//! One file per area of attack below this module; the shared helpers (`boxed`, `Sec::sh`,
//! `python`) are here.

mod agents;
mod base;
mod bundles;
mod config_trust;
mod disk;
mod host_side;
mod host_writes;
mod npmrc;
mod red;
mod relay;
mod seccomp;
mod watcher;

use std::path::{Path, PathBuf};

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

#[test]
fn host_kernel_knobs_cannot_be_changed_from_a_box() {
    let Some(s) = boxed(
        "host_kernel_knobs_cannot_be_changed_from_a_box",
        "knobs",
        &[],
    ) else {
        return;
    };
    let before = std::fs::read_to_string("/proc/sys/kernel/core_pattern").expect("core_pattern");
    let forward = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").expect("ip_forward");
    // The attack of a core_pattern pipe into a script of the box's layer.
    let (_, out, err) = s.sh(
        "knobs",
        "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > /workspace/evil; chmod +x /workspace/evil;
         echo '|/workspace/evil' > /proc/sys/kernel/core_pattern && echo wrote-core-pattern;
         echo 1 > /proc/sys/net/ipv4/ip_forward && echo wrote-ip-forward;
         echo 3 > /proc/sys/vm/drop_caches && echo wrote-drop-caches;
         echo h > /proc/sysrq-trigger && echo wrote-sysrq;
         cat /proc/keys /proc/timer_list 2>/dev/null | wc -c;
         ls -A /sys/firmware | wc -l",
    );
    assert!(!out.contains("wrote-"), "{out}{err}");
    assert!(err.contains("Read-only file system"), "{err}");
    let counts: Vec<&str> = out.lines().collect();
    assert_eq!(
        counts,
        ["0", "0"],
        "masked /proc files and /sys/firmware: {out}"
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/core_pattern").expect("core_pattern"),
        before
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").expect("ip_forward"),
        forward
    );
}

#[test]
fn a_box_cannot_make_or_use_device_nodes() {
    let Some(s) = boxed("a_box_cannot_make_or_use_device_nodes", "devs", &[]) else {
        return;
    };
    // A block device of a host disk (the first loop device, or the root disk's).
    let (status, _, err) = s.sh("devs", "mknod /workspace/disk b 7 0");
    assert_ne!(status, 0, "mknod of a block device worked");
    assert!(err.contains("Operation not permitted"), "{err}");
    let (_, out, _) = s.sh(
        "devs",
        "test -e /dev/kmsg && echo kmsg; test -e /dev/kvm && echo kvm; test -e /dev/loop0 && echo loop; ls /dev",
    );
    for dev in ["kmsg\n", "kvm\n", "loop\n"] {
        assert!(
            !out.starts_with(dev) && !out.contains(&format!("\n{dev}")),
            "{out}"
        );
    }
    assert!(!Path::new(&s.env.path("home")).join("disk").exists());
}

#[test]
fn the_keyring_bpf_and_nested_namespaces_are_denied() {
    let Some(s) = boxed(
        "the_keyring_bpf_and_nested_namespaces_are_denied",
        "calls",
        &[],
    ) else {
        return;
    };
    let (_, out, _) = s.sh(
        "calls",
        "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status | tr -s '\\t ' ' '",
    );
    assert_eq!(out, "NoNewPrivs: 1\nSeccomp: 2\n", "{out}");
    let (status, _, err) = s.sh("calls", "unshare -U -r -m sh -c 'mount -t tmpfs t /mnt'");
    assert_ne!(
        status, 0,
        "a nested user namespace with mount rights: {err}"
    );
    if !python(&s, "calls") {
        return;
    }
    // keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING), add_key, bpf(BPF_PROG_LOAD),
    // perf_event_open: each fails with EPERM.
    let script = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
nr = {"x86_64": {"keyctl": 250, "add_key": 248, "bpf": 321, "perf_event_open": 298, "unshare": 272},
      "aarch64": {"keyctl": 219, "add_key": 217, "bpf": 280, "perf_event_open": 241, "unshare": 97}}[os.uname().machine]
for name, args in [("keyctl", (0, -4)), ("add_key", (0, 0, 0, 0, 0)), ("bpf", (5, 0, 0)),
                   ("perf_event_open", (0, 0, -1, -1, 0)), ("unshare", (0x10000000,))]:
    r = libc.syscall(nr[name], *args)
    print(name, r, os.strerror(ctypes.get_errno()))
"#;
    let out = s.env.run(&["exec", "calls", "--", "python3", "-c", script]);
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["keyctl", "add_key", "bpf", "perf_event_open", "unshare"] {
        assert!(
            text.contains(&format!("{name} -1 Operation not permitted")),
            "{name}: {text}{}",
            stderr(&out)
        );
    }
}

#[test]
fn no_raw_sockets_on_the_host_network_and_no_terminal_injection() {
    let Some(s) = boxed(
        "no_raw_sockets_on_the_host_network_and_no_terminal_injection",
        "raw",
        &[],
    ) else {
        return;
    };
    if !python(&s, "raw") {
        return;
    }
    let script = r#"
import socket, fcntl, termios, pty, os
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print("raw socket")
except PermissionError:
    print("no raw socket")
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW); print("packet socket")
except PermissionError:
    print("no packet socket")
m, sl = pty.openpty()
try:
    fcntl.ioctl(sl, termios.TIOCSTI, b"x"); print("injected")
except PermissionError:
    print("no injection")
"#;
    let out = s.env.run(&["exec", "raw", "--", "python3", "-c", script]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "no raw socket\nno packet socket\nno injection\n",
        "{}",
        stderr(&out)
    );
}

#[test]
fn host_data_is_not_visible_in_a_box() {
    let Some(s) = boxed("host_data_is_not_visible_in_a_box", "data", &[]) else {
        return;
    };
    let tag = format!("agentbox-sec-{}", std::process::id());
    let planted: Vec<PathBuf> = ["/srv", "/var/lib", "/var/backups", "/mnt"]
        .iter()
        .map(|d| Path::new(d).join(&tag))
        .collect();
    for p in &planted {
        write(&p.join("secret"), "host data\n");
    }
    // A new box start sees the planted data (the base is looked at when the box starts).
    s.env.ok(&["stop", "data"]);
    let script = planted
        .iter()
        .map(|p| format!("cat {}/secret 2>/dev/null;", p.display()))
        .collect::<String>()
        + "test -e /etc/shadow && echo shadow; ls /var/lib/dpkg >/dev/null && echo dpkg";
    let (_, out, err) = s.sh("data", &script);
    for p in &planted {
        let _ = std::fs::remove_dir_all(p);
    }
    assert_eq!(out, "dpkg\n", "host data reached the box: {out}{err}");
}

#[test]
fn agentbox_in_a_box_cannot_choose_another_home_or_box() {
    let Some(s) = boxed(
        "agentbox_in_a_box_cannot_choose_another_home_or_box",
        "relay",
        &[],
    ) else {
        return;
    };
    // A fake store in the box's own layer, named by --home in every spelling.
    for attack in [
        "agentbox --home /workspace/fake log",
        "agentbox log --home /workspace/fake",
        "agentbox --home=/workspace/fake status",
        "agentbox --ho /workspace/fake log",
        "agentbox -b relay --home /workspace/fake log",
        "agentbox --box=other log",
        "agentbox -brelay log",
    ] {
        let (status, _, err) = s.sh("relay", &format!("mkdir -p /workspace/fake; {attack}"));
        assert_eq!(status, 2, "{attack}: {err}");
        assert!(err.contains("not allowed inside a box"), "{attack}: {err}");
    }
    // Nothing of the box reaches the host's git command line.
    for attack in [
        "agentbox push --remote=--receive-pack=touch\\ /tmp/pwned",
        "agentbox push --remote /etc",
        "agentbox pull --remote origin",
        "agentbox pull --branch 'x:refs/heads/main'",
    ] {
        let (status, _, err) = s.sh("relay", attack);
        assert_eq!(status, 2, "{attack}: {err}");
        assert!(err.contains("not allowed inside a box"), "{attack}: {err}");
    }
    // The box's own commands still work.
    let (status, out, err) = s.sh("relay", "agentbox log --json");
    assert_eq!(status, 0, "{err}");
    assert!(out.contains("nodes"), "{out}");
}

#[test]
fn box_written_text_reaches_the_host_terminal_escaped() {
    let Some(s) = boxed(
        "box_written_text_reaches_the_host_terminal_escaped",
        "text",
        &[],
    ) else {
        return;
    };
    // OSC 52 (write the clipboard) and a carriage return that would hide the line.
    let (status, _, err) = s.sh(
        "text",
        "echo x > /workspace/x; agentbox commit -m \"$(printf 'ok\\033]52;c;cHduZWQ=\\007\\rfake')\"",
    );
    assert_eq!(status, 0, "{err}");
    for args in [&["log", "text"][..], &["show", "text", "HEAD"][..]] {
        let out = s.env.ok(args);
        assert!(
            !out.contains('\u{1b}') && !out.contains('\r') && !out.contains('\u{7}'),
            "{args:?}: {out:?}"
        );
        assert!(out.contains("ok\\u{1b}]52"), "{args:?}: {out}");
    }
    let json = s.env.json(&["log", "text"]);
    let last = json["nodes"]
        .as_array()
        .and_then(|n| n.last())
        .expect("a node");
    assert_eq!(last["message"], "ok\u{1b}]52;c;cHduZWQ=\u{7}\rfake");
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

/// The box's repository names programs (an fsmonitor hook, a clean filter) that write a
/// marker where the host would see it; every host command that looks at the box's
/// repository runs them inside the box, or not at all.
fn box_repository_configuration_never_runs_on_the_host(test: &str, rootless: bool) {
    let Some(g) = GitBox::new(test, rootless) else {
        return;
    };
    // A host directory the box cannot see (the host's /tmp is not the box's).
    let marks = g.s.env.path("marks");
    std::fs::create_dir_all(&marks).expect("mkdir");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&marks, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    let hook = format!(
        "#!/bin/sh\ntouch {m}/ran-on-host 2>/dev/null\necho \"$$ $(cat /proc/1/comm)\" >> /tmp/hook-ran\nexit 1\n",
        m = marks.display()
    );
    g.sh(&format!(
        "printf '%s' '{hook}' > /root/hook; chmod +x /root/hook;
         git config core.fsmonitor /root/hook;
         git config filter.evil.clean /root/hook; git config filter.evil.smudge /root/hook;
         echo '* filter=evil' > .gitattributes; echo two >> a.txt"
    ));
    // Every host command that reads the box's repository.
    let st = g.ok(&["--json", "status", "g"]);
    assert!(
        st.contains("a.txt"),
        "status still lists the box's changes: {st}"
    );
    g.ok(&["sync", "g"]);
    g.sh("git -c user.name=u -c user.email=u@x commit -qam work || true");
    g.ok(&["commit", "g", "-m", "after"]);
    g.ok(&["sync", "g"]);
    assert!(
        !marks.join("ran-on-host").exists(),
        "a box's git hook ran on the host"
    );
    // The hooks did run: inside the box, whose PID 1 is agentbox's.
    let ran = g.sh("cat /tmp/hook-ran");
    assert!(!ran.is_empty(), "the hook never ran in the box");
    assert!(
        ran.lines().all(|l| l.ends_with(" agentbox")),
        "the hook ran outside the box's PID namespace: {ran}"
    );
}

#[test]
fn box_repository_configuration_never_runs_on_the_host_root() {
    box_repository_configuration_never_runs_on_the_host(
        "box_repository_configuration_never_runs_on_the_host_root",
        false,
    );
}

#[test]
fn box_repository_configuration_never_runs_on_the_host_rootless() {
    box_repository_configuration_never_runs_on_the_host(
        "box_repository_configuration_never_runs_on_the_host_rootless",
        true,
    );
}

/// A sync takes the box's branch and nothing else: symlinked refs, alternates naming another
/// repository of the host, and a bundle carrying more refs (made by a git the box replaced)
/// are refused, and the host repository is unchanged.
fn sync_takes_only_the_box_branch(test: &str, rootless: bool) {
    let Some(g) = GitBox::new(test, rootless) else {
        return;
    };
    // Another repository on the host, whose objects the box must never obtain.
    let other = g.s.env.path("other");
    write(&other.join("secret.txt"), "host secret\n");
    git(&other, &["init", "-q"]);
    git(&other, &["add", "-A"]);
    git(&other, &["commit", "-qm", "secret"]);
    let secret = git(&other, &["rev-parse", "HEAD"]).trim().to_owned();
    let main = g.host_rev("main");
    let synced = g.host_rev("agentbox/g");

    // Alternates naming the other repository, and the branch pointed at its commit.
    let out = g.run(&[
        "exec",
        "g",
        "--",
        "sh",
        "-c",
        &format!(
            "echo {}/.git/objects >> .git/objects/info/alternates; echo {secret} > .git/refs/heads/agentbox/g",
            other.display()
        ),
    ]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let out = g.run(&["sync", "g"]);
    assert_ne!(code(&out), Some(0), "a sync with foreign alternates worked");
    assert!(stderr(&out).contains("alternates"), "{}", stderr(&out));
    assert!(
        !g.host_git(&["cat-file", "-e", &secret]).status.success(),
        "the other repository's commit reached the user's repository"
    );
    assert_eq!(g.host_rev("agentbox/g"), synced);

    // A symlinked branch ref.
    g.sh(&format!(
        "sed -i '\\#{}#d' .git/objects/info/alternates; git update-ref refs/heads/agentbox/g {synced};
         git update-ref refs/heads/elsewhere {synced};
         rm .git/refs/heads/agentbox/g; ln -s ../elsewhere .git/refs/heads/agentbox/g",
        other.display()
    ));
    let out = g.run(&["sync", "g"]);
    assert_ne!(code(&out), Some(0), "a sync of a symlinked ref worked");
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));

    g.sh(&format!(
        "rm .git/refs/heads/agentbox/g; git update-ref refs/heads/agentbox/g {synced};
         echo new > b.txt; git add b.txt; git -c user.name=u -c user.email=u@x commit -qm new;
         git update-ref refs/heads/main HEAD"
    ));
    if !rootless {
        forged_bundles_are_refused(&g, &main);
    }
    // The box's branch (and only it) syncs.
    g.ok(&["sync", "g"]);
    let tip = g.sh("git rev-parse agentbox/g");
    assert_eq!(g.host_rev("agentbox/g"), tip.trim());
    assert_eq!(g.host_rev("main"), main);
}

/// A git of the box's own (a root box can put one first in `PATH`; a rootless box's `/usr`
/// is the host's, read-only) that bundles every ref, a forged main among them.
fn forged_bundles_are_refused(g: &GitBox, main: &str) {
    let synced = g.host_rev("agentbox/g");
    g.sh(
        "mkdir -p /usr/local/bin;
         printf '#!/bin/sh\\ncase \"$*\" in *bundle*) exec /usr/bin/git -C /workspace bundle create - --all;; esac\\nexec /usr/bin/git \"$@\"\\n' > /usr/local/bin/git;
         chmod +x /usr/local/bin/git;
         echo newer > b.txt; git -c user.name=u -c user.email=u@x commit -qam newer",
    );
    let out = g.run(&["sync", "g"]);
    assert_ne!(code(&out), Some(0), "a bundle with extra refs was taken");
    assert!(stderr(&out).contains("nothing else"), "{}", stderr(&out));
    assert_eq!(g.host_rev("main"), main, "the host's main moved");
    assert_eq!(g.host_rev("agentbox/g"), synced);
    g.sh("rm /usr/local/bin/git");
}

#[test]
fn sync_takes_only_the_box_branch_root() {
    sync_takes_only_the_box_branch("sync_takes_only_the_box_branch_root", false);
}

#[test]
fn sync_takes_only_the_box_branch_rootless() {
    sync_takes_only_the_box_branch("sync_takes_only_the_box_branch_rootless", true);
}

/// The directory of the box's `pids` cgroup on the host (v1 or v2), from a box process's
/// own `/proc/self/cgroup`.
fn box_cgroup_dir(s: &Sec, name: &str) -> PathBuf {
    let (_, out, _) = s.sh(name, "cat /proc/self/cgroup");
    let field = |l: &str| l.splitn(3, ':').map(str::to_owned).collect::<Vec<_>>();
    let lines: Vec<Vec<String>> = out.lines().map(field).collect();
    if let Some(v1) = lines
        .iter()
        .find(|f| f.len() == 3 && f[1].split(',').any(|c| c == "pids"))
    {
        return Path::new("/sys/fs/cgroup/pids").join(v1[2].trim_start_matches('/'));
    }
    let v2 = lines
        .iter()
        .find(|f| f.len() == 3 && f[0] == "0")
        .expect("a cgroup line");
    Path::new("/sys/fs/cgroup").join(v2[2].trim_start_matches('/'))
}

#[test]
fn memory_mounts_processes_and_the_oom_killer_are_bounded() {
    let Some(s) = boxed(
        "memory_mounts_processes_and_the_oom_killer_are_bounded",
        "res",
        &["--memory", "256M"],
    ) else {
        return;
    };
    // The in-memory mounts are sized from the memory limit, and full means full.
    let sizes = s.mount_sizes("res", "/tmp /run /dev/shm");
    let mib = 1u64 << 20;
    assert_eq!(
        sizes,
        [
            ("/tmp".to_owned(), 128 * mib),
            ("/run".to_owned(), 32 * mib),
            ("/dev/shm".to_owned(), 64 * mib)
        ]
    );
    let (status, _, err) = s.sh("res", "dd if=/dev/zero of=/dev/shm/fill bs=1M count=100");
    assert_ne!(status, 0);
    assert!(err.contains("No space left"), "{err}");
    let st = s.env.json(&["status", "res"]);
    let shm = st["box"]["scratch"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["path"] == "/dev/shm"))
        .expect("status lists /dev/shm");
    assert!(
        shm["used_bytes"].as_u64() >= Some(60 * mib),
        "status counts what /dev/shm holds: {shm}"
    );
    assert!(s
        .env
        .ok(&["status", "res"])
        .contains("/dev/shm 64.0 MiB of 64.0 MiB"));

    // Over the memory limit, the process that allocated dies; the box (its PID 1) stays.
    if python(&s, "res") {
        let (_, before, _) = s.sh("res", "cat /proc/1/stat | cut -d' ' -f22");
        let (status, _, _) = s.sh(
            "res",
            "rm -f /dev/shm/fill; exec python3 -c 'a = bytearray(600 << 20)'",
        );
        assert_eq!(status, 128 + 9, "the allocating process is killed");
        let (status, after, _) = s.sh("res", "cat /proc/1/stat | cut -d' ' -f22");
        assert_eq!(status, 0);
        assert_eq!(before, after, "the box's PID 1 survived");
    }
    let (_, adj, _) = s.sh("res", "cat /proc/self/oom_score_adj /proc/1/oom_score_adj");
    let adj: Vec<i32> = adj.lines().map(|l| l.parse().expect("a number")).collect();
    assert!(
        adj[0] > adj[1],
        "box processes are chosen before PID 1: {adj:?}"
    );

    // A process limit applies by default, and the owner can set another.
    let cg = box_cgroup_dir(&s, "res");
    assert_eq!(
        std::fs::read_to_string(cg.join("pids.max"))
            .expect("pids.max")
            .trim(),
        "4096"
    );
    assert!(st["box"]["limits"]
        .as_str()
        .is_some_and(|l| l.contains("4096 processes (default)")));
    let proj = s.env.path("proj");
    s.env.ok(&[
        "create",
        "many",
        "--from",
        proj.to_str().expect("utf-8"),
        "--pids",
        "9000",
    ]);
    let cg = box_cgroup_dir(&s, "many");
    assert_eq!(
        std::fs::read_to_string(cg.join("pids.max"))
            .expect("pids.max")
            .trim(),
        "9000"
    );
}

#[test]
fn a_box_cannot_exhaust_its_supervisor_with_connections() {
    let Some(s) = boxed(
        "a_box_cannot_exhaust_its_supervisor_with_connections",
        "conns",
        &[],
    ) else {
        return;
    };
    if !python(&s, "conns") {
        return;
    }
    // 100 idle connections to the in-box socket (more than it serves at once), held open while the host uses the box.
    let mut holder = s
        .env
        .command(&[
            "exec",
            "conns",
            "--",
            "python3",
            "-c",
            "import socket, sys, time\n\
             held = []\n\
             for i in range(100):\n\
             \x20   c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); c.connect('/run/agentbox/ctl/sock'); held.append(c)\n\
             print(len(held), flush=True)\n\
             time.sleep(20)\n",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("read");
    assert_eq!(line.trim(), "100");
    // The host side still answers, and an in-box agentbox command is refused clearly.
    s.env.ok(&["status", "conns"]);
    let (status, _, err) = s.sh("conns", "agentbox log");
    assert_ne!(status, 0);
    assert!(err.contains("too many connections"), "{err}");
    // Once they go (their command hung up with its caller), the box's commands work again.
    holder.kill().expect("kill");
    let _ = holder.wait();
    let (status, _, err) = s.sh("conns", "sleep 1; agentbox log");
    assert_eq!(status, 0, "{err}");
}

#[test]
fn box_root_is_an_unprivileged_host_id_whose_files_keep_their_owners() {
    let Some(s) = boxed(
        "box_root_is_an_unprivileged_host_id_whose_files_keep_their_owners",
        "ids",
        &[],
    ) else {
        return;
    };
    use std::os::unix::fs::MetadataExt;
    s.env.ok(&["start", "ids"]);
    let st = s.env.json(&["status", "ids"]);
    let uid = st["box"]["box_root"]["uid"]
        .as_u64()
        .expect("box root is a host id range") as u32;
    assert_ne!(uid, 0);
    assert!(s
        .env
        .ok(&["status", "ids"])
        .contains(&format!("box root:     host uid {uid}")));
    // Inside: root, mapped; a box process is that host id to the host's kernel.
    let (_, out, _) = s.sh("ids", "id -u; cat /proc/self/uid_map");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("0"));
    let map: Vec<&str> = lines.next().expect("uid_map").split_whitespace().collect();
    assert_eq!(map, ["0", &uid.to_string(), "65536"]);
    let marker = format!("sleep {}", 700_000 + std::process::id() % 99_999);
    s.env.ok(&["spawn", "ids", "--", "sh", "-c", &marker]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pid = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .find(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim() == marker)
        })
        .expect("the box's process on the host")
        .path();
    assert_eq!(
        std::fs::metadata(&pid).expect("stat").uid(),
        uid,
        "host sees the box's process as its unprivileged id"
    );
    // Box root owns the base's root-owned files (it may change them in its layer), and
    // what it writes is owned on disk as the box says: root's files by root, others' by
    // their ids.
    let (status, _, err) = s.sh(
        "ids",
        "echo changed >> /etc/hostname && echo mine > /workspace/mine && echo theirs > /workspace/theirs && chown 1000:1000 /workspace/theirs",
    );
    assert_eq!(status, 0, "{err}");
    s.env.ok(&["stop", "ids"]);
    let owner_of = |name: &str| {
        walkdir::WalkDir::new(s.env.path("home/store"))
            .into_iter()
            .flatten()
            .find(|e| e.file_name() == name)
            .map(|e| {
                let m = e.metadata().expect("stat");
                (m.uid(), m.gid())
            })
            .unwrap_or_else(|| panic!("{name} is in the box's layer"))
    };
    assert_eq!(owner_of("mine"), (0, 0));
    assert_eq!(owner_of("theirs"), (1000, 1000));
    assert_eq!(owner_of("hostname"), (0, 0));
    // A checkout that keeps the processes writes owners the same way.
    s.env.ok(&["exec", "ids", "--", "rm", "/workspace/theirs"]);
    s.env.ok(&["checkout", "ids", "--keep-processes", "HEAD~1"]);
    let (_, out, _) = s.sh("ids", "stat -c '%u %g' /workspace/theirs");
    assert_eq!(out, "1000 1000\n");
}

#[test]
fn box_files_mounted_on_the_host_never_run_setuid_or_open_as_devices() {
    let Some(s) = boxed(
        "box_files_mounted_on_the_host_never_run_setuid_or_open_as_devices",
        "suid",
        &[],
    ) else {
        return;
    };
    let (status, _, err) = s.sh(
        "suid",
        "cp /usr/bin/id /workspace/id && chmod 4755 /workspace/id",
    );
    assert_eq!(status, 0, "{err}");
    let bundle = s.env.path("suid.bundle");
    s.env
        .ok(&["export", "suid", "-o", bundle.to_str().expect("utf-8")]);
    // Imported into the same store, the box's own layer is reused as it is: the mount
    // is what keeps its setuid bit from meaning anything on the host.
    let dir = s.env.path("imported");
    s.env.ok(&[
        "import",
        bundle.to_str().expect("utf-8"),
        "--name",
        "imported",
        "--dir",
        dir.to_str().expect("utf-8"),
    ]);
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let line = mountinfo
        .lines()
        .find(|l| l.split(' ').nth(4) == dir.to_str())
        .expect("the environment is mounted");
    let opts = line.split(' ').nth(5).expect("mount options");
    assert!(
        opts.split(',').any(|o| o == "nosuid") && opts.split(',').any(|o| o == "nodev"),
        "{line}"
    );
}

#[test]
fn agentbox_state_is_private_whatever_the_umask() {
    let Some(s) = boxed("agentbox_state_is_private_whatever_the_umask", "priv", &[]) else {
        return;
    };
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    s.env.ok(&["start", "priv"]);
    let home = s.env.path("home");
    assert_eq!(mode(&home), 0o700, "the agentbox home");
    assert_eq!(mode(&home.join("store")), 0o700, "the store");
    // A second home made under umask 0 is private too.
    let other = s.env.path("other-home");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask 0; AGENTBOX_HOME={} {} env {}",
            other.display(),
            env!("CARGO_BIN_EXE_agentbox"),
            s.env.path("proj").display()
        ))
        .output()
        .expect("run");
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(mode(&other), 0o700);
    assert_eq!(mode(&other.join("store")), 0o700);
    let _ = std::process::Command::new(env!("CARGO_BIN_EXE_agentbox"))
        .args(["destroy", "proj"])
        .env("AGENTBOX_HOME", &other)
        .output();
}

#[test]
fn a_rootless_box_gets_the_same_hardening() {
    let test = "a_rootless_box_gets_the_same_hardening";
    let Some(g) = GitBox::new(test, true) else {
        return;
    };
    // The user's own home, outside /home: hidden from the box.
    let user_home =
        std::path::PathBuf::from(format!("/var/tmp/agentbox-sec-home-{}", std::process::id()));
    write(&user_home.join("secret"), "the user's secret\n");
    crate::common::chown_nobody(&user_home);
    let nobody_home = g.nobody.clone().expect("rootless");
    let run = |script: &str| {
        let exe = nobody_home.join("agentbox");
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&exe)
            .args(["exec", "g", "--", "sh", "-c", script])
            .env("AGENTBOX_HOME", &nobody_home)
            .env("HOME", &user_home)
            .current_dir("/")
            .output()
            .expect("setpriv");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr(&out),
        )
    };
    g.ok(&["stop", "g"]);
    let (out, err) = run(&format!(
        "cat {}/secret 2>/dev/null && echo read-home;
         echo 1 > /proc/sys/kernel/sysrq 2>/dev/null && echo wrote-sysrq;
         mknod /tmp/disk b 7 0 2>/dev/null && echo made-device;
         cat /proc/keys 2>/dev/null | wc -c;
         command -v python3 >/dev/null && python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); r = l.syscall(250, 0, -3, 0, 0, 0); print(\"keyctl\", r, ctypes.get_errno())';
         true",
        user_home.display()
    ));
    let _ = std::fs::remove_dir_all(&user_home);
    for bad in ["read-home", "wrote-sysrq", "made-device"] {
        assert!(!out.contains(bad), "{bad}: {out}{err}");
    }
    assert!(
        out.lines().any(|l| l.trim() == "0"),
        "/proc/keys is masked: {out}"
    );
    if let Some(k) = out.lines().find(|l| l.starts_with("keyctl")) {
        assert_eq!(k, "keyctl -1 1", "keyctl is refused with EPERM");
    }
}

#[test]
fn host_paths_show_only_what_is_asked_and_never_secrets() {
    let Some(s) = boxed(
        "host_paths_show_only_what_is_asked_and_never_secrets",
        "none-shown",
        &[],
    ) else {
        return;
    };
    let tag = format!("agentbox-hp-{}", std::process::id());
    let srv = Path::new("/srv").join(&tag);
    let opt = Path::new("/opt").join(&tag);
    write(&srv.join("shown/f"), "shown\n");
    write(&srv.join("other/f"), "other\n");
    write(&opt.join("f"), "opt\n");
    let proj = s.env.path("proj");
    let proj = proj.to_str().expect("utf-8");
    let shown = format!("--host-path={}", srv.join("shown").display());
    let hidden_opt = format!("--host-path=!{}", opt.display());
    s.env
        .ok(&["create", "hp", "--from", proj, &shown, &hidden_opt]);
    let (_, out, err) = s.sh(
        "hp",
        &format!(
            "cat {srv}/shown/f; cat {srv}/other/f 2>/dev/null && echo other-visible; cat {opt}/f 2>/dev/null && echo opt-visible; echo x > {srv}/shown/new 2>/dev/null; test -e /etc/shadow && echo shadow; true",
            srv = srv.display(),
            opt = opt.display()
        ),
    );
    let (_, before, _) = s.sh(
        "none-shown",
        &format!("ls {} 2>/dev/null | wc -l", srv.display()),
    );
    let _ = std::fs::remove_dir_all(&srv);
    let _ = std::fs::remove_dir_all(&opt);
    assert_eq!(out, "shown\n", "{out}{err}");
    assert_eq!(
        before.trim(),
        "0",
        "without box.hostPaths /srv stays hidden"
    );
    assert!(
        !srv.join("shown/new").exists(),
        "the host path is read-only from the box"
    );
    // Secrets are never shown, as a flag or as configuration.
    for secret in ["/etc/shadow", "/etc/ssl/private"] {
        let out = s.env.run(&[
            "create",
            "oops",
            "--from",
            proj,
            &format!("--host-path={secret}"),
        ]);
        assert_eq!(code(&out), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("secrets"), "{}", stderr(&out));
        let out = s
            .env
            .run(&["config", "set", "--global", "box.hostPaths", secret]);
        assert_ne!(code(&out), Some(0), "{}", stderr(&out));
    }
}
