//! What a box can reach: host paths, the network, resource limits, other boxes (from the
//! in-box `agentbox`), an imported image's root, and a box of a normal user (rootless).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::common::{as_nobody, code, git, stderr, write, Env};
use agentbox_testkit::tier::require_root;

use super::*;

#[test]
fn host_paths_are_hidden_and_unwritable() {
    if !require_root("host_paths_are_hidden_and_unwritable") {
        return;
    }
    // Outside /tmp, which is private in a box anyway: the home and the project must be
    // hidden on their own merits.
    let b = Boxes {
        env: Env::new_in(Path::new("/var/tmp")),
    };
    let tag = format!("agentbox-test-{}", std::process::id());
    let proj = project(b.env.home.path());
    // The host project is a git repository: its .git must be out of reach.
    git(&proj, &["init", "-q"]);
    git(&proj, &["add", "-A"]);
    git(&proj, &["commit", "-qm", "first"]);
    let secrets = [
        PathBuf::from(format!("/root/{tag}")),
        PathBuf::from(format!("/home/{tag}/secret")),
        b.env.path(&format!("home/{tag}")),
        proj.join(".git/config"),
    ];
    for s in &secrets[..3] {
        write(s, "secret\n");
    }
    // A container-engine style socket on the host.
    let sock_path = PathBuf::from(format!("/run/{tag}.sock"));
    let _sock = std::os::unix::net::UnixListener::bind(&sock_path).expect("bind socket");

    b.create("one", &proj, &[]);
    b.create("two", &proj, &[]);
    b.sh_ok("two", "echo private > /workspace/two-only");
    let two_upper = b
        .env
        .path("home/store/envs/two/work/upper/workspace/two-only");
    // In its working layer, or (a quiet box's node takes the working layer whole) in the
    // layer of its node.
    let two_head = b.env.json(&["log", "two"])["head"]
        .as_str()
        .expect("a HEAD")
        .to_owned();
    let two_node = b
        .env
        .path("home/store/layers")
        .join(&two_head)
        .join("workspace/two-only");
    let two_upper = if two_upper.exists() {
        two_upper
    } else {
        two_node
    };
    assert!(two_upper.exists(), "box two's write lands in its own layer");

    let mut targets: Vec<PathBuf> = secrets.to_vec();
    targets.push(sock_path.clone());
    targets.push(two_upper.clone());
    targets.push(b.env.path("home/store/store.json"));
    for t in &targets {
        let t = t.display();
        let (status, out, _) = b.sh("one", &format!("cat '{t}'"));
        assert_ne!(status, 0, "{t} is readable inside the box: {out}");
        // Writing either fails or lands inside the box; the host copy never changes.
        let _ = b.sh(
            "one",
            &format!("mkdir -p \"$(dirname '{t}')\" && echo pwned > '{t}'"),
        );
    }
    for s in &secrets[..3] {
        assert_eq!(
            std::fs::read_to_string(s).expect("read"),
            "secret\n",
            "{}",
            s.display()
        );
    }
    assert!(!std::fs::read_to_string(proj.join(".git/config"))
        .expect("config")
        .contains("pwned"));
    assert_eq!(
        std::fs::read_to_string(&two_upper).expect("two"),
        "private\n"
    );
    // Home directories look empty; the engine socket does not exist.
    let out = b.sh_ok("one", &format!("ls -A /root /home | grep -c {tag} || true; test -S /run/{tag}.sock && echo socket || echo nosocket"));
    assert!(out.contains("nosocket"), "{out}");
    // Changes inside never reach the host project.
    b.sh_ok(
        "one",
        "echo changed > /workspace/README; rm /workspace/src/main.js",
    );
    assert_eq!(
        std::fs::read_to_string(proj.join("README")).expect("readme"),
        "readme\n"
    );
    assert!(proj.join("src/main.js").exists());
    // /proc is the box's own, /sys read-only, /dev minimal, /tmp private.
    let out = b.sh_ok(
        "one",
        "ls /proc | grep -c '^[0-9]'; touch /sys/x 2>/dev/null && echo sys-writable; ls /dev | tr '\\n' ' '; ls -A /tmp | wc -l",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].parse::<u32>().expect("count") < 10, "{out}");
    assert!(!out.contains("sys-writable"));
    for dev in [
        "null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm",
    ] {
        assert!(
            lines[1].split(' ').any(|d| d == dev),
            "/dev lacks {dev}: {}",
            lines[1]
        );
    }
    assert!(
        !lines[1]
            .split(' ')
            .any(|d| d == "vda" || d == "sda" || d == "mem"),
        "{}",
        lines[1]
    );
    // The host's password hashes are not there; the rest of /etc is.
    if Path::new("/etc/shadow").exists() {
        let (status, out, _) = b.sh("one", "cat /etc/shadow");
        assert_ne!(status, 0, "/etc/shadow is readable in the box: {out}");
    }
    b.sh_ok("one", "test -r /etc/passwd");
    // No mounting, no module loading, no raw device access: those capabilities are gone.
    let (status, _, _) = b.sh("one", "mount -t tmpfs none /mnt");
    assert_ne!(status, 0, "a box mounted a filesystem");
    let caps = b.sh_ok("one", "grep CapBnd /proc/self/status");
    let bnd = u64::from_str_radix(caps.split_whitespace().nth(1).expect("mask"), 16).expect("hex");
    assert_eq!(
        bnd & (1 << 21),
        0,
        "CAP_SYS_ADMIN is not in the bounding set: {caps}"
    );
    assert_eq!(
        bnd & (1 << 2),
        0,
        "CAP_DAC_READ_SEARCH is not in the bounding set: {caps}"
    );
    let _ = std::fs::remove_file(&sock_path);
    let _ = std::fs::remove_file(&secrets[0]);
    let _ = std::fs::remove_dir_all(format!("/home/{tag}"));
}

