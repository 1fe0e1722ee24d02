//! Hidden host paths: emptied in the base's top layer (root), or covered and shown
//! read-only (rootless).

use super::*;

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
