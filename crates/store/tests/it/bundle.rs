//! Bundle format: round trips with full fidelity, history layers, compression detection,
//! refusal of malicious or damaged archives, and compatibility of rootfs tars with GNU tar.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use agentbox_store::bundle::{
    apply_layer, import, import_into, layer_from_trees, layer_source_from_overlay, layer_summary,
    to_overlay_layer, BundleKind, BundleWriter, Compression, ImportOpts, LayerSource, Manifest,
    ManifestNode,
};
use agentbox_store::fsops::diff::compare_exact;
use agentbox_store::fsops::scan::{read_meta, scan_tree};
use agentbox_store::fsops::{Kind, Meta, Tree};
use agentbox_testkit::tier;
use rustix::fs::{makedev, FileType};

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

// ---------------------------------------------------------------- comparing trees

fn scan(root: &Path) -> Tree {
    scan_tree(root).expect("scan")
}

fn meta(path: &Path) -> Meta {
    read_meta(path).expect("lstat")
}

/// The differences between the trees at `a` and `b` (see `compare_exact`), without those
/// that contain one of `except`.
fn differences(a: &Path, b: &Path, except: &[&str]) -> Vec<String> {
    let mut diffs = compare_exact(a, b).expect("compare");
    diffs.retain(|d| !except.iter().any(|x| d.contains(x)));
    diffs
}

fn assert_same_tree(a: &Path, b: &Path) {
    let diffs = differences(a, b, &[]);
    assert!(diffs.is_empty(), "{a:?} vs {b:?}:\n{}", diffs.join("\n"));
}

// ---------------------------------------------------------------- building trees

fn set_mtime(p: &Path, sec: i64, nsec: i64) {
    let t = rustix::fs::Timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        p,
        &rustix::fs::Timestamps {
            last_access: t,
            last_modification: t,
        },
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .expect("utimensat");
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Create a fifo, socket or device node with exactly `mode`.
fn mknod(p: &Path, ft: FileType, mode: u32, dev: u64) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p,
        ft,
        rustix::fs::Mode::from_raw_mode(0o600),
        dev,
    )
    .expect("mknod");
    chmod(p, mode);
}

fn write(p: &Path, data: &[u8]) {
    fs::write(p, data).expect("write");
}

fn user_xattrs_supported(dir: &Path) -> bool {
    let p = dir.join(".xattr-probe");
    write(&p, b"");
    let ok = xattr::set(&p, "user.probe", b"1").is_ok();
    fs::remove_file(&p).expect("rm probe");
    ok
}

/// Set the mtimes of every directory (deepest first) to distinct fixed values.
fn fix_dir_mtimes(root: &Path) {
    let mut dirs: Vec<PathBuf> = walkdir::WalkDir::new(root)
        .into_iter()
        .map(|e| e.expect("walk"))
        .filter(|e| e.file_type().is_dir())
        .map(|e| e.path().to_owned())
        .collect();
    dirs.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for (i, d) in dirs.iter().enumerate() {
        set_mtime(d, 1_600_000_000 + i as i64 * 17, 123_456_789 + i as i64);
    }
}

/// `dir/src`, made a [`fidelity_tree`] with a sparse file.
fn fidelity_src(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    fs::create_dir(&src).expect("mkdir");
    fidelity_tree(&src, true);
    src
}

