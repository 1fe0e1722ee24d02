//! The kernel's file systems in the box: `/proc`, `/sys` and `/dev`, and their knobs.

use super::*;

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
