//! The rootfs plan, built against a recording kernel (tier 0: no root, nothing mounted).
//!
//! Each test builds a box's root for a representative spec on a pretended host and asserts
//! one property of the recorded calls; see the module's doc for the invariants.

use super::*;
use crate::idmap::BoxUserNs;
use crate::init::kernel::recording::{Op, Recording};
use crate::init::kernel::Kind;
use crate::proto::IdRange;

pub(super) const LOWER_TOP: &str = "/home/alice/.agentbox/store/n2";
pub(super) const LOWER: &str = "/home/alice/.agentbox/store/n1";
pub(super) const UPPER: &str = "/home/alice/.agentbox/boxes/b1/upper";
pub(super) const WORK: &str = "/home/alice/.agentbox/boxes/b1/work";
pub(super) const SCRATCH: &str = "/home/alice/.agentbox/boxes/b1/scratch";
pub(super) const ROOT: &str = "/home/alice/.agentbox/boxes/b1/scratch/r";
const RELAY: &str = "/home/alice/.agentbox/boxes/b1/relay.sock";
const HOST_RESOLV: &str = "search corp.example\nnameserver 192.0.2.53\n";

pub(super) fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

/// `ROOT` joined with `rel`.
pub(super) fn r(rel: &str) -> PathBuf {
    Path::new(ROOT).join(rel)
}

/// A root box on the host's `/` and network, hiding what the host's data and secrets
/// lists would (homes, `/root`, a container engine's state, a secret file, one path below
/// another hidden one, one that does not exist), with a read-write and a read-only bind.
pub(super) fn spec() -> BoxSpec {
    BoxSpec {
        hostname: "b1".into(),
        base: p("/"),
        lowers: vec![p(LOWER_TOP), p(LOWER)],
        upper: p(UPPER),
        workdir: p(WORK),
        scratch: p(SCRATCH),
        hide: [
            "/home",
            "/root",
            "/var/lib/docker",
            "/etc/shadow",
            "/srv/x/secret.key",
            "/home/alice/.ssh",
            "/nonexistent",
        ]
        .map(p)
        .to_vec(),
        show: Vec::new(),
        network: Network::Host,
        binds: vec![
            Bind {
                src: p(RELAY),
                dst: p("/run/agentbox/relay.sock"),
                readonly: false,
            },
            Bind {
                src: p("/opt/tools"),
                dst: p("/run/agentbox/tools"),
                readonly: true,
            },
        ],
        rootless: false,
        tmpfs: TmpfsSizes {
            tmp: 1 << 30,
            run: 64 << 20,
            shm: 1 << 29,
        },
        ids: None,
    }
}

/// A rootless box: no hidden home or `/root` (its own), the host's directories bound.
pub(super) fn rootless() -> BoxSpec {
    BoxSpec {
        rootless: true,
        hide: ["/var/lib/docker", "/etc/shadow", "/nonexistent"]
            .map(p)
            .to_vec(),
        ..spec()
    }
}

/// The host `spec()` runs on, and what the box's fresh `/proc` and `/sys` show: some of
/// the knobs and host-state files exist, some (`irq`, `bus`, `fs`, `keys`, `scsi`, …) not.
pub(super) fn host() -> Recording {
    let mut rec = Recording::new()
        .dir(LOWER_TOP)
        .dir(LOWER)
        .dir(UPPER)
        .dir(WORK)
        .dir_owned("/home/alice", 1000, 1000, 0o700)
        .dir("/home/alice/.ssh")
        .file(RELAY, "")
        .dir_owned("/root", 0, 0, 0o700)
        .dir_owned("/var/lib/docker", 0, 0, 0o710)
        .dir_owned("/srv/x", 1000, 1000, 0o750)
        .file("/srv/x/secret.key", "k")
        .file("/etc/shadow", "root:*:")
        .file("/etc/resolv.conf", HOST_RESOLV)
        .file("/etc/hosts", "127.0.0.1 localhost\n")
        .dir("/usr/bin")
        .dir("/opt/tools")
        .dir("/sys")
        .symlink("/bin", "usr/bin")
        .dir("/lost+found")
        .dir("/tmp")
        .dir(&format!("{ROOT}/proc/sys"))
        .file(&format!("{ROOT}/proc/sysrq-trigger"), "")
        .file(&format!("{ROOT}/proc/kcore"), "")
        .file(&format!("{ROOT}/proc/kmsg"), "")
        .dir(&format!("{ROOT}/proc/acpi"))
        .dir(&format!("{ROOT}/sys/firmware"));
    // More than the box gets: raw memory, the kernel's log, a disk.
    for d in [
        "null", "zero", "full", "random", "urandom", "tty", "mem", "kmsg", "sda",
    ] {
        rec = rec.file(&format!("/dev/{d}"), "");
    }
    rec
}

/// A rootless box's host: its first layer's skeleton shows in the box's root (`usr`,
/// `etc`, but not `opt`: a directory the host made after the box's layer was).
pub(super) fn rootless_host() -> Recording {
    host()
        .dir(&format!("{ROOT}/usr"))
        .dir(&format!("{ROOT}/etc"))
}

