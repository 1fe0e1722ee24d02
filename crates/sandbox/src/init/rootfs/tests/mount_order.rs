//! The root overlay, its layers, and the order of the mounts up to `pivot_root`.

use super::*;

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