#[test]
fn network_none_has_only_loopback() {
    let Some((b, proj)) = boxes("network_none_has_only_loopback") else {
        return;
    };
    b.create("offline", &proj, &["--network", "none"]);
    let out = b.sh_ok(
        "offline",
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
    );
    assert_eq!(out.trim(), "lo");
}

#[test]
fn resource_limits_are_enforced() {
    let Some((b, proj)) = boxes("resource_limits_are_enforced") else {
        return;
    };
    b.create(
        "small",
        &proj,
        &["--memory", "32M", "--pids", "20", "--cpus", "0.5"],
    );
    // Memory: a process that needs far more than 32 MiB is killed.
    let (status, _, _) = b.sh("small", "head -c 200M /dev/zero | tail > /dev/null");
    assert_ne!(
        status, 0,
        "a 200 MiB allocation succeeded under a 32 MiB limit"
    );
    // Processes: at most 20 at once; the kernel counts the refusals.
    let _ = b.sh(
        "small",
        "for i in $(seq 1 40); do sleep 30 >/dev/null 2>&1 & done 2>/dev/null; true",
    );
    // The box's pids cgroup, as the kernel reports it for a process of the box.
    let marker = format!("{}", 700_000 + std::process::id() % 99_999);
    b.env.ok(&["spawn", "small", "--", "sleep", &marker]);
    wait_until("the marker process", || {
        !host_processes_with(&marker).is_empty()
    });
    let pid = host_processes_with(&marker)[0];
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
    let rel = cgroups
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
            (ctrl.split(',').any(|c| c == "pids") || ctrl.is_empty()).then(|| path.to_owned())
        })
        .expect("a pids cgroup");
    let cg = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"]
        .iter()
        .map(|m| Path::new(m).join(rel.trim_start_matches('/')))
        .find(|p| p.join("pids.current").exists())
        .expect("the box's pids cgroup directory");
    assert!(rel.contains("/agentbox/small-"), "{rel}");
    let current: u32 = std::fs::read_to_string(cg.join("pids.current"))
        .expect("pids.current")
        .trim()
        .parse()
        .expect("number");
    assert!(current <= 20, "{current} processes under a limit of 20");
    let events = std::fs::read_to_string(cg.join("pids.events")).expect("pids.events");
    assert!(events.trim() != "max 0", "no fork was refused: {events}");
    b.env.ok(&["checkout", "small", "HEAD"]);
    // The box still works afterwards, and stop removes its cgroup.
    assert_eq!(b.sh_ok("small", "echo ok"), "ok\n");
    b.env.ok(&["stop", "small"]);
    assert!(
        !cg.exists(),
        "stop leaves the cgroup {}: {}",
        cg.display(),
        std::fs::read_to_string(b.env.path("home/boxes/small/supervisor.log")).unwrap_or_default()
    );
    // Bad values are refused before anything is made.
    let out = b.env.run(&[
        "create",
        "limited",
        "--from",
        proj.to_str().expect("utf-8"),
        "--memory",
        "lots",
    ]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(!b.env.path("home/boxes/limited").exists());
}

#[test]
fn agentbox_inside_a_box_reaches_only_its_own_box() {
    let Some((b, proj)) = boxes("agentbox_inside_a_box_reaches_only_its_own_box") else {
        return;
    };
    b.create("self", &proj, &[]);
    b.create("other", &proj, &[]);
    let out = b.sh_ok(
        "self",
        "echo x > /workspace/x && agentbox commit -m 'from inside' && agentbox log --json",
    );
    assert!(out.contains("from inside"), "{out}");
    // Its status, and with --usage its history counted.
    let st = b.sh_ok("self", "agentbox status --usage");
    assert!(st.contains("box:          self"), "{st}");
    assert!(st.contains("branch tip"), "{st}");
    assert!(
        !b.sh_ok("self", "agentbox status").contains("branch tip"),
        "counted only when asked"
    );
    for refused in [
        "agentbox list",
        "agentbox -b other log",
        "agentbox destroy other",
        "agentbox ps other",
    ] {
        let (status, _, err) = b.sh("self", refused);
        assert_ne!(status, 0, "{refused} was allowed");
        assert!(err.contains("inside a box"), "{refused}: {err}");
    }
    assert_eq!(b.node_count("other"), 1);
}