pub(super) fn build(rec: &mut Recording, spec: &BoxSpec) -> Result<bool, String> {
    if spec.rootless {
        setup_root_rootless(rec, spec).map(|()| false)
    } else {
        setup_root(rec, spec, None)
    }
}

pub(super) fn built(rec: &mut Recording, spec: &BoxSpec) {
    build(rec, spec).expect("the box's root is built");
    assert_eq!(rec.refused(), Vec::<&Op>::new(), "no call failed");
}

fn stand_in() -> BoxUserNs {
    BoxUserNs::stand_in(IdRange {
        uid: 0x7000_0000,
        gid: 0x7000_0000,
        count: 65536,
    })
}

/// Index of the first recorded call `f` holds for.
pub(super) fn first(rec: &Recording, what: &str, f: impl Fn(&Op) -> bool) -> usize {
    rec.ops()
        .iter()
        .position(f)
        .unwrap_or_else(|| panic!("no call {what} in {:#?}", rec.ops()))
}

pub(super) fn is_mount_of(op: &Op, fs: &str, at: &Path) -> bool {
    matches!(op, Op::Mount { fstype, target, .. } if fstype == fs && target == at)
}

/// The options of the overlay mounted at `at`.
pub(super) fn overlay_data(rec: &Recording, at: &Path) -> String {
    rec.ops()
        .iter()
        .find_map(|op| match op {
            Op::Mount {
                fstype,
                target,
                data,
                ..
            } if fstype == "overlay" && target == at => Some(data.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no overlay at {}", at.display()))
}

/// The mount-table changes made at `at`, in order.
pub(super) fn mounts_at<'a>(rec: &'a Recording, at: &Path) -> Vec<&'a Op> {
    rec.ops()
        .iter()
        .filter(|op| op.is_mount() && op.target() == Some(at))
        .collect()
}

const KNOB_FLAGS: MountFlags = MountFlags::BIND
    .union(MountFlags::RDONLY)
    .union(MountFlags::NOSUID)
    .union(MountFlags::NODEV)
    .union(MountFlags::NOEXEC);

#[test]
fn nothing_is_put_into_the_root_before_its_overlay_is_mounted() {
    let ns = stand_in();
    for (name, spec, userns) in [
        ("root box", spec(), None),
        ("idmapped root box", spec(), Some(&ns)),
        ("rootless box", rootless(), None),
    ] {
        let mut rec = if spec.rootless {
            rootless_host()
        } else {
            host()
        };
        match userns {
            Some(ns) => assert_eq!(setup_root(&mut rec, &spec, Some(ns)), Ok(true)),
            None => built(&mut rec, &spec),
        }
        let root = p(ROOT);
        let overlay = first(&rec, "mounting the root overlay", |op| {
            is_mount_of(op, "overlay", &root)
        });
        for (i, op) in rec.ops().iter().enumerate() {
            let Some(t) = op.target() else { continue };
            if t.starts_with(&root) && t != root {
                assert!(i > overlay, "{name}: {op:?} before the root overlay");
            }
        }
        // The mount point itself is made first, and nothing else lands on it.
        let made = first(&rec, "making the root", |op| {
            *op == Op::MkdirP(root.clone())
        });
        assert!(made < overlay);
        assert_eq!(
            mounts_at(&rec, &root).len(),
            1,
            "{name}: one mount at the root"
        );
    }
}

#[test]
fn the_root_overlay_stacks_the_boxs_layers_over_the_read_only_base() {
    let mut rec = host();
    built(&mut rec, &spec());
    let (empty, base) = (p(SCRATCH).join("e"), p(SCRATCH).join("b"));
    // The base wrapper: read-only, the hiding layer on top of the host's `/`.
    let wrapper = first(&rec, "mounting the base wrapper", |op| {
        is_mount_of(op, "overlay", &base)
    });
    assert_eq!(
        rec.ops()[wrapper],
        Op::Mount {
            src: "agentbox".into(),
            target: base.clone(),
            fstype: "overlay".into(),
            flags: MountFlags::RDONLY,
            data: format!("lowerdir={}:/", empty.display()),
        }
    );
    // Overlayfs does not allow its layers to change under it: the hiding layer is complete
    // before the wrapper takes it.
    for (i, op) in rec.ops().iter().enumerate() {
        if op.target().is_some_and(|t| t.starts_with(&empty)) {
            assert!(
                i < wrapper,
                "{op:?} changes the hiding layer after it is mounted"
            );
        }
    }
    let root = first(&rec, "mounting the root overlay", |op| {
        is_mount_of(op, "overlay", Path::new(ROOT))
    });
    assert!(wrapper < root);
    assert_eq!(
        rec.ops()[root],
        Op::Mount {
            src: "agentbox".into(),
            target: p(ROOT),
            fstype: "overlay".into(),
            // No device node of a layer opens as a device.
            flags: MountFlags::NODEV,
            // The layers staged in the scratch directory, named relative to it: the box
            // reads these options in its mountinfo.
            data: "lowerdir=m/0:m/1:b,upperdir=m/u/upper,workdir=m/u/work,\
                   redirect_dir=off,metacopy=off,index=off,xino=off"
                .into(),
        }
    );
    for (layer, at) in [
        (LOWER_TOP, "m/0"),
        (LOWER, "m/1"),
        ("/home/alice/.agentbox/boxes/b1", "m/u"),
    ] {
        assert!(
            rec.ops()[..root].contains(&Op::Bind {
                src: p(layer),
                target: p(SCRATCH).join(at),
            }),
            "{layer} is staged at {at}"
        );
    }
    assert!(rec.ops()[..root].contains(&Op::Chdir(p(SCRATCH))));
    // The first call makes every mount private: nothing done after it reaches the host's
    // mount table.
    assert_eq!(
        rec.ops()[0],
        Op::Propagation {
            target: p("/"),
            flags: MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
        }
    );
}

#[test]
fn a_rootless_boxs_overlay_is_unprivileged_and_has_no_base_layer() {
    let mut rec = rootless_host();
    built(&mut rec, &rootless());
    assert_eq!(
        overlay_data(&rec, Path::new(ROOT)),
        "lowerdir=m/0:m/1,upperdir=m/u/upper,workdir=m/u/work,userxattr,index=off,xino=off"
    );
    let overlays = rec
        .ops()
        .iter()
        .filter(|op| matches!(op, Op::Mount { fstype, .. } if fstype == "overlay"))
        .count();
    assert_eq!(
        overlays, 1,
        "no base wrapper: the host's directories are bound"
    );
}

#[test]
fn proc_is_fresh_with_the_kernels_knobs_read_only_and_host_state_masked() {
    for spec in [spec(), rootless()] {
        let mut rec = if spec.rootless {
            rootless_host()
        } else {
            host()
        };
        built(&mut rec, &spec);
        let proc_ = r("proc");
        let mounted = first(&rec, "mounting /proc", |op| is_mount_of(op, "proc", &proc_));
        assert!(matches!(&rec.ops()[mounted], Op::Mount { flags, .. }
            if *flags == MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC));
        // What this kernel's /proc has (the fixture's), of every list; the rest is left
        // alone, not created to be masked.
        let exists = |name: &str| ["sys", "sysrq-trigger", "kcore", "kmsg", "acpi"].contains(&name);
        for name in PROC_READ_ONLY
            .iter()
            .chain(PROC_MASKED_FILES)
            .chain(PROC_MASKED_DIRS)
            .filter(|n| !exists(n))
        {
            let at = proc_.join(name);
            assert!(
                rec.ops().iter().all(|op| op.target() != Some(&at)),
                "/proc/{name} does not exist and is touched"
            );
        }
        // Each knob that exists: bound on itself, then made read-only — after /proc is
        // mounted (before, it would be the host's /proc that is changed).
        for knob in PROC_READ_ONLY.iter().filter(|n| exists(n)) {
            let at = proc_.join(knob);
            assert_eq!(
                mounts_at(&rec, &at),
                [
                    &Op::Bind {
                        src: at.clone(),
                        target: at.clone(),
                    },
                    &Op::Remount {
                        target: at.clone(),
                        flags: KNOB_FLAGS,
                    },
                ],
                "/proc/{knob}"
            );
            let bound = first(&rec, "binding the knob", |op| op.target() == Some(&at));
            assert!(mounted < bound);
        }
        for file in PROC_MASKED_FILES.iter().filter(|n| exists(n)) {
            let at = proc_.join(file);
            assert_eq!(
                mounts_at(&rec, &at),
                [&Op::Bind {
                    src: p("/dev/null"),
                    target: at.clone(),
                }],
                "/proc/{file}"
            );
        }
        for dir in PROC_MASKED_DIRS.iter().filter(|n| exists(n)) {
            let at = proc_.join(dir);
            assert_eq!(
                mounts_at(&rec, &at),
                [&Op::Mount {
                    src: "agentbox-masked".into(),
                    target: at.clone(),
                    fstype: "tmpfs".into(),
                    flags: MountFlags::RDONLY
                        | MountFlags::NOSUID
                        | MountFlags::NODEV
                        | MountFlags::NOEXEC,
                    data: "size=0,mode=555".into(),
                }],
                "/proc/{dir}"
            );
        }
        assert_eq!(
            mounts_at(&rec, &r("sys/firmware")).len(),
            1,
            "/sys/firmware masked"
        );
    }
}

#[test]
fn sys_is_read_only() {
    // A fresh sysfs where the box has a network namespace of its own, or is a root box.
    for spec in [
        spec(),
        BoxSpec {
            network: Network::Private,
            ..rootless()
        },
    ] {
        let mut rec = if spec.rootless {
            rootless_host()
        } else {
            host()
        };
        built(&mut rec, &spec);
        assert_eq!(
            mounts_at(&rec, &r("sys")),
            [&Op::Mount {
                src: "sysfs".into(),
                target: r("sys"),
                fstype: "sysfs".into(),
                flags: MountFlags::NOSUID
                    | MountFlags::NODEV
                    | MountFlags::NOEXEC
                    | MountFlags::RDONLY,
                data: String::new(),
            }]
        );
    }
    // A rootless box on the host's network shows the host's, made read-only where the
    // kernel lets it (see `a_rootless_box_shows_the_hosts_directories_read_only_…`).
    let mut rec = rootless_host();
    built(&mut rec, &rootless());
    assert_eq!(
        mounts_at(&rec, &r("sys")),
        [
            &Op::Rbind {
                src: p("/sys"),
                target: r("sys"),
            },
            &Op::Remount {
                target: r("sys"),
                flags: MountFlags::BIND | MountFlags::RDONLY,
            },
        ]
    );
}

#[test]
fn a_knob_that_cannot_be_made_read_only_stops_the_box() {
    let knob = r("proc/sys");
    let mut rec =
        host().refusing(move |op| matches!(op, Op::Remount { target, .. } if *target == knob));
    let e = build(&mut rec, &spec()).expect_err("a writable /proc/sys never starts");
    assert_eq!(
        e,
        "making /proc/sys read-only: Operation not permitted (os error 1)"
    );
    let last = rec.ops().last().expect("calls were made");
    assert!(
        matches!(last, Op::Remount { .. }),
        "stopped at the refusal: {last:?}"
    );
    assert!(!rec
        .ops()
        .iter()
        .any(|op| matches!(op, Op::PivotRoot { .. })));
}

#[test]
fn hidden_paths_are_emptied_in_the_bases_top_layer() {
    let mut rec = host();
    built(&mut rec, &spec());
    let e = |rel: &str| p(SCRATCH).join("e").join(rel);
    let opaque: Vec<&Path> = rec
        .ops()
        .iter()
        .filter_map(|op| match op {
            Op::SetXattr { path, name, value }
                if name == "trusted.overlay.opaque" && value == b"y" =>
            {
                Some(path.as_path())
            }
            _ => None,
        })
        .collect();
    // Sorted, and `/home/alice/.ssh` is not made: `/home` already hides it.
    assert_eq!(opaque, [e("home"), e("root"), e("var/lib/docker")]);
    let whiteouts: Vec<&Path> = rec
        .ops()
        .iter()
        .filter_map(|op| match op {
            Op::Whiteout(path) => Some(path.as_path()),
            _ => None,
        })
        .collect();
    assert_eq!(whiteouts, [e("etc/shadow"), e("srv/x/secret.key")]);
    assert_eq!(rec.kind(&e("nonexistent").to_string_lossy()), None);
    // A hiding directory and the directories above a hidden path look as the host's do
    // (the overlay takes their attributes from this layer now).
    for (rel, uid, mode) in [
        ("home", 0, 0o755),
        ("root", 0, 0o700),
        ("var/lib/docker", 0, 0o710),
        ("srv/x", 1000, 0o750),
    ] {
        let at = e(rel);
        assert!(
            rec.ops().contains(&Op::Chown {
                path: at.clone(),
                uid,
                gid: uid,
            }),
            "{rel} owned as on the host"
        );
        assert!(
            rec.ops().contains(&Op::Chmod {
                path: at.clone(),
                mode,
            }),
            "{rel} has the host's mode"
        );
    }
}

#[test]
fn a_rootless_box_hides_directories_under_an_empty_read_only_tmpfs() {
    let mut rec = rootless_host().dir(&format!("{ROOT}/var/lib/docker"));
    built(&mut rec, &rootless());
    let hidden: Vec<&Op> = rec
        .ops()
        .iter()
        .filter(|op| matches!(op, Op::Mount { data, .. } if data == "size=4k"))
        .collect();
    // Not the file (`/etc/shadow`: the layer has none), not what does not exist.
    assert_eq!(
        hidden,
        [&Op::Mount {
            src: "agentbox".into(),
            target: r("var/lib/docker"),
            fstype: "tmpfs".into(),
            flags: MountFlags::RDONLY,
            data: "size=4k".into(),
        }]
    );
}

#[test]
fn a_rootless_box_shows_the_hosts_directories_read_only_where_its_layer_has_a_mount_point() {
    let mut rec = rootless_host();
    built(&mut rec, &rootless());
    let bound: Vec<(&Path, &Path)> = rec
        .ops()
        .iter()
        .filter_map(|op| match op {
            Op::Rbind { src, target } => Some((src.as_path(), target.as_path())),
            _ => None,
        })
        .collect();
    // `/sys` is the host's too (a fresh sysfs needs a network namespace of the box's own).
    // Not `/opt` (no mount point in the layer), not `/bin` (a symlink), not `/tmp` or
    // `/home` (the box's own), not `lost+found`.
    let etc = r("etc");
    let sys = r("sys");
    let usr = r("usr");
    assert_eq!(
        bound,
        [
            (Path::new("/etc"), etc.as_path()),
            (Path::new("/usr"), usr.as_path()),
            (Path::new("/sys"), sys.as_path()),
        ]
    );
    for at in [&etc, &usr, &sys] {
        assert_eq!(
            mounts_at(&rec, at)[1],
            &Op::Remount {
                target: at.clone(),
                flags: MountFlags::BIND | MountFlags::RDONLY,
            }
        );
    }
}

#[test]
fn a_host_directory_locked_read_write_does_not_stop_a_rootless_box() {
    let etc = r("etc");
    let mut rec = rootless_host()
        .refusing(move |op| matches!(op, Op::Remount { target, .. } if *target == etc));
    assert_eq!(build(&mut rec, &rootless()), Ok(false));
    assert_eq!(rec.refused().len(), 1);
    assert!(matches!(
        rec.ops().iter().rev().nth(2),
        Some(Op::PivotRoot { .. })
    ));
}

#[test]
fn host_paths_bound_into_the_box_are_read_only_nosuid_and_nodev() {
    let mut rec = host();
    built(&mut rec, &spec());
    let tools = r("run/agentbox/tools");
    assert_eq!(
        mounts_at(&rec, &tools),
        [
            &Op::Bind {
                src: p("/opt/tools"),
                target: tools.clone(),
            },
            &Op::Remount {
                target: tools.clone(),
                flags: MountFlags::BIND
                    | MountFlags::RDONLY
                    | MountFlags::NOSUID
                    | MountFlags::NODEV,
            },
        ]
    );
    assert_eq!(rec.kind(&tools.to_string_lossy()), Some(Kind::Dir));
    // A file is bound on a file made for it, below the box's private /run (mounted first);
    // a read-write bind is nosuid and nodev too.
    let relay = r("run/agentbox/relay.sock");
    assert_eq!(
        mounts_at(&rec, &relay),
        [
            &Op::Bind {
                src: p(RELAY),
                target: relay.clone(),
            },
            &Op::Remount {
                target: relay.clone(),
                flags: MountFlags::BIND | MountFlags::NOSUID | MountFlags::NODEV,
            },
        ]
    );
    assert_eq!(rec.kind(&relay.to_string_lossy()), Some(Kind::File));
    let run = first(&rec, "mounting /run", |op| {
        is_mount_of(op, "tmpfs", &r("run"))
    });
    let bind = first(&rec, "making the bind's target", |op| {
        op.target()
            .is_some_and(|t| t.starts_with(r("run/agentbox")))
    });
    assert!(
        run < bind,
        "the binds land on the box's /run, not the layer's"
    );
    // The box's private in-memory mounts: no setuid, no devices, sized.
    for (src, at, data) in [
        ("tmp", "tmp", format!("mode=1777,size={}", 1u64 << 30)),
        ("run", "run", format!("mode=755,size={}", 64u64 << 20)),
        ("shm", "dev/shm", format!("mode=1777,size={}", 1u64 << 29)),
    ] {
        assert_eq!(
            mounts_at(&rec, &r(at)),
            [&Op::Mount {
                src: src.into(),
                target: r(at),
                fstype: "tmpfs".into(),
                flags: MountFlags::NOSUID | MountFlags::NODEV,
                data,
            }],
            "/{at}"
        );
    }
}

#[test]
fn an_idmapped_box_reaches_every_layer_through_its_idmapped_copy() {
    let ns = stand_in();
    let mut rec = host();
    assert_eq!(setup_root(&mut rec, &spec(), Some(&ns)), Ok(true));
    let m = |rel: &str| p(SCRATCH).join("m").join(rel);
    let idmapped: Vec<(&Path, &Path)> = rec
        .ops()
        .iter()
        .filter_map(|op| match op {
            Op::IdmappedMount { src, target } => Some((src.as_path(), target.as_path())),
            _ => None,
        })
        .collect();
    let (e, b, l0, l1, u) = (m("e"), m("b"), m("0"), m("1"), m("u"));
    let (hide, tools, tools_in) = (
        p(SCRATCH).join("e"),
        p("/opt/tools"),
        r("run/agentbox/tools"),
    );
    let (relay, relay_in) = (p(RELAY), r("run/agentbox/relay.sock"));
    assert_eq!(
        idmapped,
        [
            (hide.as_path(), e.as_path()),
            (Path::new("/"), b.as_path()),
            (Path::new(LOWER_TOP), l0.as_path()),
            (Path::new(LOWER), l1.as_path()),
            (
                Path::new(UPPER).parent().expect("upper has a parent"),
                u.as_path()
            ),
            (tools.as_path(), tools_in.as_path()),
        ]
    );
    // A read-write bind is never idmapped: what box root writes there is owned by the box's
    // own ids on the host, never by host root.
    assert!(rec
        .ops()
        .iter()
        .any(|op| matches!(op, Op::Bind { src, target } if *src == relay && *target == relay_in)));
    assert_eq!(
        overlay_data(&rec, &p(SCRATCH).join("b")),
        format!("lowerdir={}:{}", e.display(), b.display())
    );
    assert_eq!(
        overlay_data(&rec, Path::new(ROOT)),
        "lowerdir=m/0:m/1:b,upperdir=m/u/upper,workdir=m/u/work,\
         redirect_dir=off,metacopy=off,index=off,xino=off"
    );
    // The overlay's work files are made as box root: acting so starts after the base
    // wrapper (made as host root) and before the root overlay.
    let acting = first(&rec, "acting as box root", |op| {
        *op == Op::ActOnFilesAsBoxRoot
    });
    assert!(
        first(&rec, "the base wrapper", |op| is_mount_of(
            op,
            "overlay",
            &p(SCRATCH).join("b")
        )) < acting
    );
    assert!(
        acting
            < first(&rec, "the root overlay", |op| is_mount_of(
                op,
                "overlay",
                Path::new(ROOT)
            ))
    );
    // An idmapped bind is not bound a second time.
    assert!(!rec
        .ops()
        .iter()
        .any(|op| matches!(op, Op::Bind { target, .. } if *target == tools_in)));
}

#[test]
fn a_bind_whose_file_system_cannot_be_idmapped_is_bound_plainly() {
    let ns = stand_in();
    let tools = p("/opt/tools");
    let mut rec =
        host().refusing(move |op| matches!(op, Op::IdmappedMount { src, .. } if *src == tools));
    assert_eq!(setup_root(&mut rec, &spec(), Some(&ns)), Ok(true));
    let at = r("run/agentbox/tools");
    assert_eq!(
        mounts_at(&rec, &at),
        [
            &Op::IdmappedMount {
                src: p("/opt/tools"),
                target: at.clone(),
            },
            &Op::Bind {
                src: p("/opt/tools"),
                target: at.clone(),
            },
            &Op::Remount {
                target: at.clone(),
                flags: MountFlags::BIND
                    | MountFlags::RDONLY
                    | MountFlags::NOSUID
                    | MountFlags::NODEV,
            },
        ]
    );
}

#[test]
fn a_base_that_cannot_be_idmapped_leaves_box_root_host_root() {
    let ns = stand_in();
    let mut rec =
        host().refusing(|op| matches!(op, Op::IdmappedMount { src, .. } if src == Path::new("/")));
    assert_eq!(setup_root(&mut rec, &spec(), Some(&ns)), Ok(false));
    assert!(!rec.ops().contains(&Op::ActOnFilesAsBoxRoot));
    assert!(
        overlay_data(&rec, Path::new(ROOT)).starts_with("lowerdir=m/0:m/1:b,upperdir=m/u/upper,")
    );
    assert!(rec.ops().contains(&Op::Bind {
        src: p(LOWER_TOP),
        target: p(SCRATCH).join("m/0"),
    }));
    // The binds are then plain binds too: no idmapped mount after the refused one.
    let refused = first(
        &rec,
        "idmapping the base",
        |op| matches!(op, Op::IdmappedMount { src, .. } if src == Path::new("/")),
    );
    assert!(rec.ops()[refused + 1..]
        .iter()
        .all(|op| !matches!(op, Op::IdmappedMount { .. })));
}

#[test]
fn dev_holds_only_the_listed_devices() {
    for spec in [spec(), rootless()] {
        let mut rec = if spec.rootless {
            rootless_host()
        } else {
            host()
        };
        built(&mut rec, &spec);
        let dev = r("dev");
        assert_eq!(
            mounts_at(&rec, &dev),
            [&Op::Mount {
                src: "agentbox".into(),
                target: dev.clone(),
                fstype: "tmpfs".into(),
                flags: MountFlags::NOSUID | MountFlags::NOEXEC | MountFlags::NODEV,
                data: "mode=755,size=1m".into(),
            }]
        );
        let binds: Vec<(&Path, &Path)> = rec
            .ops()
            .iter()
            .filter_map(|op| match op {
                Op::Bind { src, target } if target.starts_with(&dev) => {
                    Some((src.as_path(), target.as_path()))
                }
                _ => None,
            })
            .collect();
        // The list itself is part of the box's boundary: a node added to it (`mem`,
        // `kmsg`, a disk) must be a decision, made here too.
        assert_eq!(
            DEVICES,
            ["null", "zero", "full", "random", "urandom", "tty"]
        );
        let expected: Vec<(PathBuf, PathBuf)> = DEVICES
            .iter()
            .map(|d| (Path::new("/dev").join(d), dev.join(d)))
            .collect();
        assert_eq!(
            binds,
            expected
                .iter()
                .map(|(s, t)| (s.as_path(), t.as_path()))
                .collect::<Vec<_>>()
        );
        // No other way into /dev: no device node is made anywhere in the box, and the
        // only other mounts are the box's own pty instance and shared memory.
        assert!(!rec.ops().iter().any(|op| match op {
            Op::Whiteout(at) => at.starts_with(ROOT),
            Op::Rbind { target, .. } => target.starts_with(&dev),
            _ => false,
        }));
        let others: Vec<&Path> = rec
            .ops()
            .iter()
            .filter_map(|op| match op {
                Op::Mount { target, .. } if target.starts_with(&dev) && *target != dev => {
                    Some(target.as_path())
                }
                _ => None,
            })
            .collect();
        assert_eq!(others, [dev.join("pts"), dev.join("shm")]);
        // A pty instance of the box's own: the host's terminals are not in it.
        assert_eq!(
            mounts_at(&rec, &dev.join("pts")),
            [&Op::Mount {
                src: "devpts".into(),
                target: dev.join("pts"),
                fstype: "devpts".into(),
                flags: MountFlags::NOSUID | MountFlags::NOEXEC,
                data: "newinstance,ptmxmode=0666,mode=620".into(),
            }]
        );
        let links: Vec<&Path> = rec
            .ops()
            .iter()
            .filter_map(|op| match op {
                Op::Symlink { link, .. } if link.starts_with(&dev) => link.strip_prefix(&dev).ok(),
                _ => None,
            })
            .collect();
        assert_eq!(
            links,
            ["ptmx", "fd", "stdin", "stdout", "stderr"].map(Path::new)
        );
    }
}

#[test]
fn pivot_root_comes_last() {
    for (network, rootless) in [
        (Network::Host, false),
        (Network::None, false),
        (Network::Private, false),
        (Network::Host, true),
        (Network::Private, true),
    ] {
        let spec = BoxSpec {
            network,
            rootless,
            ..if rootless { self::rootless() } else { spec() }
        };
        let mut rec = if rootless { rootless_host() } else { host() };
        built(&mut rec, &spec);
        let ops = rec.ops();
        let named = first(&rec, "setting the host name", |op| {
            matches!(op, Op::SetHostname(_))
        });
        let mut tail = vec![Op::SetHostname("b1".into())];
        if network.own_namespace() {
            tail.push(Op::LoopbackUp);
        }
        tail.extend([
            Op::Chdir(p(ROOT)),
            Op::PivotRoot {
                new_root: p("."),
                put_old: p("."),
            },
            // The host's root, stacked on the new one by pivot_root, goes away.
            Op::Unmount {
                target: p("."),
                flags: UnmountFlags::DETACH,
            },
            Op::Chdir(p("/")),
        ]);
        assert_eq!(ops[named..], tail[..], "{network:?}, rootless: {rootless}");
        assert!(
            !ops[..named]
                .iter()
                .any(|op| matches!(op, Op::PivotRoot { .. } | Op::Unmount { .. })
                    || matches!(op, Op::Chdir(d) if *d != p(SCRATCH))),
            "nothing of entering the root happens early"
        );
    }
}

#[test]
fn a_layer_path_overlayfs_would_misread_is_refused_before_any_mount() {
    for bad in [
        "/home/alice/.agentbox/store/a,upperdir=/etc",
        "/home/alice/.agentbox/store/a:/",
        "/home/alice/.agentbox/store/a\\b",
    ] {
        let cases: [(&str, BoxSpec); 5] = [
            (
                "lower",
                BoxSpec {
                    lowers: vec![p(LOWER_TOP), p(bad)],
                    ..spec()
                },
            ),
            (
                "upper",
                BoxSpec {
                    upper: p(bad),
                    ..spec()
                },
            ),
            (
                "base",
                BoxSpec {
                    base: p(bad),
                    ..spec()
                },
            ),
            (
                "scratch",
                BoxSpec {
                    scratch: p(bad),
                    ..spec()
                },
            ),
            (
                "rootless lower",
                BoxSpec {
                    lowers: vec![p(bad)],
                    ..rootless()
                },
            ),
        ];
        for (what, spec) in cases {
            let mut rec = host().dir(bad);
            let e = build(&mut rec, &spec).expect_err("refused");
            assert!(
                e.contains("which overlayfs cannot take in a layer path"),
                "{what}: {e}"
            );
            assert!(e.starts_with(bad), "{what}: the error names the path: {e}");
            assert_eq!(rec.ops(), [], "{what}: nothing is done before the refusal");
        }
    }
}

#[test]
fn with_idmapping_the_stores_paths_never_reach_an_overlays_options() {
    let bad = "/home/alice/.agentbox/store/a,upperdir=/etc";
    let spec = BoxSpec {
        lowers: vec![p(bad)],
        ..spec()
    };
    let ns = stand_in();
    let mut rec = host().dir(bad);
    assert_eq!(setup_root(&mut rec, &spec, Some(&ns)), Ok(true));
    let data = overlay_data(&rec, Path::new(ROOT));
    assert!(!data.contains(bad), "{data}");
    assert!(data.starts_with("lowerdir=m/0:"), "{data}");
    // Without idmapping (the base cannot be), the layer is staged by a plain bind: its path
    // is a system call's argument, never an overlay's option.
    let mut rec = host()
        .dir(bad)
        .refusing(|op| matches!(op, Op::IdmappedMount { src, .. } if src == Path::new("/")));
    assert_eq!(setup_root(&mut rec, &spec, Some(&ns)), Ok(false));
    let data = overlay_data(&rec, Path::new(ROOT));
    assert!(!data.contains(bad), "{data}");
    assert!(rec.ops().contains(&Op::Bind {
        src: p(bad),
        target: p(SCRATCH).join("m/0"),
    }));
}

#[test]
fn a_bind_or_hidden_path_that_leaves_its_root_is_refused() {
    for (dst, error) in [
        (
            "/run/../etc/passwd",
            "/run/../etc/passwd is not a plain absolute path",
        ),
        ("/etc/passwd", "bind target /etc/passwd is not below /run"),
        ("run/x", "bind target run/x is not below /run"),
    ] {
        let spec = BoxSpec {
            binds: vec![Bind {
                src: p("/opt/tools"),
                dst: p(dst),
                readonly: false,
            }],
            ..spec()
        };
        let mut rec = host();
        assert_eq!(build(&mut rec, &spec), Err(error.to_owned()));
        assert!(
            !rec.ops()
                .iter()
                .any(|op| op.target().is_some_and(|t| t.starts_with(r("etc")))),
            "nothing is made outside /run"
        );
        assert!(!rec
            .ops()
            .iter()
            .any(|op| matches!(op, Op::Bind { src, .. } if src == Path::new("/opt/tools"))));
        assert!(!rec
            .ops()
            .iter()
            .any(|op| matches!(op, Op::PivotRoot { .. })));
    }
    for spec in [spec(), rootless()] {
        let spec = BoxSpec {
            hide: vec![p("/home/../etc")],
            ..spec
        };
        let mut rec = if spec.rootless {
            rootless_host()
        } else {
            host()
        };
        assert_eq!(
            build(&mut rec, &spec),
            Err("/home/../etc is not a plain absolute path".to_owned())
        );
        assert!(!rec
            .ops()
            .iter()
            .any(|op| matches!(op, Op::PivotRoot { .. })));
    }
}

#[test]
fn a_private_network_gets_its_own_resolver_without_touching_the_layer() {
    let content = crate::net::resolv_conf(HOST_RESOLV).into_bytes();
    // systemd-resolved's symlink: the content goes at its target in the box's own /run.
    let mut rec = host().symlink(
        &format!("{ROOT}/etc/resolv.conf"),
        "../run/systemd/resolve/stub-resolv.conf",
    );
    let private = BoxSpec {
        network: Network::Private,
        ..spec()
    };
    built(&mut rec, &private);
    let target = r("run/systemd/resolve/stub-resolv.conf");
    assert_eq!(rec.content(&target.to_string_lossy()), Some(&content[..]));
    assert_eq!(
        rec.kind(&format!("{ROOT}/etc/resolv.conf")),
        Some(Kind::Symlink)
    );
    let written = first(
        &rec,
        "writing the resolver",
        |op| matches!(op, Op::WriteFile { path, .. } if *path == target),
    );
    assert!(
        first(&rec, "mounting /run", |op| is_mount_of(
            op,
            "tmpfs",
            &r("run")
        )) < written
    );
    // A plain file: covered by a bind of a private copy.
    let mut rec = host().file(&format!("{ROOT}/etc/resolv.conf"), "nameserver 10.0.0.1\n");
    built(&mut rec, &private);
    let copy = p(SCRATCH).join("etc_resolv.conf");
    assert_eq!(rec.content(&copy.to_string_lossy()), Some(&content[..]));
    assert_eq!(
        mounts_at(&rec, &r("etc/resolv.conf")),
        [&Op::Bind {
            src: copy,
            target: r("etc/resolv.conf"),
        }]
    );
    assert_eq!(
        rec.content(&format!("{ROOT}/etc/resolv.conf")),
        Some(&b"nameserver 10.0.0.1\n"[..]),
        "the layer's file is not written"
    );
}

#[test]
fn an_image_on_the_hosts_network_sees_the_hosts_name_service_files() {
    let image = BoxSpec {
        base: p("/home/alice/.agentbox/images/alpine/rootfs"),
        hide: Vec::new(),
        ..spec()
    };
    // The image's own resolv.conf is a symlink: replaced by a file to bind on.
    let mut rec = host()
        .dir("/home/alice/.agentbox/images/alpine/rootfs")
        .symlink(
            &format!("{ROOT}/etc/resolv.conf"),
            "/run/resolvconf/resolv.conf",
        );
    built(&mut rec, &image);
    for (file, content) in [
        ("etc/resolv.conf", HOST_RESOLV),
        ("etc/hosts", "127.0.0.1 localhost\n"),
    ] {
        let copy = p(SCRATCH).join(file.replace('/', "_"));
        assert_eq!(
            rec.content(&copy.to_string_lossy()),
            Some(content.as_bytes())
        );
        assert_eq!(
            mounts_at(&rec, &r(file)),
            [&Op::Bind {
                src: copy,
                target: r(file),
            }]
        );
    }
    assert!(rec.ops().contains(&Op::RemoveFile(r("etc/resolv.conf"))));
    assert_eq!(
        rec.kind(&format!("{ROOT}/etc/resolv.conf")),
        Some(Kind::File)
    );
}

#[test]
fn the_hosts_resolver_is_provided_where_the_bases_symlink_points_into_run() {
    // A target the host does not have (the box's /run is its own).
    let mut rec = host().symlink(
        &format!("{ROOT}/etc/resolv.conf"),
        "/run/resolvconf/resolv.conf",
    );
    built(&mut rec, &spec());
    assert_eq!(
        rec.content(&format!("{ROOT}/run/resolvconf/resolv.conf")),
        Some(HOST_RESOLV.as_bytes())
    );
    // A resolver the base has itself is left as it is.
    let mut rec = host().file(&format!("{ROOT}/etc/resolv.conf"), "nameserver 10.0.0.1\n");
    built(&mut rec, &spec());
    assert!(!rec
        .ops()
        .iter()
        .any(|op| matches!(op, Op::WriteFile { .. })));
    assert!(mounts_at(&rec, &r("etc/resolv.conf")).is_empty());
}
