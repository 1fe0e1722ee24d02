//! Unit tests of the cgroup code that need no cgroup filesystem.
use super::*;

#[test]
fn parse_memory_sizes() {
    let ok = [
        ("1048576", 1_048_576),
        ("512M", 512 << 20),
        ("512m", 512 << 20),
        ("2G", 2 << 30),
        ("1.5G", 3 << 29),
        ("2GiB", 2 << 30),
        ("64 KB", 64 << 10),
        ("1T", 1 << 40),
        (".5K", 512),
        ("100b", 100),
    ];
    for (s, want) in ok {
        assert_eq!(Limits::parse_memory(s).expect(s), want, "{s}");
    }
    for bad in [
        "",
        "M",
        "-1M",
        "1.5",
        "0",
        "0M",
        "1..5G",
        "1.2.3G",
        "12X",
        "1e9",
        "99999999999999999999T",
        "G1",
    ] {
        assert!(
            Limits::parse_memory(bad).is_err(),
            "{bad:?} must be rejected"
        );
    }
}

#[test]
fn oom_kill_counts_and_sizes() {
    let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
    assert_eq!(oom_kill_count(v1), Some(3));
    let v2 = "low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\noom_group_kill 0\n";
    assert_eq!(oom_kill_count(v2), Some(2));
    assert_eq!(oom_kill_count("oom_kill_disable 0\n"), None);
    assert_eq!(size_text(64 << 20), "64.0 MiB");
    assert_eq!(size_text(1536 << 20), "1.5 GiB");
    assert_eq!(size_text(100), "100 bytes");
}

#[test]
fn limits_validate() {
    assert!(Limits::default().is_empty());
    assert!(Limits::default().validate().is_ok());
    let l = |memory_bytes, pids, cpus| Limits {
        memory_bytes,
        pids,
        cpus,
    };
    assert!(!l(None, Some(3), None).is_empty());
    assert!(l(Some(0), None, None).validate().is_err());
    assert!(l(None, Some(0), None).validate().is_err());
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 0.001] {
        assert!(l(None, None, Some(bad)).validate().is_err(), "{bad}");
    }
    assert_eq!(cpu_quota_us(1.5).expect("quota"), 150_000);
    assert_eq!(cpu_quota_us(0.01).expect("quota"), 1_000);
    assert_eq!(
        l(Some(32 << 20), Some(10), Some(1.5)).describe(),
        "memory 32 MiB, pids 10, cpus 1.5"
    );
}

