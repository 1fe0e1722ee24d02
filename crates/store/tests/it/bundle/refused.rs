//! Malicious or damaged archives refused before anything unsafe is written: raw tar
//! entries, version-1 bundles, held nodes, symlinks, staging, decompression bombs, bad tags.

use super::*;

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
