//! Round trips with full fidelity (snapshots, history layers, overlay form, special files,
//! binary xattrs, large owners), compression detection, and rootfs tars GNU tar reads.

use super::*;

#[test]
fn snapshot_round_trip_keeps_everything() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = fidelity_src(tmp.path());
    let bundle = tmp.path().join("b.tar.zst");
    snapshot_bundle(&src, &bundle, Compression::Zstd);

    let staging = tmp.path().join("staging");
    let imp = import(&bundle, &staging, &opts()).expect("import");
    assert_eq!(imp.kind, BundleKind::Snapshot);
    assert_eq!(imp.layers.len(), 1);
    let (id, dir) = &imp.layers[0];
    assert_eq!(id, "n0");
    assert_eq!(imp.manifest.as_ref().map(|m| m.head.as_str()), Some("n0"));
    // Without root, owners cannot be restored; everything else must be, but the
    // privileged xattrs, which travel in the archive and are never applied.
    let except: &[&str] = if is_root() {
        &["xattrs differ: -trusted."]
    } else {
        &[": uid ", ": gid "]
    };
    let diffs = differences(&src, dir, except);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    if is_root() {
        // On the socket, the symlink and the file (its hardlinks are one inode).
        assert_eq!(imp.dropped_privileged_xattrs, 3);
        assert_eq!(
            xattr::get(dir.join("a/f"), "trusted.agentbox").expect("get"),
            None
        );
    }
    let blocks = |p: &Path| fs::metadata(p).expect("stat").blocks();
    let (orig, back) = (blocks(&src.join("sparse")), blocks(&dir.join("sparse")));
    assert!(
        back <= orig + 16 && back * 512 < 32 << 20,
        "sparse allocation kept: {orig} blocks originally, {back} after import"
    );
}

/// An export streams a snapshot's layer: the tree walked, each entry planned and written as
/// it comes. That writes the same bytes as the layer planned whole.
#[test]
fn a_tree_streamed_writes_the_bundle_its_layer_source_writes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = fidelity_src(tmp.path());
    let tree = scan(&src);
    let source = layer_from_trees(None, &tree).expect("layer");
    let mut m = Manifest::new(BundleKind::Snapshot, "demo", "n0");
    m.nodes.push(node("n0", None, None));
    let via_source = tmp.path().join("a.tar");
    write_bundle(&via_source, Compression::None, &m, &[("n0", &source)]);

    let via_walk = tmp.path().join("c.tar");
    let mut w = bundle_writer(&via_walk, Compression::None, &m);
    let mut walked = Vec::new();
    agentbox_store::fsops::walk_chain(&[src.as_path()], "trusted.overlay.opaque", &mut |e| {
        walked.push(e);
        Ok(())
    })
    .expect("walk");
    w.write_tree_entries("n0", walked.into_iter().map(Ok))
        .expect("streamed layer");
    w.finish().expect("finish").flush().expect("flush");
    assert!(
        fs::read(&via_source).expect("read a") == fs::read(&via_walk).expect("read b"),
        "the streamed layer differs from the planned one"
    );

    // A walk that fails mid-way fails the layer with the walk's error.
    let mut w = bundle_writer(&tmp.path().join("d.tar"), Compression::None, &m);
    let mut entries: Vec<agentbox_store::Result<agentbox_store::fsops::Entry>> =
        tree.entries.values().take(3).cloned().map(Ok).collect();
    entries.push(Err(agentbox_store::Error::Bundle {
        path: src.join("gone"),
        message: "vanished".into(),
    }));
    let err = w
        .write_tree_entries("n0", entries)
        .expect_err("the walk's error stops the layer");
    assert!(
        err.to_string().contains("vanished"),
        "unexpected error: {err}"
    );
    assert!(
        w.finish().is_err(),
        "a bundle whose layer failed cannot be finished as complete"
    );
}

