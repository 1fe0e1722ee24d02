//! Host paths bound into the box: their flags, and binds or hidden paths that leave the root.

use super::*;

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