/// A tree with every supported file type and the tricky metadata.
fn fidelity_tree(root: &Path, with_sparse: bool) {
    fs::create_dir_all(root.join("a/b/c")).expect("mkdir");
    fs::create_dir(root.join("sticky")).expect("mkdir");
    fs::create_dir(root.join("sgid")).expect("mkdir");
    fs::create_dir(root.join("empty")).expect("mkdir");
    write(&root.join("a/f"), b"hello world\n");
    write(&root.join("a/b/c/deep"), &vec![7u8; 3 * 1024 * 1024 + 17]);
    // Past the size a writer reads in one pass: hashed first, then copied.
    let big: Vec<u8> = (0..17 * 1024 * 1024 + 5).map(|i| (i % 251) as u8).collect();
    write(&root.join("a/b/big"), &big);
    write(&root.join("suid"), b"#!/bin/sh\n");
    write(&root.join("emptyfile"), b"");
    let long = "x".repeat(150);
    write(&root.join("a").join(&long), b"long name");
    chmod(&root.join("suid"), 0o4755);
    chmod(&root.join("sticky"), 0o1777);
    chmod(&root.join("sgid"), 0o2750);
    chmod(&root.join("a/f"), 0o640);
    fs::hard_link(root.join("a/f"), root.join("a/b/f-hard")).expect("hardlink");
    fs::hard_link(root.join("a/f"), root.join("f-hard2")).expect("hardlink");
    std::os::unix::fs::symlink("f", root.join("a/link")).expect("symlink");
    std::os::unix::fs::symlink("nowhere/at/all", root.join("dangling")).expect("symlink");
    std::os::unix::fs::symlink("/etc/passwd", root.join("abs")).expect("symlink");
    std::os::unix::fs::symlink(format!("../{long}"), root.join("a/b/longlink")).expect("symlink");
    std::os::unix::fs::symlink("../../shared", root.join("a/up")).expect("symlink");
    mknod(&root.join("fifo"), FileType::Fifo, 0o620, 0);
    mknod(&root.join("sock"), FileType::Socket, 0o640, 0);
    if is_root() {
        mknod(
            &root.join("null"),
            FileType::CharacterDevice,
            0o666,
            makedev(1, 3),
        );
        mknod(
            &root.join("blk"),
            FileType::BlockDevice,
            0o660,
            makedev(7, 200),
        );
        std::os::unix::fs::lchown(root.join("a/f"), Some(1234), Some(5678)).expect("chown");
        std::os::unix::fs::lchown(root.join("sgid"), Some(42), Some(43)).expect("chown");
        std::os::unix::fs::lchown(root.join("a/link"), Some(7), Some(8)).expect("lchown");
        std::os::unix::fs::lchown(root.join("suid"), Some(1000), Some(1000)).expect("chown");
        std::os::unix::fs::lchown(root.join("sock"), Some(33), Some(44)).expect("chown");
        xattr::set(root.join("sock"), "trusted.sock", b"s").expect("trusted on socket");
        chmod(&root.join("suid"), 0o4755);
        xattr::set(root.join("a/f"), "trusted.agentbox", b"t\0binary\xff").expect("trusted");
        xattr::set(root.join("a/link"), "trusted.onlink", b"l").expect("trusted on symlink");
    }
    if user_xattrs_supported(root) {
        xattr::set(root.join("a/f"), "user.comment", b"hi=there").expect("xattr");
        xattr::set(root.join("a/b"), "user.dir", b"d").expect("xattr");
    }
    if with_sparse {
        let f = fs::File::create(root.join("sparse")).expect("create sparse");
        f.write_all_at(&[1u8; 8192], 0).expect("write");
        f.write_all_at(&[2u8; 4096], 8 << 20).expect("write");
        f.set_len(32 << 20).expect("set_len");
    }
    for (i, e) in walkdir::WalkDir::new(root).into_iter().enumerate() {
        let e = e.expect("walk");
        if !e.file_type().is_dir() {
            set_mtime(e.path(), 1_500_000_000 + i as i64, 987_654_321 - i as i64);
        }
    }
    fix_dir_mtimes(root);
}

/// Write a bundle of `manifest` (its kind) at `path`: the manifest, then each layer named by
/// its node id, in the order given.
pub(crate) fn write_bundle(
    path: &Path,
    compression: Compression,
    manifest: &Manifest,
    layers: &[(&str, &LayerSource)],
) {
    let mut w = bundle_writer(path, compression, manifest);
    for (id, layer) in layers {
        w.write_layer(id, layer).expect("layer");
    }
    w.finish().expect("finish").flush().expect("flush");
}

