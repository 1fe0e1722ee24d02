//! Host paths shown below hidden ones (see [`super::show`]), against the recording kernel.

use super::show::{plan, Shown};
use super::tests::*;
use super::*;
use crate::init::kernel::recording::{Op, Recording};

fn paths(v: &[&str]) -> Vec<PathBuf> {
    v.iter().map(PathBuf::from).collect()
}

#[test]
fn a_shown_path_takes_effect_where_the_nearest_path_above_it_is_hidden() {
    let hide = paths(&[
        "/root",
        "/home/alice",
        "/root/.cargo/credentials.toml",
        "/root/.cargo/registry/secret",
        "/root/.config/gh",
        "/root/.config/gh/hosts.yml",
        "/root/.local/share/opencode",
    ]);
    let show = paths(&[
        "/root/.cargo",
        // Below a shown path: shown with it.
        "/root/.cargo/registry",
        // Not below a hidden path: the host's already.
        "/opt/tools",
        // Hidden and shown: hidden.
        "/root/.local/share/opencode",
        "/root/.config",
        "/home/alice/.cargo",
        "/home/bob/.cargo",
    ]);
    let got = plan(&hide, &show, &|_| false);
    assert_eq!(
        got,
        [
            Shown {
                path: "/home/alice/.cargo".into(),
                hidden: vec![],
            },
            Shown {
                path: "/root/.cargo".into(),
                hidden: paths(&[
                    "/root/.cargo/credentials.toml",
                    "/root/.cargo/registry/secret"
                ]),
            },
            Shown {
                path: "/root/.config".into(),
                // Not `gh/hosts.yml`: hidden with `gh`.
                hidden: paths(&["/root/.config/gh"]),
            },
        ]
    );
    // A rootless box's own directories take the place of a hidden one.
    let own = |p: &Path| p.starts_with("/home");
    let got = plan(&[], &paths(&["/home/bob/.cargo", "/opt/x"]), &own);
    assert_eq!(
        got.iter().map(|s| s.path.as_path()).collect::<Vec<_>>(),
        [Path::new("/home/bob/.cargo")]
    );
}

/// A root box whose host user (alice) has a toolchain, a credentials file in it, a
/// symlinked tool and one that is gone.
fn root_box() -> (Recording, BoxSpec) {
    let rec = host()
        .dir_owned("/home/alice/.cargo/bin", 1000, 1000, 0o755)
        .dir_owned("/home/alice/.cargo", 1000, 1000, 0o751)
        .file("/home/alice/.cargo/credentials.toml", "token")
        .dir("/opt/local-bin")
        .dir("/home/alice/.local")
        .symlink("/home/alice/.local/bin", "/opt/local-bin");
    let mut spec = spec();
    spec.hide.extend(paths(&[
        "/home/alice",
        "/home/alice/.cargo/credentials",
        "/home/alice/.cargo/credentials.toml",
    ]));
    spec.show = paths(&[
        "/home/alice/.cargo",
        "/home/alice/.local/bin",
        "/home/alice/.rustup",
    ]);
    (rec, spec)
}