#[test]
fn history_layers_reapply_to_the_original_trees() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d0 = tmp.path().join("d0");
    let d1 = tmp.path().join("d1");
    let d2 = tmp.path().join("d2");
    fn build0(d: &Path) {
        fs::create_dir_all(d.join("keep/sub")).expect("mkdir");
        fs::create_dir_all(d.join("gone/inner")).expect("mkdir");
        fs::create_dir_all(d.join("opq")).expect("mkdir");
        for i in 0..50 {
            write(
                &d.join(format!("keep/file{i}")),
                format!("content {i}").as_bytes(),
            );
        }
        write(&d.join("keep/sub/x"), b"x");
        write(&d.join("gone/inner/y"), b"y");
        write(&d.join("opq/p"), b"p");
        write(&d.join("opq/q"), b"q");
        write(&d.join("deleted"), b"bye");
        write(&d.join("changed"), b"old");
    }
    fn build1(d: &Path) {
        build0(d);
        fs::remove_dir_all(d.join("gone")).expect("rm");
        fs::remove_file(d.join("deleted")).expect("rm");
        write(&d.join("changed"), b"new content");
        write(&d.join("keep/added"), b"added");
        chmod(&d.join("keep/file3"), 0o600);
    }
    fn build2(d: &Path) {
        build1(d);
        fs::remove_file(d.join("opq/p")).expect("rm");
        fs::remove_file(d.join("opq/q")).expect("rm");
        write(&d.join("opq/r"), b"r");
        fs::remove_file(d.join("keep/file7")).expect("rm");
    }
    type Build = fn(&Path);
    let builders: [(&Path, Build); 3] = [(&d0, build0), (&d1, build1), (&d2, build2)];
    for (d, build) in builders {
        fs::create_dir(d).expect("mkdir");
        build(d);
        for e in walkdir::WalkDir::new(d) {
            let e = e.expect("walk");
            if !e.file_type().is_dir() {
                set_mtime(e.path(), 1_700_000_000, 5);
            }
        }
        fix_dir_mtimes(d);
    }
    let (t0, t1, t2) = (scan(&d0), scan(&d1), scan(&d2));
    let l0 = layer_from_trees(None, &t0).expect("l0");
    let l1 = layer_from_trees(Some(&t0), &t1).expect("l1");
    let mut l2 = layer_from_trees(Some(&t1), &t2).expect("l2");
    // Express the emptied directory as opaque instead of per-file whiteouts.
    l2.whiteouts.retain(|w| !w.starts_with("opq"));
    l2.opaque_dirs.push(PathBuf::from("opq"));
    assert!(l1.entries.len() < 10, "diff is small: {:?}", l1.entries);
    assert!(l1.whiteouts.contains(&PathBuf::from("gone")));
    assert!(l1.whiteouts.contains(&PathBuf::from("deleted")));

    let mut m = Manifest::new(BundleKind::History, "demo", "n2");
    m.nodes.push(node("n0", None, None));
    m.nodes.push(node("n1", Some("n0"), Some("n0")));
    m.nodes.push(node("n2", Some("n1"), Some("n1")));
    m.tags.insert("v1".to_owned(), "n1".to_owned());
    let bundle = tmp.path().join("h.tar.gz");
    write_bundle(
        &bundle,
        Compression::Gzip,
        &m,
        &[("n0", &l0), ("n1", &l1), ("n2", &l2)],
    );

    let staging = tmp.path().join("staging");
    let imp = import(&bundle, &staging, &opts()).expect("import");
    assert_eq!(imp.kind, BundleKind::History);
    assert_eq!(imp.manifest.as_ref().expect("manifest"), &m);
    let ids: Vec<_> = imp.layers.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(ids, ["n0", "n1", "n2"]);
    assert!(imp.layers[1].1.join(".wh.deleted").is_file(), "marker kept");
    assert!(
        imp.layers[2].1.join("opq/.wh..wh..opq").is_file(),
        "opaque kept"
    );

    let target = tmp.path().join("target");
    fs::create_dir(&target).expect("mkdir");
    apply_layer(&imp.layers[0].1, &target).expect("apply n0");
    assert_same_tree(&d0, &target);
    apply_layer(&imp.layers[1].1, &target).expect("apply n1");
    // The socket's trusted.* xattr travels and is never applied.
    let diffs = differences(&d1, &target, &["sock: xattrs differ: -trusted.s"]);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    apply_layer(&imp.layers[2].1, &target).expect("apply n2");
    assert_same_tree(&d2, &target);
}