/// A writer of a bundle at `path` whose manifest is written.
fn bundle_writer(
    path: &Path,
    compression: Compression,
    manifest: &Manifest,
) -> BundleWriter<std::io::BufWriter<fs::File>> {
    let f = std::io::BufWriter::new(fs::File::create(path).expect("create bundle"));
    let mut w = BundleWriter::new(f, manifest.kind, compression).expect("writer");
    w.write_manifest(manifest).expect("manifest");
    w
}

/// The manifest record of node `id`.
pub(crate) fn node(id: &str, parent: Option<&str>, base: Option<&str>) -> ManifestNode {
    ManifestNode {
        id: id.to_owned(),
        parent: parent.map(str::to_owned),
        seq: 1,
        message: format!("node {id}"),
        command: Some("make".to_owned()),
        created: chrono::Utc::now(),
        metadata: BTreeMap::new(),
        base: base.map(str::to_owned),
        entries: None,
        checksum: None,
    }
}

fn snapshot_bundle(tree_root: &Path, out: &Path, compression: Compression) {
    let layer = layer_from_trees(None, &scan(tree_root)).expect("layer");
    let mut m = Manifest::new(BundleKind::Snapshot, "demo", "n0");
    m.nodes.push(node("n0", None, None));
    write_bundle(out, compression, &m, &[("n0", &layer)]);
}

fn opts() -> ImportOpts {
    ImportOpts {
        allow_devices: true,
        allow_setuid: true,
        same_owner: is_root(),
        ..ImportOpts::default()
    }
}

// ---------------------------------------------------------------- tests

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

// ------------------------------------------------ malicious / damaged archives

/// A raw tar header (ustar), bypassing the tar crate's path checks.
fn raw_header(path: &[u8], typ: u8, size: u64, link: &[u8], dev: Option<(u32, u32)>) -> Vec<u8> {
    let mut h = tar::Header::new_ustar();
    {
        let old = h.as_old_mut();
        old.name[..path.len()].copy_from_slice(path);
        old.linkname[..link.len()].copy_from_slice(link);
    }
    h.set_mode(0o755);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(size);
    h.set_entry_type(tar::EntryType::new(typ));
    if let Some((ma, mi)) = dev {
        h.set_device_major(ma).expect("major");
        h.set_device_minor(mi).expect("minor");
    }
    h.set_cksum();
    h.as_bytes().to_vec()
}

type RawEntry<'a> = (&'a [u8], u8, &'a [u8], &'a [u8]);

