//! What agentbox does for a box with the host's privileges, attacked from inside the box:
//! PID 1 builds the box's root as host root (rootless: as the user) before it enters the
//! box's namespaces, so a symlink the box planted in its layer or in the shared agent copy
//! (bound read-write at `/run/agentbox/agent-home`) must never lead a write to a host file —
//! on the next start, nor in a box started from a checkpoint of it, on the host's network or
//! a private one. Also what a box's in-memory mounts, `/sys` and `/proc/self/mountinfo`
//! give away of the host.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{boxed, Sec};
use crate::common::{as_nobody, code, git, kill_supervisors, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// Host files the attack aims at: a directory anyone may write (as `/tmp`), a file to be
/// made there, and an existing file anyone may write (so that only agentbox's care, not
/// the file's mode, keeps it as it is).
struct Victim {
    dir: PathBuf,
}

const HOST_DATA: &str = "host data\n";

impl Victim {
    fn new(tag: &str) -> Victim {
        let dir = PathBuf::from(format!("/tmp/agentbox-victim-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        let v = Victim { dir };
        write(&v.existing(), HOST_DATA);
        std::fs::set_permissions(v.existing(), std::fs::Permissions::from_mode(0o666))
            .expect("chmod");
        v
    }

    fn pwned(&self) -> PathBuf {
        self.dir.join("pwned")
    }

    fn existing(&self) -> PathBuf {
        self.dir.join("existing")
    }

    /// The box's planting script: in the shared copy, `x` → a host path to make and `y` →
    /// an existing host file; the box's `/etc/resolv.conf` → the shared copy's `link`.
    /// Prints `planted` when the shared copy took the symlinks.
    fn plant(&self, link: &str) -> String {
        format!(
            "a=/run/agentbox/agent-home;
             ln -sfn {pwned} $a/x && ln -sfn {existing} $a/y && echo planted;
             rm -f /etc/resolv.conf && ln -s {link} /etc/resolv.conf && echo linked",
            pwned = self.pwned().display(),
            existing = self.existing().display(),
        )
    }

    fn untouched(&self, what: &str) {
        assert!(
            std::fs::symlink_metadata(self.pwned()).is_err(),
            "{what}: a host file was made at {}",
            self.pwned().display()
        );
        assert_eq!(
            std::fs::read_to_string(self.existing()).expect("the host file"),
            HOST_DATA,
            "{what}: a host file was changed"
        );
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A git project in `root` (checkpoints need one).
fn project(root: &Path) -> PathBuf {
    let p = root.join("proj");
    write(&p.join("README"), "readme\n");
    git(&p, &["init", "-q", "-b", "main"]);
    git(&p, &["add", "-A"]);
    git(&p, &["commit", "-qm", "first"]);
    p
}

fn planted_ok(out: &str, err: &str) {
    // The shared copy is writable by boxes today; were it not, the route is closed anyway,
    // and the host is checked all the same.
    if !out.contains("planted") {
        eprintln!("the shared agent copy took no symlink: {err}");
    }
    assert!(
        out.contains("linked"),
        "the box replaced its resolver: {out}{err}"
    );
}

#[test]
fn box_planted_symlinks_never_lead_pid1_to_a_host_file() {
    let test = "box_planted_symlinks_never_lead_pid1_to_a_host_file";
    if !require_root(test) {
        return;
    }
    let s = Sec { env: Env::new() };
    let proj = project(s.env.home.path());
    let proj = proj.to_str().expect("utf-8");
    let v = Victim::new("root");
    s.env.ok(&["create", "w", "--from", proj]);
    // On the host's network: the resolver's symlink into /run is made by PID 1 at start.
    let (_, out, err) = s.sh("w", &v.plant("/run/agentbox/agent-home/x"));
    planted_ok(&out, &err);
    s.env.ok(&["stop", "w"]);
    s.env.ok(&["start", "w"]);
    let (status, _, err) = s.sh("w", "true");
    assert_eq!(status, 0, "the box still starts: {err}");
    v.untouched("a restarted box on the host's network");

    // A checkpoint of the box, its resolver pointing (relatively) at an existing host file
    // through the shared copy; boxes from it on a private network and on the host's.
    let (_, out, err) = s.sh("w", &v.plant("../run/agentbox/agent-home/y"));
    planted_ok(&out, &err);
    s.env.ok(&["checkpoint", "create", "w", "--name", "evil"]);
    s.env.ok(&["stop", "w"]);
    let out = s.env.run(&[
        "create",
        "p",
        "--from",
        proj,
        "--checkpoint",
        "evil",
        "--network",
        "private",
    ]);
    if code(&out) == Some(0) {
        let (status, resolv, err) = s.sh("p", "cat /etc/resolv.conf");
        assert_eq!(status, 0, "{err}");
        assert!(
            resolv.contains("nameserver"),
            "the box has a resolver: {resolv}"
        );
        v.untouched("a private-network box from the box's checkpoint");
        s.env.ok(&["stop", "p"]);
    } else {
        // No `pasta` here: the private network is refused before anything starts.
        agentbox_testkit::tier::skip(test, &format!("--network private: {}", stderr(&out)));
    }
    s.env
        .ok(&["create", "d", "--from", proj, "--checkpoint", "evil"]);
    let (status, _, err) = s.sh("d", "true");
    assert_eq!(status, 0, "{err}");
    v.untouched("a box from the box's checkpoint on the host's network");
}

#[test]
fn box_planted_symlinks_never_lead_a_rootless_pid1_to_a_user_file() {
    let test = "box_planted_symlinks_never_lead_a_rootless_pid1_to_a_user_file";
    if !require_root(test) {
        return;
    }
    let env = Env::new();
    let root = env.home.path().to_owned();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let proj = project(&root);
    let home = root.join("nobody-home");
    std::fs::create_dir(&home).expect("mkdir");
    let _stop = StopAll(home.clone());
    for p in [&home, &proj] {
        crate::common::chown_nobody(p);
    }
    let proj = proj.to_str().expect("utf-8");
    let ok = |args: &[&str]| {
        let out = as_nobody(&home, args);
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let v = Victim::new("rootless");
    ok(&["create", "w", "--from", proj]);
    // A rootless box's `/etc` is the host's, bound read-only: its resolver cannot be made a
    // symlink (the route of the root box's attack is closed); the shared copy is planted all
    // the same, and the host checked after every start.
    let out = as_nobody(
        &home,
        &[
            "exec",
            "w",
            "--",
            "sh",
            "-c",
            &v.plant("/run/agentbox/agent-home/x"),
        ],
    );
    let (out, err) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!out.contains("linked"), "{out}{err}");
    assert!(err.contains("Read-only file system"), "{err}");
    ok(&["stop", "w"]);
    ok(&["exec", "w", "--", "true"]);
    v.untouched("a restarted rootless box");
    ok(&["checkpoint", "create", "w", "--name", "evil"]);
    ok(&["stop", "w"]);
    // On a private network PID 1 writes the resolver; a rootless one needs /dev/net/tun.
    let out = as_nobody(
        &home,
        &[
            "create",
            "p",
            "--from",
            proj,
            "--checkpoint",
            "evil",
            "--network",
            "private",
        ],
    );
    if code(&out) != Some(0) {
        // Refused before anything starts (see `network::a_rootless_private_box_works_or_says_why`);
        // the rootless resolver's plan is unit-tested (`rootfs::confined_tests`).
        eprintln!("a rootless private box cannot start here: {}", stderr(&out));
        v.untouched("a refused rootless private box");
        return;
    }
    ok(&["exec", "p", "--", "true"]);
    v.untouched("a rootless private-network box from the box's checkpoint");
}

/// Kills the supervisors of an agentbox home when dropped.
struct StopAll(PathBuf);

impl Drop for StopAll {
    fn drop(&mut self) {
        kill_supervisors(&self.0);
    }
}

/// The host's RAM, as the supervisor reads it.
fn host_ram() -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    let kib = m
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .expect("MemTotal");
    kib.trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .expect("a number")
        * 1024
}

#[test]
fn without_a_memory_limit_tmp_and_shm_are_bounded() {
    let Some(s) = boxed("without_a_memory_limit_tmp_and_shm_are_bounded", "mem", &[]) else {
        return;
    };
    let sizes = s.mount_sizes("mem", "/tmp /dev/shm");
    let mib = 1u64 << 20;
    let pages = |b: u64| b.div_ceil(4096) * 4096;
    let half = (host_ram() / 2).max(16 * mib);
    assert_eq!(
        sizes,
        [
            ("/tmp".to_owned(), pages((half / 2).min(1024 * mib))),
            ("/dev/shm".to_owned(), pages((half / 4).min(64 * mib))),
        ],
    );
    // Full means full: the bound holds.
    let (status, _, err) = s.sh("mem", "dd if=/dev/zero of=/dev/shm/fill bs=1M count=100");
    assert_ne!(status, 0);
    assert!(err.contains("No space left"), "{err}");
}

#[test]
fn the_hosts_energy_counters_are_masked() {
    let Some(s) = boxed("the_hosts_energy_counters_are_masked", "rapl", &[]) else {
        return;
    };
    let host = std::fs::read_dir("/sys/devices/virtual/powercap").map_or(0, |d| d.count());
    if host == 0 {
        eprintln!("this host has no powercap counters: the box must show none either");
    }
    let (_, out, _) = s.sh(
        "rapl",
        "ls -A /sys/devices/virtual/powercap 2>/dev/null | wc -l;
         cat /sys/class/powercap/*/energy_uj /sys/class/powercap/*/*/energy_uj 2>/dev/null | wc -l",
    );
    assert_eq!(
        out, "0\n0\n",
        "no energy counter in the box (host has {host})"
    );
}

#[test]
fn mountinfo_does_not_show_the_home_or_the_project() {
    let test = "mountinfo_does_not_show_the_home_or_the_project";
    if !require_root(test) {
        return;
    }
    let s = Sec { env: Env::new() };
    let proj = project(s.env.home.path());
    s.env
        .ok(&["create", "mi", "--from", proj.to_str().expect("utf-8")]);
    let (_, out, err) = s.sh("mi", "cat /proc/self/mountinfo");
    assert!(out.contains(" / / "), "{out}{err}");
    let home = s.env.path("home");
    let home = home.to_str().expect("utf-8");
    let proj = proj.to_str().expect("utf-8");
    // Bind mounts name their source's path in its file system (the kernel's `root`
    // field): those few, listed in the README's security model, are still seen.
    const BINDS: &[&str] = &[
        "/run/agentbox/ctl",
        "/run/agentbox/agent-home",
        "/run/agentbox/git/objects",
    ];
    for line in out.lines() {
        let point = line.split(' ').nth(4).unwrap_or_default();
        if BINDS.contains(&point) {
            continue;
        }
        assert!(
            !line.contains(home) && !line.contains(proj),
            "{point} names a host path: {line}"
        );
    }
}