#[test]
fn compression_is_detected() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    fs::create_dir(&src).expect("mkdir");
    fidelity_tree(&src, false);
    let cases: [(Compression, &[u8]); 3] = [
        (Compression::None, b""),
        (Compression::Gzip, &[0x1f, 0x8b]),
        (Compression::Zstd, &[0x28, 0xb5, 0x2f, 0xfd]),
    ];
    for (c, magic) in cases {
        let b = tmp.path().join(format!("b-{c}"));
        snapshot_bundle(&src, &b, c);
        let bytes = fs::read(&b).expect("read");
        if magic.is_empty() {
            assert_eq!(&bytes[257..262], b"ustar");
        } else {
            assert!(bytes.starts_with(magic), "{c} magic");
        }
        let staging = tmp.path().join(format!("s-{c}"));
        let imp = import(&b, &staging, &opts()).expect("import");
        let dir = &imp.layers[0].1;
        assert_eq!(
            fs::read(dir.join("a/f")).expect("read"),
            b"hello world\n",
            "{c}"
        );
        assert_eq!(c.to_string().parse::<Compression>(), Ok(c));
    }
    for k in [
        BundleKind::History,
        BundleKind::Snapshot,
        BundleKind::Rootfs,
    ] {
        assert_eq!(k.to_string().parse::<BundleKind>(), Ok(k));
    }
}

/// A tree of one fifo or socket `x` (fixed metadata) and its layer.
fn special_tree(root: &Path, ft: FileType) -> LayerSource {
    fs::create_dir(root).expect("mkdir");
    mknod(&root.join("x"), ft, 0o640, 0);
    set_mtime(&root.join("x"), 1_600_000_000, 1);
    set_mtime(root, 1_600_000_000, 2);
    layer_from_trees(None, &scan(root)).expect("layer")
}

#[test]
fn sockets_travel_as_marked_fifos_in_layers() {
    let tmp = tempfile::tempdir().expect("tmp");
    let t = tmp.path();
    // The checksum tells a socket from a fifo with the same metadata.
    let fifo = layer_summary(&special_tree(&t.join("f"), FileType::Fifo)).expect("fifo");
    let sock = layer_summary(&special_tree(&t.join("s"), FileType::Socket)).expect("socket");
    assert_eq!(fifo.entries, sock.entries);
    assert_ne!(fifo.checksum, sock.checksum);

    // History: a socket added, a fifo replaced by a socket, applied onto the base.
    let (d0, d1) = (t.join("d0"), t.join("d1"));
    for d in [&d0, &d1] {
        fs::create_dir(d).expect("mkdir");
        write(&d.join("keep"), b"k");
        mknod(&d.join("p"), FileType::Fifo, 0o600, 0);
    }
    fs::remove_file(d1.join("p")).expect("rm");
    mknod(&d1.join("p"), FileType::Socket, 0o644, 0);
    mknod(&d1.join("sock"), FileType::Socket, 0o600, 0);
    if is_root() {
        std::os::unix::fs::lchown(d1.join("sock"), Some(12), Some(34)).expect("chown");
        xattr::set(d1.join("sock"), "trusted.s", b"v").expect("xattr");
    }
    fix_dir_mtimes(&d0);
    fix_dir_mtimes(&d1);
    let (t0, t1) = (scan(&d0), scan(&d1));
    let l0 = layer_from_trees(None, &t0).expect("l0");
    let l1 = layer_from_trees(Some(&t0), &t1).expect("l1");
    let mut m = Manifest::new(BundleKind::History, "demo", "n1");
    m.nodes.push(node("n0", None, None));
    m.nodes.push(node("n1", Some("n0"), Some("n0")));
    let bundle = t.join("h.tar");
    write_bundle(&bundle, Compression::None, &m, &[("n0", &l0), ("n1", &l1)]);
    let bytes = fs::read(&bundle).expect("read");
    find(&bytes, b"AGENTBOX.type=socket\n");

    let imp = import(&bundle, &t.join("staging"), &opts()).expect("import");
    assert_eq!(meta(&imp.layers[1].1.join("sock")).kind, Kind::Socket);
    let target = t.join("target");
    fs::create_dir(&target).expect("mkdir");
    apply_layer(&imp.layers[0].1, &target).expect("apply n0");
    assert_same_tree(&d0, &target);
    apply_layer(&imp.layers[1].1, &target).expect("apply n1");
    // The socket's trusted.* xattr travels and is never applied.
    let diffs = differences(&d1, &target, &["sock: xattrs differ: -trusted.s"]);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));

    // Turning the socket into a plain fifo breaks the node checksum.
    let mut tampered = bytes.clone();
    let at = find(&tampered, b"AGENTBOX.type=socket");
    tampered[at + 12] = b'x';
    expect_rejected(t, "socket-to-fifo", &tampered, "node n1: the layer holds");
}