fn raw_tar(entries: &[RawEntry<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for (path, typ, data, link) in entries {
        let dev = (*typ == b'3').then_some((1, 3));
        out.extend(raw_header(path, *typ, data.len() as u64, link, dev));
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.extend([0u8; 1024]);
    out
}

fn expect_rejected(tmp: &Path, name: &str, bytes: &[u8], needle: &str) {
    let b = tmp.join(format!("{name}.bundle"));
    fs::write(&b, bytes).expect("write");
    let staging = tmp.join(format!("staging-{name}"));
    let err = match import(&b, &staging, &ImportOpts::default()) {
        Ok(_) => panic!("{name} must be refused"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(needle),
        "{name}: error {err:?} should mention {needle:?}"
    );
    assert!(!staging.exists(), "{name}: staging left behind");
}

fn plain_bundle(tmp: &Path) -> Vec<u8> {
    let src = tmp.join("plain-src");
    fs::create_dir(&src).expect("mkdir");
    fs::create_dir(src.join("d")).expect("mkdir");
    write(&src.join("d/hello"), b"hello world, this is the content");
    let b = tmp.join("plain.tar");
    snapshot_bundle(&src, &b, Compression::None);
    fs::read(&b).expect("read")
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("needle present")
}

fn write_tmp(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, bytes).expect("write");
    p
}

/// A member `name` holding `data`, with the `AGENTBOX.blake3` PAX record every regular file
/// of a history or snapshot bundle carries.
fn raw_member_with_hash(name: &[u8], data: &[u8]) -> Vec<u8> {
    let hex = blake3::hash(data).to_hex();
    let body = format!(" AGENTBOX.blake3={hex}\n");
    let record = format!("{}{body}", body.len() + (body.len() + 2).to_string().len());
    let mut out = raw_header(b"././@PaxHeader", b'x', record.len() as u64, b"", None);
    out.extend_from_slice(record.as_bytes());
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend(raw_tar(&[(name, b'0', data, b"")]));
    out.truncate(out.len() - 1024);
    out
}

/// A bundle of version 1 (the counts and checksums in the manifest), made from one this
/// version wrote: its layer members verbatim between a version 1 manifest and end record.
fn as_version_1(v2: &[u8]) -> Vec<u8> {
    let mut archive = tar::Archive::new(v2);
    let mut raw = Vec::new();
    let mut manifest: Option<serde_json::Value> = None;
    let mut end: Option<serde_json::Value> = None;
    for e in archive.entries().expect("entries").raw(true) {
        let mut e = e.expect("entry");
        let path = e.path_bytes().into_owned();
        raw.push(e.raw_header_position() as usize);
        if path == b"manifest.json" || path == b"end.json" {
            let mut json = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut json).expect("read");
            let v = serde_json::from_slice(&json).expect("json");
            if path == b"manifest.json" {
                manifest = Some(v);
            } else {
                end = Some(v);
            }
        }
    }
    let mut manifest = manifest.expect("manifest.json");
    let end = end.expect("end.json");
    manifest["version"] = 1.into();
    for (n, l) in manifest["nodes"]
        .as_array_mut()
        .expect("nodes")
        .iter_mut()
        .zip(end["layers"].as_array().expect("layers"))
    {
        n["entries"] = l["entries"].clone();
        n["checksum"] = l["checksum"].clone();
    }
    let end_v1 = serde_json::json!({"nodes": end["nodes"], "entries": end["entries"]});
    // Raw entries: the PAX header and manifest.json, the layers, the PAX header and end.json.
    let (start, stop) = (raw[2], raw[raw.len() - 2]);
    let mut out = raw_member_with_hash(b"manifest.json", manifest.to_string().as_bytes());
    out.extend_from_slice(&v2[start..stop]);
    out.extend(raw_member_with_hash(
        b"end.json",
        end_v1.to_string().as_bytes(),
    ));
    out.extend([0u8; 1024]);
    out
}

/// Bundles written before version 2 still import, and are checked as strictly.
#[test]
fn a_version_1_bundle_still_imports_and_is_checked() {
    let tmp = tempfile::tempdir().expect("tmp");
    let t = tmp.path();
    let v1 = as_version_1(&plain_bundle(t));
    let staging = t.join("v1-staging");
    import(&write_tmp(t, "v1", &v1), &staging, &ImportOpts::default())
        .expect("a version 1 bundle imports");
    assert_eq!(
        fs::read(staging.join("n0/d/hello")).expect("imported file"),
        b"hello world, this is the content"
    );
    // Its layer checksum, in the manifest, still covers the metadata.
    let mtime_at = v1
        .windows(6)
        .rposition(|w| w == b"mtime=")
        .expect("a PAX mtime")
        + 7;
    let mut bad = v1.clone();
    bad[mtime_at] = if bad[mtime_at] == b'1' { b'2' } else { b'1' };
    expect_rejected(t, "v1-mtime", &bad, "the manifest records");
}

#[test]
fn malicious_and_damaged_archives_are_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let t = tmp.path();
    let d = b'5';
    let root: RawEntry<'_> = (b"./", d, b"", b"");
    let bad_version = br#"{"format":"agentbox-bundle","version":3,"kind":"snapshot","created":"2026-01-01T00:00:00Z","env":"e","head":"n0","nodes":[]}"#;
    let good_manifest = br#"{"format":"agentbox-bundle","version":2,"kind":"snapshot","created":"2026-01-01T00:00:00Z","env":"e","head":"n0","nodes":[{"id":"n0","parent":null,"seq":1,"message":"m","created":"2026-01-01T00:00:00Z","base":null}]}"#;
    let cases: Vec<(&str, Vec<RawEntry<'_>>, &str)> = vec![
        (
            "dotdot",
            vec![root, (b"../x", b'0', b"evil", b"")],
            "entry ../x: path with a `..` component",
        ),
        (
            "absolute",
            vec![root, (b"/etc/x", b'0', b"evil", b"")],
            "entry /etc/x: absolute path",
        ),
        (
            "through-symlink",
            vec![root, (b"a", b'2', b"", b"/"), (b"a/x", b'0', b"evil", b"")],
            "entry a/x: its parent a is a Symlink",
        ),
        (
            // A symlink may point anywhere, but nothing is written through it.
            "through-escaping-symlink",
            vec![
                root,
                (b"a/", d, b"", b""),
                (b"a/l", b'2', b"", b"../../x"),
                (b"a/l/y", b'0', b"evil", b""),
            ],
            "entry a/l/y: its parent a/l is a Symlink",
        ),
        (
            "hardlink-escape",
            vec![root, (b"h", b'1', b"", b"../../etc/passwd")],
            "entry h: hardlink target ../../etc/passwd",
        ),
        (
            "hardlink-missing",
            vec![root, (b"h", b'1', b"", b"later")],
            "not an earlier non-directory entry",
        ),
        (
            "hardlink-through-symlink",
            vec![
                root,
                (b"l", b'2', b"", b"/etc"),
                (b"h", b'1', b"", b"l/passwd"),
            ],
            "entry h: hardlink target l/passwd is not an earlier non-directory entry",
        ),
        (
            "unknown-type",
            vec![
                root,
                (b"././@PaxHeader", b'x', b"22 AGENTBOX.type=door\n", b""),
                (b"p", b'6', b"", b""),
            ],
            "entry p: unknown AGENTBOX.type \"door\"",
        ),
        (
            "type-on-a-file",
            vec![
                root,
                (b"././@PaxHeader", b'x', b"24 AGENTBOX.type=socket\n", b""),
                (b"f", b'0', b"", b""),
            ],
            "entry f: AGENTBOX.type on a non-fifo entry",
        ),
        (
            "device",
            vec![root, (b"null", b'3', b"", b"")],
            "entry null: device nodes are refused",
        ),
        (
            "manifest-missing",
            vec![(b"nodes/n0/", d, b"", b""), (b"end.json", b'0', b"{}", b"")],
            "manifest.json must be the first entry",
        ),
        (
            // The manifest of a good bundle, without the checksum the format requires.
            "manifest-without-checksum",
            vec![(b"manifest.json", b'0', good_manifest, b"")],
            "entry manifest.json: no AGENTBOX.blake3 record",
        ),
    ];
    for (name, entries, needle) in &cases {
        expect_rejected(t, name, &raw_tar(entries), needle);
    }
    let mut version = raw_member_with_hash(b"manifest.json", bad_version);
    version.extend([0u8; 1024]);
    expect_rejected(
        t,
        "version",
        &version,
        "unsupported bundle version 3 (this agentbox supports versions 1 to 2)",
    );
    let good = plain_bundle(t);
    let staging = t.join("ok");
    import(
        &write_tmp(t, "good", &good),
        &staging,
        &ImportOpts::default(),
    )
    .expect("intact");

    let mut half = good.clone();
    half.truncate(good.len() / 2);
    expect_rejected(t, "truncated-half", &half, "truncated");
    // Cut exactly before end.json's PAX header: a clean entry boundary.
    let end_at = find(&good, b"end.json\0") - 1024;
    let mut cut = good[..end_at].to_vec();
    cut.extend([0u8; 1024]);
    expect_rejected(t, "truncated-boundary", &cut, "end.json is missing");
    expect_rejected(t, "truncated-no-eoa", &good[..end_at], "truncated");

    let mut corrupt = good.clone();
    let at = find(&corrupt, b"hello world, this");
    corrupt[at] = b'J';
    expect_rejected(
        t,
        "checksum",
        &corrupt,
        "entry nodes/n0/d/hello: checksum mismatch",
    );

    let mut garbage = good.clone();
    garbage.extend_from_slice(b"garbage after the archive");
    expect_rejected(t, "garbage", &garbage, "trailing garbage");

    // An extra node directory the manifest does not list, spliced before end.json.
    let mut extra = good[..end_at].to_vec();
    extra.extend(raw_header(b"nodes/zz/", d, 0, b"", None));
    extra.extend_from_slice(&good[end_at..]);
    expect_rejected(
        t,
        "unlisted-node",
        &extra,
        "node zz, which the manifest does not list",
    );

    // Compressed and truncated.
    let src = t.join("plain-src");
    let zb = t.join("z.tar.zst");
    snapshot_bundle(&src, &zb, Compression::Zstd);
    let z = fs::read(&zb).expect("read");
    expect_rejected(t, "zstd-truncated", &z[..z.len() / 2], "");
    let gz = t.join("g.tar.gz");
    snapshot_bundle(&src, &gz, Compression::Gzip);
    let g = fs::read(&gz).expect("read");
    expect_rejected(t, "gzip-truncated", &g[..g.len() - 12], "");
}