#[test]
fn limits_serde_defaults_missing_fields() {
    let l: Limits = serde_json::from_str(r#"{"pids": 5}"#).expect("json");
    assert_eq!(
        l,
        Limits {
            pids: Some(5),
            ..Limits::default()
        }
    );
}

const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

const PURE_V2: &str = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

const JOINT_V1: &str = "\
40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/cpu,cpuacct rw shared:9 - cgroup cgroup rw,cpu,cpuacct
42 31 0:39 /docker/abc /mnt/memory\\040dup rw - cgroup cgroup rw,memory
43 31 0:39 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
44 31 0:40 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
";

#[test]
fn layout_hybrid_is_v1() {
    let layout = Layout::from_mounts(&parse_mountinfo(HYBRID)).expect("layout");
    let Layout::V1 { mounts } = &layout else {
        panic!("hybrid must be v1: {layout:?}");
    };
    assert_eq!(mounts.len(), 4);
    assert_eq!(
        layout.mount_of(Controller::Cpu),
        Some(Path::new("/sys/fs/cgroup/cpu"))
    );
    assert_eq!(
        layout.mount_of(Controller::Freezer),
        Some(Path::new("/sys/fs/cgroup/freezer"))
    );
}

#[test]
fn layout_pure_v2() {
    let layout = Layout::from_mounts(&parse_mountinfo(PURE_V2)).expect("layout");
    assert_eq!(
        layout,
        Layout::V2 {
            mount: PathBuf::from("/sys/fs/cgroup")
        }
    );
}

#[test]
fn layout_joint_mounts_and_duplicates() {
    let entries = parse_mountinfo(JOINT_V1);
    assert_eq!(entries[2].mount_point, Path::new("/mnt/memory dup"));
    let layout = Layout::from_mounts(&entries).expect("layout");
    // The mount showing the hierarchy root wins over a bind of a sub-cgroup.
    assert_eq!(
        layout.mount_of(Controller::Memory),
        Some(Path::new("/sys/fs/cgroup/memory"))
    );
    assert_eq!(layout.mount_of(Controller::Freezer), None);
    let Layout::V1 { mounts } = &layout else {
        panic!("must be v1");
    };
    let groups = v1_groups(mounts);
    assert_eq!(groups.len(), 3, "{groups:?}");
}

#[test]
fn layout_none_without_cgroups() {
    assert_eq!(Layout::from_mounts(&parse_mountinfo("")), None);
    // A v1 mount carrying only a named hierarchy does not make the machine v1.
    let only_named = "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n";
    assert_eq!(Layout::from_mounts(&parse_mountinfo(only_named)), None);
}

#[test]
fn unescape() {
    assert_eq!(
        agentbox_core::mountinfo::unescape(r"/a\040b\134c"),
        r"/a b\c"
    );
    assert_eq!(agentbox_core::mountinfo::unescape(r"/a\04"), r"/a\04");
    assert_eq!(agentbox_core::mountinfo::unescape(r"\"), r"\");
}

#[test]
fn names() {
    for ok in ["web", "test-12-x", "a.b_c", "0"] {
        validate_name(ok).expect(ok);
    }
    for bad in [
        "",
        ".",
        "..",
        "-x",
        "a/b",
        ".hidden",
        "a b",
        &"x".repeat(129),
    ] {
        assert!(validate_name(bad).is_err(), "{bad:?} must be rejected");
    }
}

/// The v2 code path on the machine's cgroup2 mount, even on a hybrid machine where it has
/// no controllers: processes are listed, killed (with `cgroup.kill`, and by freezing) and
/// the group removed.
#[test]
fn v2_lifecycle_on_the_unified_mount() {
    use std::io::{BufRead, Write};
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};

    if !agentbox_testkit::tier::require_root("v2_lifecycle_on_the_unified_mount") {
        return;
    }
    let text = fs_err::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let Some(mount) = parse_mountinfo(&text)
        .into_iter()
        .find(|e| e.fstype == "cgroup2" && e.root == "/")
        .map(|e| e.mount_point)
    else {
        eprintln!("SKIP v2_lifecycle_on_the_unified_mount: no cgroup2 mount here");
        return;
    };

    struct Remove(BoxCgroup);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = self.0.clone().remove();
        }
    }

    for use_kill_file in [true, false] {
        let name = format!("unit-{}-v2-{use_kill_file}", std::process::id());
        let cg = create_v2(&name, &Limits::default(), &mount, Path::new("")).expect("create");
        let _remove = Remove(cg.clone());
        assert_eq!(cg.version(), 2);
        assert_eq!(cg.dirs(), vec![mount.join("agentbox").join(&name)]);

        let mut sh = Command::new("sh")
            .arg("-c")
            .arg("read go; sleep 600 & sleep 600 & echo ready; wait")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sh");
        cg.add(sh.id()).expect("add");
        sh.stdin
            .take()
            .expect("stdin")
            .write_all(b"go\n")
            .expect("go");
        let mut line = String::new();
        std::io::BufReader::new(sh.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("ready");
        assert_eq!(line.trim(), "ready");
        assert_eq!(cg.pids().expect("pids").len(), 3);

        cg.kill_all_with(use_kill_file).expect("kill_all");
        assert_eq!(cg.pids().expect("pids"), Vec::<u32>::new());
        assert_eq!(sh.wait().expect("wait").signal(), Some(9));
        let dir = cg.dirs()[0].to_owned();
        cg.remove().expect("remove");
        assert!(!dir.exists());
    }

    // A limit whose controller the mount does not offer is refused, naming it.
    let offered = v2_controller_list(&mount.join("cgroup.controllers")).expect("controllers");
    if !offered.iter().any(|c| c == "pids") {
        let name = format!("unit-{}-v2-pids", std::process::id());
        let limits = Limits {
            pids: Some(3),
            ..Limits::default()
        };
        let e = create_v2(&name, &limits, &mount, Path::new("")).expect_err("no pids");
        assert!(
            matches!(
                e,
                CgroupError::ControllerMissing {
                    controller: "pids",
                    ..
                }
            ),
            "{e}"
        );
        assert!(!mount.join("agentbox").join(&name).exists());
    }
}

#[test]
fn unwritable_root_without_limits_is_unavailable() {
    let path = Path::new("/sys/fs/cgroup/pids/agentbox");
    let e = cannot_create(&Limits::default(), path, "permission denied".into());
    assert!(e.is_unavailable(), "{e}");
    let limited = Limits {
        pids: Some(4),
        ..Limits::default()
    };
    let e = cannot_create(&limited, path, "permission denied".into());
    assert!(!e.is_unavailable());
    let msg = e.to_string();
    assert!(msg.contains("run agentbox as root"), "{msg}");
    assert!(msg.contains(PARENT_ENV), "{msg}");
    assert!(msg.contains("pids 4"), "{msg}");
}
