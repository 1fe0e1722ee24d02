//! Idmapped layers and binds, the fallbacks when a file system cannot be idmapped, and
//! layer paths that must never reach an overlay's options.

use super::*;

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