/// A node the importer holds already is read and checked like any other, and nothing of it
/// reaches the disk.
#[test]
fn a_held_node_is_checked_but_not_written() {
    let tmp = tempfile::tempdir().expect("tmp");
    let t = tmp.path();
    let good = plain_bundle(t);
    let held = |id: &str| id == "n0";

    let staging = t.join("held");
    let imported = import_into(
        &write_tmp(t, "good", &good),
        &staging,
        &ImportOpts::default(),
        &held,
    )
    .expect("an intact bundle imports");
    assert_eq!(imported.held, vec!["n0".to_owned()]);
    assert!(imported.layers.is_empty(), "{:?}", imported.layers);
    let written: Vec<_> = fs::read_dir(&staging)
        .expect("staging")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(
        written.is_empty(),
        "nothing of a held node is written: {written:?}"
    );

    // The same damage is refused as for a node that is written: in a file's content, and
    // in its metadata (a digit of its PAX mtime, which only the layer checksum covers).
    let content_at = find(&good, b"hello world, this");
    let mtime_at = good[..content_at]
        .windows(6)
        .rposition(|w| w == b"mtime=")
        .expect("d/hello has a PAX mtime")
        + 7;
    for (name, at, needle) in [
        (
            "held-content",
            content_at,
            "entry nodes/n0/d/hello: checksum mismatch",
        ),
        ("held-mtime", mtime_at, "node n0: the layer holds"),
    ] {
        let mut bad = good.clone();
        bad[at] = if bad[at] == b'1' { b'2' } else { b'1' };
        let b = write_tmp(t, name, &bad);
        let staging = t.join(format!("staging-{name}"));
        let err = import_into(&b, &staging, &ImportOpts::default(), &held)
            .expect_err("damage in a held node is refused")
            .to_string();
        assert!(
            err.contains(needle),
            "{name}: {err:?} should mention {needle:?}"
        );
        assert!(!staging.exists(), "{name}: staging left behind");
    }
}