#[test]
fn a_root_box_shows_a_tool_through_a_redirect_in_the_hiding_layer() {
    let (mut rec, spec) = root_box();
    built(&mut rec, &spec);
    let e = |rel: &str| p(SCRATCH).join("e").join(rel);
    let at = e("home/alice/.cargo");
    assert!(rec.ops().contains(&Op::SetXattr {
        path: at.clone(),
        name: "trusted.overlay.redirect".into(),
        value: b"/home/alice/.cargo".to_vec(),
    }));
    // As the host's: owner and mode, for it and the directory above it.
    for (path, uid, mode) in [(at.clone(), 1000, 0o751), (e("home/alice"), 1000, 0o700)] {
        assert!(rec.ops().contains(&Op::Chown {
            path: path.clone(),
            uid,
            gid: uid,
        }));
        assert!(rec.ops().contains(&Op::Chmod { path, mode }));
    }
    // The credentials inside are whiteouts, the one the host does not have too.
    let whiteouts: Vec<&Op> = rec
        .ops()
        .iter()
        .filter(|op| matches!(op, Op::Whiteout(w) if w.starts_with(&at)))
        .collect();
    assert_eq!(
        whiteouts,
        [
            &Op::Whiteout(at.join("credentials")),
            &Op::Whiteout(at.join("credentials.toml")),
        ]
    );
    // A symlinked tool is the host's symlink; a tool the host does not have is nothing.
    assert!(rec.ops().contains(&Op::Symlink {
        target: p("/opt/local-bin"),
        link: e("home/alice/.local/bin"),
    }));
    assert_eq!(rec.kind(&e("home/alice/.rustup").to_string_lossy()), None);
    // The base's overlay follows the redirect (and makes none: it is read-only).
    assert_eq!(
        overlay_data(&rec, &p(SCRATCH).join("b")),
        format!("lowerdir={SCRATCH}/e:/,redirect_dir=follow")
    );
    // Everything in the hiding layer is made before the base's overlay takes it.
    let wrapper = first(&rec, "mounting the base", |op| {
        is_mount_of(op, "overlay", &p(SCRATCH).join("b"))
    });
    for (i, op) in rec.ops().iter().enumerate() {
        if op
            .target()
            .is_some_and(|t| t.starts_with(p(SCRATCH).join("e")))
        {
            assert!(i < wrapper, "{op:?} after the base's overlay");
        }
    }
}

#[test]
fn a_root_box_without_shown_paths_keeps_its_base_as_before() {
    let mut rec = host();
    let mut spec = spec();
    // Shown, but not below anything hidden: nothing to do.
    spec.show = paths(&["/opt/tools"]);
    built(&mut rec, &spec);
    assert_eq!(
        overlay_data(&rec, &p(SCRATCH).join("b")),
        format!("lowerdir={}/e:/", SCRATCH)
    );
}

/// A rootless box whose host user's home is `/srv/h` (hidden, bound from the host), with a
/// toolchain the box's older layer changed; and one in the box's own `/home`, which its top
/// layer made anew (opaque).
fn rootless_box() -> (Recording, BoxSpec) {
    let rec = rootless_host()
        .dir(&r("srv/h").to_string_lossy())
        .dir("/srv/h/.cargo/bin")
        .file("/srv/h/.cargo/credentials.toml", "token")
        .dir(&format!("{LOWER}/srv/h/.cargo/bin"))
        .dir("/home/alice/.rustup")
        .dir(&format!("{LOWER_TOP}/home/alice/.rustup"))
        .xattr(
            &format!("{LOWER_TOP}/home/alice/.rustup"),
            "user.overlay.opaque",
            "y",
        )
        .dir(&format!("{LOWER}/home/alice/.rustup"))
        .dir("/tmp/x/.cargo")
        // What the box's overlay shows once mounted.
        .dir(&r("home/alice/.rustup").to_string_lossy());
    let mut spec = rootless();
    spec.hide.extend(paths(&[
        "/srv/h",
        "/srv/h/.cargo/credentials.toml",
        "/home/alice",
        "/tmp/x",
    ]));
    spec.show = paths(&["/srv/h/.cargo", "/home/alice/.rustup", "/tmp/x/.cargo"]);
    (rec, spec)
}