#[test]
fn a_box_runs_on_an_imported_image() {
    if !require_root("a_box_runs_on_an_imported_image") {
        return;
    }
    let b = Boxes::new();
    let tar = b.env.path("rootfs.tar");
    agentbox_testkit::rootfs::build_tar(b.env.home.path(), &tar);
    b.env
        .ok(&["image", "import", "mini", tar.to_str().expect("utf-8")]);
    let list = b.env.json(&["image", "list"]);
    assert_eq!(list[0]["name"], "mini");
    let proj = project(b.env.home.path());
    b.create("onimage", &proj, &["--image", "mini"]);
    let out = b.sh_ok(
        "onimage",
        "cat /etc/os-release; ls /usr/bin | wc -l; cat /workspace/README",
    );
    assert_eq!(
        out.lines().next(),
        Some("ID=agentbox-test-rootfs"),
        "the image is the base, not the host: {out}"
    );
    assert!(out.ends_with("readme\n"), "{out}");
    // Writes go to the box's layer; the image stays as imported.
    b.sh_ok("onimage", "echo changed > /etc/os-release");
    let img = b.env.path("home/images/mini/rootfs/etc/os-release");
    assert_eq!(
        std::fs::read_to_string(img).expect("read"),
        "ID=agentbox-test-rootfs\n"
    );
    // In use: refused; after the box is gone: removed.
    assert_eq!(code(&b.env.run(&["image", "rm", "mini"])), Some(4));
    b.env.ok(&["destroy", "onimage"]);
    b.env.ok(&["image", "rm", "mini"]);
    // A bad archive leaves nothing.
    let bad = b.env.path("bad.tar");
    write(&bad, "not a tar at all");
    let out = b
        .env
        .run(&["image", "import", "broken", bad.to_str().expect("utf-8")]);
    assert_eq!(code(&out), Some(8), "{}", stderr(&out));
    assert!(!b.env.path("home/images/broken").exists());
    assert!(b
        .env
        .json(&["image", "list"])
        .as_array()
        .is_some_and(|a| a.is_empty()));
}

#[test]
fn a_normal_user_gets_a_rootless_box() {
    let Some((b, proj)) = boxes("a_normal_user_gets_a_rootless_box") else {
        return;
    };
    let root = b.env.home.path();
    let chown = |p: &Path| {
        crate::common::chown_nobody(p);
    };
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let home = root.join("nobody-home");
    std::fs::create_dir(&home).expect("mkdir");
    chown(&home);
    chown(&proj);
    let ok = |args: &[&str]| {
        let out = as_nobody(&home, args);
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    ok(&["create", "mine", "--from", proj.to_str().expect("utf-8")]);
    let out = ok(&["exec", "mine", "--", "sh", "-c", "id -u; cat /proc/self/uid_map | tr -s ' '; echo v2 > README; touch /usr/x 2>/dev/null && echo usr-writable; ls -A /root | wc -l"]);
    assert_eq!(
        out, "0\n 0 65534 1\n0\n",
        "root inside, mapped to the user outside; /usr read-only; an empty /root"
    );
    let log = ok(&["--json", "log", "mine"]);
    assert!(log.contains("echo v2 > README"), "{log}");
    // Deletions and replaced directories use the unprivileged overlay attributes.
    ok(&[
        "exec",
        "mine",
        "--",
        "sh",
        "-c",
        "rm -rf src && mkdir src && echo new > src/only",
    ]);
    ok(&["undo", "mine"]);
    assert_eq!(ok(&["exec", "mine", "--", "ls", "src"]), "main.js\n");
    ok(&["checkout", "mine", "HEAD~1"]);
    assert_eq!(ok(&["exec", "mine", "--", "cat", "README"]), "readme\n");
    ok(&["spawn", "mine", "--", "sleep", "1000"]);
    assert!(ok(&["ps", "mine"]).contains("sleep 1000"));
    ok(&["stop", "mine"]);
    ok(&["destroy", "mine"]);
    // Written by the user, never by root.
    for e in walkdir::WalkDir::new(&home)
        .into_iter()
        .flatten()
        .filter(|e| e.path() != home.join("agentbox"))
    {
        let uid = std::os::unix::fs::MetadataExt::uid(&e.metadata().expect("lstat"));
        assert_eq!(uid, 65534, "{} belongs to uid {uid}", e.path().display());
    }
}