#[test]
fn xattr_values_with_newlines_and_binary_bytes_round_trip() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("d")).expect("mkdir");
    write(&src.join("f"), b"content");
    // user.*: an import never applies trusted.* or security.* ones.
    let ns = if user_xattrs_supported(&src) {
        "user"
    } else {
        eprintln!("skipped: user xattrs cannot be set here");
        return;
    };
    let values: [(&str, &[u8]); 4] = [
        ("f", b"line one\nline two\n"),
        ("f", b"\0\xff\n=\x01"),
        ("d", b"\n"),
        ("d", b"no newline \xfe"),
    ];
    for (i, (path, value)) in values.iter().enumerate() {
        xattr::set(src.join(path), format!("{ns}.k{i}"), value).expect("setxattr");
    }
    fix_dir_mtimes(&src);
    let bundle = tmp.path().join("x.tar");
    snapshot_bundle(&src, &bundle, Compression::None);
    let bytes = fs::read(&bundle).expect("read");
    find(
        &bytes,
        format!("AGENTBOX.xattr.hex.{ns}.k0=6c696e65206f6e650a").as_bytes(),
    );
    let mut plain = format!("SCHILY.xattr.{ns}.k3=no newline ").into_bytes();
    plain.extend_from_slice(b"\xfe\n");
    find(&bytes, &plain);
    let imp = import(&bundle, &tmp.path().join("staging"), &opts()).expect("import");
    let except: &[&str] = if is_root() {
        &[]
    } else {
        &[": uid ", ": gid "]
    };
    let diffs = differences(&src, &imp.layers[0].1, except);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn large_owners_round_trip() {
    if !tier::require_root("large_owners_round_trip") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("d")).expect("mkdir");
    write(&src.join("d/f"), b"x");
    std::os::unix::fs::symlink("f", src.join("d/l")).expect("symlink");
    mknod(&src.join("s"), FileType::Socket, 0o600, 0);
    // Beyond 7 octal digits: carried by PAX uid/gid records.
    for (i, p) in ["d", "d/f", "d/l", "s"].iter().enumerate() {
        let id = 3_000_000 + i as u32;
        std::os::unix::fs::lchown(src.join(p), Some(id), Some(id + 100)).expect("chown");
    }
    chmod(&src.join("d/f"), 0o4755);
    fix_dir_mtimes(&src);
    let bundle = tmp.path().join("o.tar");
    snapshot_bundle(&src, &bundle, Compression::None);
    find(&fs::read(&bundle).expect("read"), b"uid=3000001\n");
    let imp = import(&bundle, &tmp.path().join("staging"), &opts()).expect("import");
    assert_same_tree(&src, &imp.layers[0].1);
}