#[test]
fn a_rootless_box_mounts_an_overlay_of_its_own_layers_over_the_hosts_directory() {
    let (mut rec, spec) = rootless_box();
    built(&mut rec, &spec);
    let cargo = r("srv/h/.cargo");
    assert_eq!(
        overlay_data(&rec, &cargo),
        format!(
            "lowerdir={LOWER}/srv/h/.cargo:{SCRATCH}/s/1:/srv/h/.cargo,\
             upperdir={UPPER}/srv/h/.cargo,workdir={WORK}/show-1,userxattr,index=off,xino=off"
        )
    );
    assert_eq!(
        rec.kind(&format!("{SCRATCH}/s/1/credentials.toml")),
        Some(crate::init::kernel::Kind::Other),
        "a whiteout hides the credentials"
    );
    // The hiding tmpfs is written to for the mount point, then made read-only.
    let home = r("srv/h");
    let ops = mounts_at(&rec, &home);
    assert!(
        matches!(ops[0], Op::Mount { fstype, flags, .. } if fstype == "tmpfs" && flags.is_empty()),
        "{ops:?}"
    );
    assert_eq!(
        ops[1],
        &Op::Remount {
            target: home.clone(),
            flags: MountFlags::BIND | MountFlags::RDONLY,
        }
    );
    let made = first(&rec, "making the mount point", |op| {
        *op == Op::MkdirP(cargo.clone())
    });
    let mounted = first(&rec, "mounting the tool", |op| {
        is_mount_of(op, "overlay", &cargo)
    });
    let ro = first(
        &rec,
        "making the tmpfs read-only",
        |op| matches!(op, Op::Remount { target, .. } if *target == home),
    );
    assert!(made < mounted && mounted < ro);
    // Its copy in the upper directory is made before the box's overlay is mounted.
    let upper = first(
        &rec,
        "making the upper copy",
        |op| matches!(op, Op::MkdirP(d) if d.starts_with(format!("{UPPER}/srv/h/.cargo"))),
    );
    let root = first(&rec, "mounting the root", |op| {
        is_mount_of(op, "overlay", Path::new(ROOT))
    });
    assert!(upper < root);
}

#[test]
fn a_rootless_box_shows_a_tool_in_its_own_home_down_to_the_layer_that_made_it_anew() {
    let (mut rec, spec) = rootless_box();
    built(&mut rec, &spec);
    // The opaque copy in the top layer hides the older layer's and the host's.
    assert_eq!(
        overlay_data(&rec, &r("home/alice/.rustup")),
        format!(
            "lowerdir={LOWER_TOP}/home/alice/.rustup,upperdir={UPPER}/home/alice/.rustup,\
             workdir={WORK}/show-0,userxattr,index=off,xino=off"
        )
    );
    // The box's own /home is not covered: nothing of the host's is there.
    assert!(mounts_at(&rec, &r("home/alice")).is_empty());
    // Below /tmp (the box's fresh one) nothing is shown.
    assert!(mounts_at(&rec, &r("tmp/x/.cargo")).is_empty());
    assert_eq!(rec.kind(&format!("{UPPER}/tmp")), None);
}

#[test]
fn a_rootless_box_leaves_out_a_tool_its_layer_deleted() {
    let (rec, spec) = rootless_box();
    let mut rec = rec.whiteout_at(&format!("{UPPER}/home/alice"));
    built(&mut rec, &spec);
    assert!(mounts_at(&rec, &r("home/alice/.rustup")).is_empty());
    // The other tool is still shown.
    assert_eq!(mounts_at(&rec, &r("srv/h/.cargo")).len(), 1);
}

#[test]
fn a_rootless_tool_that_cannot_be_mounted_does_not_stop_the_box() {
    let (rec, spec) = rootless_box();
    let cargo = r("srv/h/.cargo");
    let mut rec = rec.refusing(move |op| is_mount_of(op, "overlay", &cargo));
    assert_eq!(build(&mut rec, &spec), Ok(false));
    assert_eq!(rec.refused().len(), 1);
    // The tmpfs that hides the home is read-only all the same.
    assert!(rec.ops().contains(&Op::Remount {
        target: r("srv/h"),
        flags: MountFlags::BIND | MountFlags::RDONLY,
    }));
}

#[test]
fn a_root_box_does_not_redirect_to_another_file_system() {
    let (rec, spec) = root_box();
    // `/home/alice/.cargo` on a partition of its own: the base's overlay cannot reach it.
    let mut rec = rec.on_dev("/home/alice/.cargo", 7);
    built(&mut rec, &spec);
    assert!(!rec
        .ops()
        .iter()
        .any(|op| matches!(op, Op::SetXattr { name, .. } if name == "trusted.overlay.redirect")));
}