#[test]
fn symlinks_import_with_any_target_but_nothing_goes_through_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    let t = tmp.path();
    let b = write_tmp(
        t,
        "links.tar",
        &raw_tar(&[
            (b"./", b'5', b"", b""),
            (b"a/", b'5', b"", b""),
            (b"a/up", b'2', b"", b"../../outside"),
            (b"a/abs", b'2', b"", b"/etc"),
            (b"a/dangling", b'2', b"", b"no/such/file"),
            (b"h", b'1', b"", b"a/up"),
        ]),
    );
    let staging = t.join("staging");
    let imp = import(&b, &staging, &ImportOpts::default()).expect("symlinks are data");
    let dir = &imp.layers[0].1;
    for (link, target) in [
        ("a/up", "../../outside"),
        ("a/abs", "/etc"),
        ("a/dangling", "no/such/file"),
        // A hardlink to a symlink links the symlink itself.
        ("h", "../../outside"),
    ] {
        assert_eq!(
            fs::read_link(dir.join(link)).expect("readlink"),
            PathBuf::from(target),
            "{link}"
        );
    }
    let (up, h) = (meta(&dir.join("a/up")), meta(&dir.join("h")));
    assert_eq!((up.dev, up.ino, up.nlink), (h.dev, h.ino, 2));
    let written: Vec<PathBuf> = walkdir::WalkDir::new(t)
        .into_iter()
        .map(|e| e.expect("walk").into_path())
        .filter(|p| !p.starts_with(&staging))
        .collect();
    assert_eq!(written.len(), 2, "nothing outside staging: {written:?}");
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
fn staging_must_be_new_or_empty() {
    let tmp = tempfile::tempdir().expect("tmp");
    let good = plain_bundle(tmp.path());
    let b = write_tmp(tmp.path(), "b.tar", &good);
    let staging = tmp.path().join("busy");
    fs::create_dir(&staging).expect("mkdir");
    write(&staging.join("precious"), b"keep me");
    assert!(import(&b, &staging, &ImportOpts::default()).is_err());
    assert!(
        staging.join("precious").exists(),
        "never removes what it did not create"
    );
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

#[test]
fn a_decompression_bomb_stops_at_the_limit() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_ustar();
    h.set_path("./zeros").expect("path");
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(32 << 20);
    h.set_cksum();
    b.append(&h, std::io::Read::take(std::io::repeat(0), 32 << 20))
        .expect("append");
    let tar = b.into_inner().expect("tar");
    let bomb = zstd::encode_all(tar.as_slice(), 3).expect("zstd");
    assert!(bomb.len() < 32 << 10);
    let src = write_tmp(tmp.path(), "bomb.tar.zst", &bomb);
    let staging = tmp.path().join("staging");
    let opts = ImportOpts {
        max_size: Some(1 << 20),
        ..ImportOpts::default()
    };
    match import(&src, &staging, &opts) {
        Err(agentbox_store::Error::TooLarge { message, .. }) => {
            assert!(message.contains("expands past 1048576 bytes"), "{message}")
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(!staging.exists(), "staging left behind");
    // The default limit (64 × a few KiB, at least 16 GiB) lets the same stream through.
    let imp = import(&src, &staging, &ImportOpts::default()).expect("under the default");
    assert_eq!(
        fs::metadata(imp.layers[0].1.join("zeros"))
            .expect("zeros")
            .len(),
        32 << 20
    );
}

#[test]
fn a_manifest_with_an_invalid_tag_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    fs::create_dir(&src).expect("mkdir");
    write(&src.join("f"), b"f");
    let layer = layer_from_trees(None, &scan(&src)).expect("layer");
    let mut m = Manifest::new(BundleKind::Snapshot, "demo", "n0");
    m.nodes.push(node("n0", None, None));
    m.tags.insert("a/b".to_owned(), "n0".to_owned());
    let err = m.validate().expect_err("the writer refuses it too");
    assert!(err.contains("invalid tag name \"a/b\""), "{err}");
    m.tags.clear();
    m.tags.insert("v1".to_owned(), "n0".to_owned());
    let good = tmp.path().join("good.tar");
    write_bundle(&good, Compression::None, &m, &[("n0", &layer)]);
    let bytes = fs::read(&good).expect("read");
    // Same length, so the tar framing stays valid: only the tag name changes.
    let at = find(&bytes, b"\"v1\"");
    let mut evil = bytes.clone();
    evil[at + 1..at + 3].copy_from_slice(b"..");
    // As it is, the manifest no longer matches its checksum.
    expect_rejected(
        tmp.path(),
        "evil-tag-unsigned",
        &evil,
        "entry manifest.json: checksum mismatch",
    );
    // With the checksum made to match, the tag itself is refused.
    let header = find(&evil, b"manifest.json\0");
    let size = tar::Header::from_byte_slice(&evil[header..header + 512])
        .entry_size()
        .expect("size") as usize;
    let hex = blake3::hash(&evil[header + 512..header + 512 + size]).to_hex();
    let record = find(&evil, b"AGENTBOX.blake3=") + "AGENTBOX.blake3=".len();
    evil[record..record + 64].copy_from_slice(hex.as_bytes());
    expect_rejected(tmp.path(), "evil-tag", &evil, "invalid tag name \"..\"");
}