#[test]
fn rootfs_is_readable_by_gnu_tar() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = fidelity_src(tmp.path());
    let out = tmp.path().join("rootfs.tar");
    let mut w = BundleWriter::new(
        fs::File::create(&out).expect("create"),
        BundleKind::Rootfs,
        Compression::None,
    )
    .expect("writer");
    w.write_rootfs(&scan(&src)).expect("rootfs");
    w.finish().expect("finish");

    let list = std::process::Command::new("tar")
        .arg("-tvf")
        .arg(&out)
        .output()
        .expect("run tar");
    assert!(
        list.status.success(),
        "tar -tvf: {}",
        String::from_utf8_lossy(&list.stderr)
    );
    let listing = String::from_utf8_lossy(&list.stdout);
    assert!(listing.contains("./a/f"), "{listing}");
    assert!(
        listing.contains("./a/f link to ./a/b/f-hard"),
        "hardlink listed: {listing}"
    );

    // Our own importer reads it back too.
    let staging = tmp.path().join("staging");
    let imp = import(&out, &staging, &opts()).expect("import rootfs");
    assert_eq!(imp.kind, BundleKind::Rootfs);
    assert!(imp.manifest.is_none());
    // A rootfs stores sparse files in full and no socket; everything else comes back.
    let rootfs_loses = vec![format!("sock: only in {}", src.display())];
    let except: &[&str] = if is_root() {
        &["lost holes", "xattrs differ: -trusted."]
    } else {
        &["lost holes", ": uid ", ": gid "]
    };
    assert_eq!(differences(&src, &imp.layers[0].1, except), rootfs_loses);
    assert!(
        !listing.contains("sock"),
        "no socket in a rootfs: {listing}"
    );

    if !tier::require_root("rootfs_is_readable_by_gnu_tar (extract)") {
        return;
    }
    let x = tmp.path().join("x");
    fs::create_dir(&x).expect("mkdir");
    let st = std::process::Command::new("tar")
        .args(["--xattrs", "--xattrs-include=*", "--numeric-owner", "-xpf"])
        .arg(&out)
        .arg("-C")
        .arg(&x)
        .status()
        .expect("run tar");
    assert!(st.success());
    assert_eq!(differences(&src, &x, &["lost holes"]), rootfs_loses);
}

#[test]
fn overlay_form_round_trip() {
    if !tier::require_root("overlay_form_round_trip") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("layer");
    fs::create_dir_all(root.join("d/sub")).expect("mkdir");
    write(&root.join("d/sub/file"), b"x");
    write(&root.join("d/.wh.removed"), b"");
    write(&root.join("d/sub/.wh..wh..opq"), b"");
    fix_dir_mtimes(&root);
    let before = meta(&root.join("d"));
    to_overlay_layer(&root).expect("to overlay");
    let wh = meta(&root.join("d/removed"));
    assert_eq!((wh.kind, wh.rdev), (Kind::CharDev, 0));
    assert_eq!(
        xattr::get(root.join("d/sub"), "trusted.overlay.opaque").expect("get"),
        Some(b"y".to_vec())
    );
    assert_eq!(
        meta(&root.join("d")).mtime_sec,
        before.mtime_sec,
        "mtime kept"
    );
    let ls = layer_source_from_overlay(&root).expect("back");
    assert_eq!(ls.whiteouts, vec![PathBuf::from("d/removed")]);
    assert_eq!(ls.opaque_dirs, vec![PathBuf::from("d/sub")]);
    assert!(ls.entries.iter().all(|e| !e
        .meta
        .xattrs
        .keys()
        .any(|k| k.starts_with("trusted.overlay."))));
    assert_eq!(ls.entries[0].rel, PathBuf::new());
    layer_summary(&ls).expect("a valid layer");
}
