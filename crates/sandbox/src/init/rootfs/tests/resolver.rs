//! Name service files: a private network's own resolver, the host's on its network.

use super::*;

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
