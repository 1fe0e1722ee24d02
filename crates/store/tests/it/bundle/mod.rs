//! Bundle format: round trips with full fidelity, history layers, compression detection,
//! refusal of malicious or damaged archives, and compatibility of rootfs tars with GNU tar.
//!
//! This file holds the helpers that build, write and compare trees and bundles; the tests
//! are in `round_trip` (fidelity, formats) and `refused` (bad input).

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

mod refused;
mod round_trip;

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
