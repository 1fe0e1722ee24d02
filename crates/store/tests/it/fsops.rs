//! Fidelity of scanning, copying and diffing trees.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use agentbox_store::fsops::{
    compare_exact, copy_dir, copy_tree, diff_trees, read_meta, read_meta_beneath, scan_chain,
    scan_tree, ChangeKind, CopyOpts, Kind,
};
use agentbox_testkit::tier::require_root;
use agentbox_testkit::tree_gen::{
    self, materialize, set_mode, set_mtime, write_and_set_times, write_sparse,
};
use agentbox_testkit::TempHome;
use proptest::prelude::*;
use rustix::fs::{FileType, Mode, CWD};

fn no_reflink() -> CopyOpts {
    CopyOpts {
        reflink: false,
        ..CopyOpts::default()
    }
}

/// Copy `src` to a fresh `dst` next to it and assert the copy is exact.
fn roundtrip(home: &TempHome, src: &Path, opts: &CopyOpts) -> PathBuf {
    let dst = home.path().join("dst");
    copy_dir(src, &dst, opts).expect("copy_dir");
    let diffs = compare_exact(src, &dst).expect("compare_exact");
    assert!(diffs.is_empty(), "copy differs: {diffs:#?}");
    dst
}

fn src_dir(home: &TempHome) -> PathBuf {
    let src = home.path().join("src");
    fs_err::create_dir(&src).expect("mkdir src");
    src
}

fn mknod(path: &Path, ft: FileType, dev: u64) {
    rustix::fs::mknodat(CWD, path, ft, Mode::from_raw_mode(0o644), dev).expect("mknod");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_trees_copy_exactly(spec in tree_gen::tree_spec(), reflink in any::<bool>()) {
        let home = TempHome::new();
        let src = home.path().join("src");
        materialize(&spec, &src);
        let dst = home.path().join("dst");
        let opts = CopyOpts { reflink, ..CopyOpts::default() };
        copy_dir(&src, &dst, &opts).expect("copy_dir");
        let diffs = compare_exact(&src, &dst).expect("compare_exact");
        prop_assert!(diffs.is_empty(), "copy differs: {:#?}", diffs);
        // Materialising and scanning are stable: a copy of the copy is exact too.
        let diffs = diff_trees(&scan_tree(&src).expect("scan"), &scan_tree(&dst).expect("scan"))
            .expect("diff");
        prop_assert!(diffs.is_empty(), "diff_trees reports changes on a copy: {:#?}", diffs);
    }
}

#[test]
fn setuid_and_group_bits_survive_umask() {
    let home = TempHome::new();
    let src = src_dir(&home);
    let old = rustix::process::umask(Mode::from_raw_mode(0o022));
    write_and_set_times(&src.join("suid"), b"x", 0o4755, (1_600_000_000, 5));
    write_and_set_times(&src.join("sgid"), b"y", 0o2775, (1_600_000_000, 6));
    write_and_set_times(&src.join("open"), b"z", 0o777, (1_600_000_000, 7));
    let dst = roundtrip(&home, &src, &no_reflink());
    rustix::process::umask(old);
    for (name, mode) in [("suid", 0o4755), ("sgid", 0o2775), ("open", 0o777)] {
        let md = fs_err::metadata(dst.join(name)).expect("stat");
        assert_eq!(md.mode() & 0o7777, mode, "{name}");
    }
}

#[test]
fn sticky_directory() {
    let home = TempHome::new();
    let src = src_dir(&home);
    let d = src.join("tmp");
    fs_err::create_dir(&d).expect("mkdir");
    fs_err::write(d.join("f"), b"f").expect("write");
    set_mode(&d, 0o1777);
    let dst = roundtrip(&home, &src, &CopyOpts::default());
    let md = fs_err::metadata(dst.join("tmp")).expect("stat");
    assert_eq!(md.mode() & 0o7777, 0o1777);
}

#[test]
fn dangling_and_absolute_symlinks() {
    let home = TempHome::new();
    let src = src_dir(&home);
    fs_err::os::unix::fs::symlink("does/not/exist", src.join("dangling")).expect("symlink");
    fs_err::os::unix::fs::symlink("/absolute/nowhere", src.join("abs")).expect("symlink");
    set_mtime(&src.join("dangling"), 1_500_000_000, 123_456_789);
    let dst = roundtrip(&home, &src, &CopyOpts::default());
    assert_eq!(
        fs_err::read_link(dst.join("dangling")).expect("readlink"),
        PathBuf::from("does/not/exist")
    );
    let md = fs_err::symlink_metadata(dst.join("dangling")).expect("lstat");
    assert_eq!((md.mtime(), md.mtime_nsec()), (1_500_000_000, 123_456_789));
}

#[test]
fn hardlinks_stay_linked() {
    let home = TempHome::new();
    let src = src_dir(&home);
    fs_err::create_dir(src.join("sub")).expect("mkdir");
    fs_err::write(src.join("a"), b"shared").expect("write");
    fs_err::hard_link(src.join("a"), src.join("sub/b")).expect("link");
    fs_err::hard_link(src.join("a"), src.join("c")).expect("link");
    let dst = home.path().join("dst");
    let stats = copy_dir(&src, &dst, &CopyOpts::default()).expect("copy");
    assert_eq!(stats.hardlinks, 2);
    assert_eq!(stats.files, 1);
    assert!(compare_exact(&src, &dst).expect("compare").is_empty());
    let ino = |p: &str| fs_err::metadata(dst.join(p)).expect("stat").ino();
    assert_eq!(ino("a"), ino("sub/b"));
    assert_eq!(ino("a"), ino("c"));
    assert_eq!(fs_err::metadata(dst.join("a")).expect("stat").nlink(), 3);
}

#[test]
fn sparse_file_keeps_holes() {
    let home = TempHome::new();
    let src = src_dir(&home);
    write_sparse(&src.join("sparse"), 1 << 20, b"head", b"tail");
    let dst = roundtrip(&home, &src, &no_reflink());
    let md = fs_err::metadata(dst.join("sparse")).expect("stat");
    assert_eq!(md.len(), 1 << 20);
    // Two data blocks at most, not 1 MiB.
    assert!(md.blocks() * 512 < 256 * 1024, "blocks: {}", md.blocks());
    let data = fs_err::read(dst.join("sparse")).expect("read");
    assert_eq!(&data[..4], b"head");
    assert_eq!(&data[data.len() - 4..], b"tail");
}

#[test]
fn compare_exact_notices_lost_holes() {
    let home = TempHome::new();
    let a = home.path().join("a");
    let b = home.path().join("b");
    fs_err::create_dir(&a).expect("mkdir");
    fs_err::create_dir(&b).expect("mkdir");
    write_sparse(&a.join("f"), 1 << 20, b"head", b"tail");
    let mut full = vec![0u8; 1 << 20];
    full[..4].copy_from_slice(b"head");
    let n = full.len();
    full[n - 4..].copy_from_slice(b"tail");
    fs_err::write(b.join("f"), &full).expect("write");
    for p in [&a, &b] {
        set_mode(&p.join("f"), 0o644);
        set_mtime(&p.join("f"), 1_000_000_000, 0);
        set_mode(p, 0o755);
        set_mtime(p, 1_000_000_000, 0);
    }
    let diffs = compare_exact(&a, &b).expect("compare");
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert!(diffs[0].contains("holes"), "{diffs:?}");
}

#[test]
fn directory_mtimes_are_set_after_children() {
    let home = TempHome::new();
    let src = src_dir(&home);
    let d = src.join("d/e");
    fs_err::create_dir_all(&d).expect("mkdir");
    write_and_set_times(&d.join("f"), b"f", 0o644, (1_200_000_000, 1));
    set_mtime(&d, 1_100_000_000, 2);
    set_mtime(&src.join("d"), 1_000_000_000, 3);
    set_mtime(&src, 900_000_000, 4);
    let dst = roundtrip(&home, &src, &CopyOpts::default());
    for (p, t) in [
        ("d/e", (1_100_000_000, 2)),
        ("d", (1_000_000_000, 3)),
        ("", (900_000_000, 4)),
    ] {
        let md = fs_err::metadata(dst.join(p)).expect("stat");
        assert_eq!((md.mtime(), md.mtime_nsec()), t, "{p:?}");
    }
}

#[test]
fn xattrs_are_copied() {
    let home = TempHome::new();
    let src = src_dir(&home);
    fs_err::write(src.join("f"), b"f").expect("write");
    xattr::set(src.join("f"), "user.one", b"1").expect("setxattr");
    xattr::set(src.join("f"), "user.empty", b"").expect("setxattr");
    xattr::set(&src, "user.dir", b"d").expect("setxattr");
    if agentbox_testkit::tree_gen::is_root() {
        xattr::set(src.join("f"), "trusted.secret", b"s").expect("setxattr trusted");
        xattr::set(&src, "trusted.overlay.opaque", b"y").expect("setxattr trusted");
    }
    let dst = roundtrip(&home, &src, &CopyOpts::default());
    let meta = read_meta(&dst.join("f")).expect("meta");
    assert_eq!(
        meta.xattrs.get("user.one").map(Vec::as_slice),
        Some(&b"1"[..])
    );
    assert_eq!(
        meta.xattrs.get("user.empty").map(Vec::as_slice),
        Some(&b""[..])
    );
    let dmeta = read_meta(&dst).expect("meta");
    assert_eq!(
        dmeta.xattrs.get("user.dir").map(Vec::as_slice),
        Some(&b"d"[..])
    );
}

#[test]
fn xattr_filter_skips_names() {
    let home = TempHome::new();
    let src = src_dir(&home);
    fs_err::write(src.join("f"), b"f").expect("write");
    xattr::set(src.join("f"), "user.keep", b"1").expect("setxattr");
    xattr::set(src.join("f"), "user.drop", b"2").expect("setxattr");
    let dst = home.path().join("dst");
    let opts = CopyOpts {
        xattr_filter: Some(|n| n != "user.drop"),
        ..CopyOpts::default()
    };
    copy_dir(&src, &dst, &opts).expect("copy");
    let meta = read_meta(&dst.join("f")).expect("meta");
    assert!(meta.xattrs.contains_key("user.keep"));
    assert!(!meta.xattrs.contains_key("user.drop"));
}

#[test]
fn fifos_and_sockets() {
    let home = TempHome::new();
    let src = src_dir(&home);
    mknod(&src.join("fifo"), FileType::Fifo, 0);
    mknod(&src.join("sock"), FileType::Socket, 0);
    set_mode(&src.join("fifo"), 0o620);
    let dst = roundtrip(&home, &src, &CopyOpts::default());
    assert_eq!(read_meta(&dst.join("fifo")).expect("meta").kind, Kind::Fifo);
    assert_eq!(
        read_meta(&dst.join("sock")).expect("meta").kind,
        Kind::Socket
    );
}

#[test]
fn devices_and_owners() {
    if !require_root("devices_and_owners") {
        return;
    }
    let home = TempHome::new();
    let src = src_dir(&home);
    mknod(
        &src.join("null"),
        FileType::CharacterDevice,
        rustix::fs::makedev(1, 3),
    );
    mknod(
        &src.join("loop"),
        FileType::BlockDevice,
        rustix::fs::makedev(7, 200),
    );
    fs_err::write(src.join("owned"), b"o").expect("write");
    rustix::fs::chown(
        src.join("owned").as_path(),
        Some(rustix::fs::Uid::from_raw(1000)),
        Some(rustix::fs::Gid::from_raw(1001)),
    )
    .expect("chown");
    set_mode(&src.join("owned"), 0o6755);
    fs_err::os::unix::fs::symlink("t", src.join("link")).expect("symlink");
    rustix::fs::chownat(
        CWD,
        src.join("link").as_path(),
        Some(rustix::fs::Uid::from_raw(1001)),
        Some(rustix::fs::Gid::from_raw(1000)),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .expect("lchown");
    let dst = roundtrip(&home, &src, &CopyOpts::default());
    let m = read_meta(&dst.join("owned")).expect("meta");
    assert_eq!((m.uid, m.gid, m.perm), (1000, 1001, 0o6755));
    let m = read_meta(&dst.join("loop")).expect("meta");
    assert_eq!(
        (m.kind, m.rdev),
        (Kind::BlockDev, rustix::fs::makedev(7, 200))
    );
    let m = read_meta(&dst.join("link")).expect("meta");
    assert_eq!((m.uid, m.gid), (1001, 1000));
}

#[test]
fn compare_exact_reports_differences() {
    let home = TempHome::new();
    let src = src_dir(&home);
    fs_err::write(src.join("a"), b"aaaa").expect("write");
    fs_err::write(src.join("b"), b"bbbb").expect("write");
    fs_err::hard_link(src.join("a"), src.join("a2")).expect("link");
    let dst = roundtrip(&home, &src, &CopyOpts::default());
    // Break every property in the copy.
    set_mode(&dst.join("b"), 0o600);
    fs_err::remove_file(dst.join("a2")).expect("rm");
    fs_err::copy(dst.join("a"), dst.join("a2")).expect("cp");
    fs_err::write(dst.join("new"), b"").expect("write");
    let diffs = compare_exact(&src, &dst).expect("compare");
    let all = diffs.join("\n");
    assert!(all.contains("b: mode"), "{all}");
    assert!(all.contains("new: only in"), "{all}");
    assert!(all.contains("hardlinks"), "{all}");
    assert!(
        all.contains(". : mtime") || all.contains(".: mtime"),
        "{all}"
    );
}

/// Layers: `lower` (bottom), `upper` (top).
fn layers(home: &TempHome) -> (PathBuf, PathBuf) {
    let lower = home.path().join("lower");
    let upper = home.path().join("upper");
    fs_err::create_dir_all(lower.join("merged")).expect("mkdir");
    fs_err::create_dir_all(upper.join("merged")).expect("mkdir");
    fs_err::write(lower.join("merged/low"), b"low").expect("write");
    fs_err::write(upper.join("merged/up"), b"up").expect("write");
    fs_err::write(lower.join("merged/both"), b"lower version").expect("write");
    fs_err::write(upper.join("merged/both"), b"upper").expect("write");
    // file over dir
    fs_err::create_dir_all(lower.join("fod/deep")).expect("mkdir");
    fs_err::write(lower.join("fod/deep/x"), b"x").expect("write");
    fs_err::write(upper.join("fod"), b"now a file").expect("write");
    // opaque dir (user.overlay.* works without root)
    fs_err::create_dir_all(lower.join("opq")).expect("mkdir");
    fs_err::write(lower.join("opq/hidden"), b"h").expect("write");
    fs_err::create_dir_all(upper.join("opq")).expect("mkdir");
    fs_err::write(upper.join("opq/visible"), b"v").expect("write");
    xattr::set(upper.join("opq"), "user.overlay.opaque", b"y").expect("setxattr");
    // dir over file
    fs_err::write(lower.join("dof"), b"file").expect("write");
    fs_err::create_dir_all(upper.join("dof")).expect("mkdir");
    fs_err::write(upper.join("dof/child"), b"c").expect("write");
    (lower, upper)
}

/// `walk_chain` of a stack: what it hands over, in order. It must be exactly `scan_chain`'s
/// entries in `scan_chain`'s order.
fn walked(layers: &[&Path], opaque: &str) -> Vec<agentbox_store::fsops::Entry> {
    let mut out = Vec::new();
    agentbox_store::fsops::walk_chain(layers, opaque, &mut |e| {
        out.push(e);
        Ok(())
    })
    .expect("walk_chain");
    out
}

fn assert_walk_is_scan(layers: &[&Path], opaque: &str) {
    let scanned: Vec<_> = scan_chain(layers, opaque)
        .expect("scan_chain")
        .entries
        .into_values()
        .collect();
    assert_eq!(
        walked(layers, opaque),
        scanned,
        "walk_chain differs from scan_chain"
    );
}

fn rels(tree: &agentbox_store::fsops::Tree) -> Vec<String> {
    tree.entries
        .keys()
        .map(|p| p.display().to_string())
        .collect()
}

#[test]
fn chain_merges_and_hides() {
    let home = TempHome::new();
    let (lower, upper) = layers(&home);
    let tree = scan_chain(&[&upper, &lower], "user.overlay.opaque").expect("scan_chain");
    assert_walk_is_scan(&[&upper, &lower], "user.overlay.opaque");
    assert_eq!(
        rels(&tree),
        [
            "",
            "dof",
            "dof/child",
            "fod",
            "merged",
            "merged/both",
            "merged/low",
            "merged/up",
            "opq",
            "opq/visible"
        ]
    );
    let both = tree.get(Path::new("merged/both")).expect("both");
    assert_eq!(both.src, upper.join("merged/both"));
    assert_eq!(
        tree.get(Path::new("merged/low")).expect("low").src,
        lower.join("merged/low")
    );
    assert_eq!(
        tree.get(Path::new("fod")).expect("fod").meta.kind,
        Kind::File
    );
    let opq = tree.get(Path::new("opq")).expect("opq");
    assert!(opq.meta.xattrs.is_empty(), "overlay xattrs stripped");
    // The raw scan keeps them.
    let raw = scan_tree(&upper).expect("scan");
    assert!(raw
        .get(Path::new("opq"))
        .expect("opq")
        .meta
        .xattrs
        .contains_key("user.overlay.opaque"));

    // The merged tree copies like any tree.
    let dst = home.path().join("merged-copy");
    copy_tree(&tree, &dst, &CopyOpts::default()).expect("copy_tree");
    assert_eq!(
        fs_err::read(dst.join("merged/both")).expect("read"),
        b"upper"
    );
    assert!(!dst.join("opq/hidden").exists());
    assert!(read_meta(&dst.join("opq")).expect("meta").xattrs.is_empty());
}

#[test]
fn chain_whiteouts_and_trusted_opaque() {
    if !require_root("chain_whiteouts_and_trusted_opaque") {
        return;
    }
    let home = TempHome::new();
    let (lower, upper) = layers(&home);
    let mid = home.path().join("mid");
    fs_err::create_dir_all(mid.join("merged")).expect("mkdir");
    // whiteouts of a file and of a whole directory
    mknod(&mid.join("merged/low"), FileType::CharacterDevice, 0);
    fs_err::create_dir_all(lower.join("gone/sub")).expect("mkdir");
    fs_err::write(lower.join("gone/sub/f"), b"f").expect("write");
    mknod(&mid.join("gone"), FileType::CharacterDevice, 0);
    // a directory recreated above a whiteout
    fs_err::create_dir_all(lower.join("again")).expect("mkdir");
    fs_err::write(lower.join("again/old"), b"old").expect("write");
    mknod(&mid.join("again"), FileType::CharacterDevice, 0);
    fs_err::create_dir_all(upper.join("again")).expect("mkdir");
    fs_err::write(upper.join("again/new"), b"new").expect("write");
    // trusted opaque marker
    fs_err::create_dir_all(lower.join("topq")).expect("mkdir");
    fs_err::write(lower.join("topq/hidden"), b"h").expect("write");
    fs_err::create_dir_all(mid.join("topq")).expect("mkdir");
    xattr::set(mid.join("topq"), "trusted.overlay.opaque", b"y").expect("setxattr");
    xattr::set(mid.join("topq"), "trusted.keep", b"k").expect("setxattr");

    let tree = scan_chain(&[&upper, &mid, &lower], "trusted.overlay.opaque").expect("scan_chain");
    assert_walk_is_scan(&[&upper, &mid, &lower], "trusted.overlay.opaque");
    let names = rels(&tree);
    for gone in [
        "merged/low",
        "gone",
        "gone/sub",
        "gone/sub/f",
        "again/old",
        "topq/hidden",
    ] {
        assert!(
            !names.contains(&gone.to_string()),
            "{gone} visible: {names:?}"
        );
    }
    for seen in ["merged/up", "merged/both", "again", "again/new", "topq"] {
        assert!(
            names.contains(&seen.to_string()),
            "{seen} missing: {names:?}"
        );
    }
    let topq = tree.get(Path::new("topq")).expect("topq");
    assert_eq!(
        topq.meta.xattrs.keys().collect::<Vec<_>>(),
        ["trusted.keep"],
        "only overlay xattrs are stripped"
    );
    assert!(tree.entries.values().all(|e| !e.meta.is_whiteout()));
}

#[test]
fn chain_of_one_layer_is_scan_tree() {
    let home = TempHome::new();
    let src = home.path().join("src");
    let spec = agentbox_testkit::tree_gen::TreeSpec {
        root_mode: 0o755,
        root_xattrs: vec![("user.overlay.origin".into(), b"o".to_vec())],
        root_mtime: (1_000_000_000, 0),
        nodes: Vec::new(),
    };
    materialize(&spec, &src);
    fs_err::create_dir_all(src.join("a/b")).expect("mkdir");
    fs_err::write(src.join("a/b/f"), b"f").expect("write");
    xattr::set(src.join("a"), "user.x", b"1").expect("setxattr");
    let mut raw = scan_tree(&src).expect("scan");
    for e in raw.entries.values_mut() {
        e.meta.xattrs.retain(|k, _| !k.starts_with("user.overlay."));
    }
    assert_eq!(
        scan_chain(&[&src], "trusted.overlay.opaque").expect("chain"),
        raw
    );
}

/// A deterministic stream of small random numbers (xorshift).
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Fill directory `dir` of layer `layer` with entries named from a small alphabet, so that
/// the layers of a stack collide on names: files, symlinks and directories over one
/// another, whiteouts (0/0 devices), and directories marked opaque the way a privileged
/// overlayfs reads it. Some files and directories carry the markers of the other namespace
/// (`user.overlay.whiteout`, `user.overlay.opaque`), which a box can set and which mark
/// nothing for a privileged overlay. Directory mtimes are set after their children.
fn fill_layer_dir(dir: &Path, rel: &str, layer: usize, depth: usize, dice: &mut Dice) {
    for name in ["a", "b", "c", "d"] {
        let path = dir.join(name);
        let child_rel = format!("{rel}/{name}");
        let choice = dice.below(if depth < 3 { 9 } else { 6 });
        match choice {
            0 | 1 => continue,
            2 | 3 => write_and_set_times(
                &path,
                format!("{child_rel} in layer {layer}\n").as_bytes(),
                [0o644, 0o600, 0o755][dice.below(3) as usize],
                (1_600_000_000 + dice.below(1000) as i64, 0),
            ),
            4 => fs_err::os::unix::fs::symlink(format!("target-{layer}"), &path).expect("symlink"),
            5 => mknod(&path, FileType::CharacterDevice, 0),
            _ => {
                fs_err::create_dir(&path).expect("mkdir");
                fill_layer_dir(&path, &child_rel, layer, depth + 1, dice);
                if choice == 8 {
                    xattr::set(&path, "trusted.overlay.opaque", b"y").expect("setxattr");
                } else if dice.below(6) == 0 {
                    xattr::set(&path, "user.overlay.opaque", b"y").expect("setxattr");
                }
                set_mode(&path, [0o755, 0o750, 0o700][dice.below(3) as usize]);
                set_mtime(&path, 1_500_000_000 + dice.below(1000) as i64, 0);
            }
        }
        if choice < 4 && dice.below(6) == 0 {
            xattr::set(&path, "user.overlay.whiteout", b"").expect("setxattr");
        }
        if choice != 5 && dice.below(4) == 0 {
            xattr::set(&path, "trusted.layer", layer.to_string().as_bytes()).expect("setxattr");
        }
    }
}

/// The fields of an entry that the merged view shows, for comparing our merge with the
/// kernel's: everything but the identity of the inode (and the times the kernel sets).
fn shown(e: &agentbox_store::fsops::Entry) -> String {
    let m = &e.meta;
    let xattrs: Vec<_> = m
        .xattrs
        .iter()
        .filter(|(k, _)| !k.starts_with("trusted.overlay.") && !k.starts_with("user.overlay."))
        .collect();
    format!(
        "{} {:?} {:o} {}:{} size {} mtime {} {:?} {:?}",
        e.rel.display(),
        m.kind,
        m.perm,
        m.uid,
        m.gid,
        m.size,
        m.mtime_sec,
        m.target,
        xattrs
    )
}

/// What a program sees below a directory of a mounted overlayfs: [`shown`] lines in path
/// order and the content of each file. A directory that comes from one layer alone is read
/// straight from it, so its listing still names the whiteouts in it; looking such a name up
/// finds nothing, as for any path a whiteout hides. Such names are not part of the view;
/// they are collected as phantoms.
#[derive(Debug, Default, PartialEq)]
struct View {
    lines: Vec<String>,
    files: BTreeMap<PathBuf, Vec<u8>>,
    phantoms: Vec<PathBuf>,
}

/// Add what is below `dir` (at `rel` in the view) to `view`.
fn walk_view(dir: &Path, rel: &Path, view: &mut View) {
    let mut names: Vec<_> = fs_err::read_dir(dir)
        .expect("read a directory of the view")
        .map(|e| e.expect("read a directory entry of the view").file_name())
        .collect();
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let meta = match read_meta(&path) {
            Ok(m) => m,
            Err(agentbox_store::Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                view.phantoms.push(rel.join(&name));
                continue;
            }
            Err(e) => panic!("lstat {}: {e}", path.display()),
        };
        let entry = agentbox_store::fsops::Entry {
            rel: rel.join(&name),
            src: path.clone(),
            meta,
        };
        view.lines.push(shown(&entry));
        if entry.meta.is_dir() {
            walk_view(&path, &entry.rel, view);
        } else if entry.meta.kind == Kind::File {
            let content = fs_err::read(&path).expect("read a file of the view");
            view.files.insert(entry.rel, content);
        }
    }
}

/// A stack of `count` random layers (top first) made by [`fill_layer_dir`] under `home`.
fn random_stack(home: &TempHome, seed: u64, count: usize) -> Vec<PathBuf> {
    let mut dice = Dice(seed | 1);
    (0..count)
        .map(|i| {
            let dir = home.path().join(format!("layer{i}"));
            fs_err::create_dir(&dir).expect("mkdir layer");
            fill_layer_dir(&dir, "", i, 0, &mut dice);
            // Now and then a layer below the top hides everything under it.
            if i > 0 && dice.below(8) == 0 {
                xattr::set(&dir, "trusted.overlay.opaque", b"y").expect("setxattr");
            }
            dir
        })
        .collect()
}

/// What the kernel shows of the stack `lowers` (top first), mounted read-only at
/// `home/<name>`.
fn kernel_view(home: &TempHome, lowers: &[&Path], name: &str) -> View {
    let view = home.path().join(name);
    fs_err::create_dir(&view).expect("mkdir view");
    crate::common::mount_overlay_ro(lowers, &view);
    let mut shown = View::default();
    walk_view(&view, Path::new(""), &mut shown);
    rustix::mount::unmount(&view, rustix::mount::UnmountFlags::DETACH).expect("unmount");
    shown
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// `scan_chain` merges a stack of layers exactly as overlayfs does: the kernel's view of
    /// the same stack, mounted read-only, is the oracle.
    #[test]
    fn chain_merges_like_the_kernel(seed in any::<u64>(), count in 2usize..6) {
        if !require_root("chain_merges_like_the_kernel") {
            return Ok(());
        }
        let home = TempHome::new();
        let layers = random_stack(&home, seed, count);
        let refs: Vec<&Path> = layers.iter().map(PathBuf::as_path).collect();
        let ours = scan_chain(&refs, "trusted.overlay.opaque").expect("scan_chain");
        // The walk that exports stream from is held to the same oracle, through scan_chain.
        let walk = walked(&refs, "trusted.overlay.opaque");
        prop_assert_eq!(&walk, &ours.entries.values().cloned().collect::<Vec<_>>());
        let kernel = kernel_view(&home, &refs, "view");
        let ours_shown: Vec<String> = ours.entries.values().skip(1).map(shown).collect();
        prop_assert_eq!(ours_shown, kernel.lines);
        for (rel, seen) in kernel.files {
            let src = &ours.get(&rel).expect("the kernel shows no file we lack").src;
            prop_assert_eq!(&fs_err::read(src).expect("read provider"), &seen, "{}", rel.display());
        }
        // Every entry names the layer that provides it.
        for e in ours.entries.values() {
            prop_assert!(layers.iter().any(|l| e.src == l.join(&e.rel)), "{}", e.src.display());
        }
    }

    /// Folding the top layers of a stack into one changes nothing the kernel shows: the
    /// folded layer over the layers below it shows what the whole stack shows. Both ways a
    /// fold is made: in memory (`fold_over_base`: a flatten of a box, the compaction of a
    /// deep chain) and on disk, one layer applied after the other (`apply_overlay_layer`:
    /// a box's commit on btrfs). Told the layers below (what a compaction does), the fold
    /// leaves out the whiteouts that hide nothing of them, and lists no name it cannot
    /// open that the layers below do not list already.
    #[test]
    fn a_fold_over_a_base_shows_what_the_stack_shows(
        seed in any::<u64>(),
        count in 3usize..7,
        base_len in 1usize..3,
    ) {
        if !require_root("a_fold_over_a_base_shows_what_the_stack_shows") {
            return Ok(());
        }
        use agentbox_store::backend::apply::{apply_overlay_layer, fold_over_base};
        const OPQ: &str = "trusted.overlay.opaque";
        let home = TempHome::new();
        let layers = random_stack(&home, seed, count);
        let refs: Vec<&Path> = layers.iter().map(PathBuf::as_path).collect();
        let (above, base) = refs.split_at(count - base_len.min(count - 2));
        let stack = kernel_view(&home, &refs, "stack");

        let in_memory = home.path().join("in-memory");
        fold_over_base(above, &in_memory, OPQ, None, None).expect("fold");
        let on_disk = home.path().join("on-disk");
        copy_dir(above[above.len() - 1], &on_disk, &CopyOpts::default()).expect("copy");
        for layer in above[..above.len() - 1].iter().rev() {
            apply_overlay_layer(layer, &on_disk, OPQ, None).expect("apply");
        }
        let pruned = home.path().join("pruned");
        let below = agentbox_store::backend::apply::Below::new(
            base.iter().map(|p| p.to_path_buf()).collect(),
            None,
        );
        fold_over_base(above, &pruned, OPQ, None, Some(&below)).expect("fold");
        // What the layers below list but cannot open themselves.
        let base_phantoms: Vec<PathBuf> = if base.len() > 1 {
            kernel_view(&home, base, "base").phantoms
        } else {
            scan_tree(base[0])
                .expect("scan")
                .entries
                .into_iter()
                .filter(|(_, e)| e.meta.is_whiteout())
                .map(|(rel, _)| rel)
                .collect()
        };
        for folded in [&in_memory, &on_disk, &pruned] {
            let name = folded.file_name().expect("a name").to_string_lossy();
            let mut lowers = vec![folded.as_path()];
            lowers.extend_from_slice(base);
            let view = kernel_view(&home, &lowers, &format!("{name}-view"));
            prop_assert_eq!(&view.lines, &stack.lines, "{}", name);
            prop_assert_eq!(&view.files, &stack.files, "{}", name);
            if folded == &pruned {
                for p in &view.phantoms {
                    prop_assert!(
                        base_phantoms.contains(p),
                        "{} is listed but cannot be opened", p.display()
                    );
                }
            }
        }
    }
}

/// A fold told its base never looks into a mount below the base (a box's names must not make
/// the host enter an automounter's directory or a network filesystem) nor through a symlink
/// of it. Like overlayfs, which sees the directory a mount covers, it takes a mount point as
/// an empty directory: a whiteout in it is kept, one below it goes — although the tmpfs
/// mounted there has the directory. A whiteout in a directory the base has is kept, one in
/// a directory the base lacks or has only as a symlink goes.
#[test]
fn a_fold_does_not_look_into_mounts_of_its_base() {
    if !require_root("a_fold_does_not_look_into_mounts_of_its_base") {
        return;
    }
    let home = TempHome::new();
    let base = home.path().join("base");
    fs_err::create_dir_all(base.join("mnt/point")).expect("mkdir");
    rustix::mount::mount(
        "tmpfs",
        base.join("mnt/point"),
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        c"size=1m",
    )
    .expect("mount a tmpfs in the base");
    fs_err::create_dir_all(base.join("mnt/point/sub")).expect("mkdir in the tmpfs");
    // A symlink of the base is no directory, wherever it points.
    fs_err::create_dir_all(base.join("real")).expect("mkdir");
    fs_err::os::unix::fs::symlink("real", base.join("link")).expect("symlink");
    let layer = home.path().join("layer");
    for dir in ["mnt/point", "mnt/point/sub", "nowhere", "link", "real"] {
        fs_err::create_dir_all(layer.join(dir)).expect("mkdir");
        mknod(&layer.join(dir).join("gone"), FileType::CharacterDevice, 0);
    }
    let folded = home.path().join("folded");
    let result = agentbox_store::backend::apply::fold_over_base(
        &[&layer],
        &folded,
        "trusted.overlay.opaque",
        None,
        Some(&agentbox_store::backend::apply::Below::new(
            Vec::new(),
            Some(agentbox_store::backend::BoxBase {
                root: base.clone(),
                hidden: Vec::new(),
                shown: Vec::new(),
            }),
        )),
    );
    rustix::mount::unmount(base.join("mnt/point"), rustix::mount::UnmountFlags::DETACH)
        .expect("unmount");
    result.expect("fold");
    let kept = |p: &str| std::fs::symlink_metadata(folded.join(p)).is_ok();
    assert!(
        kept("mnt/point/gone"),
        "kept: in a mount point of the base (its covered directory exists)"
    );
    assert!(
        !kept("mnt/point/sub/gone"),
        "gone: below a mount point, the covered directory is taken as empty"
    );
    assert!(
        !kept("nowhere/gone"),
        "gone: the base has no such directory"
    );
    assert!(
        !kept("link/gone"),
        "gone: a symlink of the base is not followed"
    );
    assert!(kept("real/gone"), "kept: the base has the directory");
}

#[test]
fn diff_reports_every_kind() {
    let home = TempHome::new();
    let a = home.path().join("a");
    fs_err::create_dir_all(a.join("dir")).expect("mkdir");
    fs_err::write(a.join("same"), b"same").expect("write");
    fs_err::write(a.join("content"), b"aaaa").expect("write");
    fs_err::write(a.join("grow"), b"a").expect("write");
    fs_err::write(a.join("mode"), b"m").expect("write");
    fs_err::write(a.join("xattr"), b"x").expect("write");
    fs_err::write(a.join("removed"), b"r").expect("write");
    fs_err::write(a.join("totype"), b"t").expect("write");
    fs_err::os::unix::fs::symlink("one", a.join("link")).expect("symlink");
    set_mode(&a.join("mode"), 0o644);
    set_mode(&a.join("dir"), 0o755);
    let b = home.path().join("b");
    copy_dir(&a, &b, &CopyOpts::default()).expect("copy");
    fs_err::write(b.join("content"), b"bbbb").expect("write");
    fs_err::write(b.join("grow"), b"ab").expect("write");
    set_mode(&b.join("mode"), 0o4755);
    set_mode(&b.join("dir"), 0o700);
    xattr::set(b.join("xattr"), "user.new", b"1").expect("setxattr");
    fs_err::remove_file(b.join("removed")).expect("rm");
    fs_err::write(b.join("dir/added"), b"new").expect("write");
    fs_err::remove_file(b.join("totype")).expect("rm");
    fs_err::create_dir(b.join("totype")).expect("mkdir");
    fs_err::remove_file(b.join("link")).expect("rm");
    fs_err::os::unix::fs::symlink("two", b.join("link")).expect("symlink");
    set_mtime(&b.join("same"), 1, 0); // mtime only: not a change

    let changes =
        diff_trees(&scan_tree(&a).expect("scan"), &scan_tree(&b).expect("scan")).expect("diff");
    let got: Vec<(String, ChangeKind)> = changes
        .iter()
        .map(|c| (c.path.display().to_string(), c.kind))
        .collect();
    let want: Vec<(String, ChangeKind)> = [
        ("content", ChangeKind::Modified),
        ("dir", ChangeKind::MetaChanged),
        ("dir/added", ChangeKind::Added),
        ("grow", ChangeKind::Modified),
        ("link", ChangeKind::Modified),
        ("mode", ChangeKind::MetaChanged),
        ("removed", ChangeKind::Removed),
        ("totype", ChangeKind::Modified),
        ("xattr", ChangeKind::MetaChanged),
    ]
    .into_iter()
    .map(|(p, k)| (p.to_string(), k))
    .collect();
    assert_eq!(got, want, "{changes:#?}");
    let mode = changes
        .iter()
        .find(|c| c.path == Path::new("mode"))
        .expect("mode");
    assert_eq!(mode.detail.as_deref(), Some("mode 0644 -> 4755"));
    let grow = changes
        .iter()
        .find(|c| c.path == Path::new("grow"))
        .expect("grow");
    assert_eq!((grow.old_size, grow.new_size), (Some(1), Some(2)));
    let json = serde_json::to_value(mode).expect("json");
    assert_eq!(json["kind"], "metachanged");
    assert_eq!(
        serde_json::to_value(&changes[2]).expect("json")["kind"],
        "added"
    );
}

#[test]
fn diff_skips_unchanged_inodes_without_reading() {
    // Same inode, same times: treated as unchanged even though the file is unreadable.
    let home = TempHome::new();
    let a = src_dir(&home);
    fs_err::write(a.join("f"), b"f").expect("write");
    let t = scan_tree(&a).expect("scan");
    let mut t2 = t.clone();
    for e in t2.entries.values_mut() {
        e.src = PathBuf::from("/nonexistent/never/read");
    }
    assert!(diff_trees(&t, &t2).expect("diff").is_empty());
}

/// A tree the box controls may have a directory replaced by a symlink between its scan and
/// the copy: with `beneath` set, the copy refuses to read through it (without, it would copy
/// whatever the symlink points at, such as a host file, into the box's layer).
#[test]
fn a_copy_beneath_a_tree_never_reads_through_a_swapped_directory() {
    let home = TempHome::new();
    let upper = home.path().join("upper");
    let outside = home.path().join("host");
    fs_err::create_dir_all(upper.join("d")).expect("mkdir");
    fs_err::create_dir_all(&outside).expect("mkdir");
    fs_err::write(upper.join("d/secret"), "the box's own").expect("write");
    fs_err::write(outside.join("secret"), "the host's").expect("write");
    let tree = scan_tree(&upper).expect("scan");
    // The swap, after the scan.
    fs_err::remove_dir_all(upper.join("d")).expect("rm");
    std::os::unix::fs::symlink(&outside, upper.join("d")).expect("symlink");

    let guarded = CopyOpts {
        beneath: Some(upper.clone()),
        ..no_reflink()
    };
    let dst = home.path().join("layer");
    let err = copy_tree(&tree, &dst, &guarded).expect_err("must not read through the symlink");
    assert!(err.to_string().contains("secret"), "{err}");
    assert!(
        std::fs::read_to_string(dst.join("d/secret")).map_or(true, |s| s != "the host's"),
        "the host's file was copied"
    );
    // What the guard prevents: a plain copy follows the swapped directory.
    let plain = home.path().join("plain");
    copy_tree(&tree, &plain, &no_reflink()).expect("copy");
    assert_eq!(
        fs_err::read_to_string(plain.join("d/secret")).expect("read"),
        "the host's"
    );
}

/// The metadata a capture reads of a box's entry is the entry's own: a directory of its
/// path swapped for a symlink to the host after the scan makes the read fail as "not
/// found", never report the host file's owner, mode, xattrs or link target.
#[test]
fn metadata_beneath_a_tree_is_never_read_through_a_swapped_directory() {
    let home = TempHome::new();
    let upper = home.path().join("upper");
    let outside = home.path().join("host");
    fs_err::create_dir_all(upper.join("d/e")).expect("mkdir");
    fs_err::create_dir_all(outside.join("e")).expect("mkdir");
    fs_err::write(upper.join("d/e/f"), "the box's own").expect("write");
    std::os::unix::fs::symlink("elsewhere", upper.join("d/link")).expect("symlink");
    fs_err::write(outside.join("e/f"), "the host's, and longer").expect("write");
    xattr::set(outside.join("e/f"), "user.host", b"secret").expect("setxattr");

    // Before the swap: the box's own entries, a symlink read as itself.
    let own = read_meta_beneath(&upper, Path::new("d/e/f")).expect("meta");
    assert_eq!(own.size, "the box's own".len() as u64);
    let link = read_meta_beneath(&upper, Path::new("d/link")).expect("meta");
    assert_eq!(link.target.as_deref(), Some(Path::new("elsewhere")));
    assert_eq!(
        read_meta_beneath(&upper, Path::new("")).expect("root").ino,
        fs_err::metadata(&upper).expect("stat").ino()
    );

    fs_err::remove_dir_all(upper.join("d")).expect("rm");
    std::os::unix::fs::symlink(&outside, upper.join("d")).expect("symlink");
    let err = read_meta_beneath(&upper, Path::new("d/e/f")).expect_err("through the symlink");
    assert!(
        err.to_string()
            .contains(&upper.join("d/e/f").display().to_string()),
        "{err}"
    );
    // What the guard prevents: a read by path reports the host's file.
    let host = read_meta(&upper.join("d/e/f")).expect("meta");
    assert!(host.xattrs.contains_key("user.host"));
}

/// A box that swaps one of its directories for a symlink to a host directory while its tree
/// is scanned (as a capture scans a box's upper directory) must not get the host
/// directory's entries recorded as its own: each directory is opened without following a
/// symlink, and its entries are read relative to it. The swap is atomic (`RENAME_EXCHANGE`)
/// and runs the whole time, so scans hit it between the listing of the parent and the
/// reading of the child.
#[test]
fn a_directory_swapped_for_a_symlink_during_a_scan_is_not_followed() {
    let home = TempHome::new();
    let secret = home.path().join("host-secret");
    fs_err::create_dir_all(&secret).expect("mkdir");
    fs_err::write(secret.join("secret-file"), b"host data").expect("write");
    let root = home.path().join("box-upper");
    fs_err::create_dir_all(root.join("d")).expect("mkdir");
    for i in 0..20 {
        fs_err::write(root.join(format!("d/mine{i}")), b"box data").expect("write");
    }
    std::os::unix::fs::symlink(&secret, root.join("swap")).expect("symlink");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, root) = (stop.clone(), root.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                rustix::fs::renameat_with(
                    CWD,
                    root.join("d"),
                    CWD,
                    root.join("swap"),
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .expect("exchange");
                swaps += 1;
            }
            swaps
        })
    };
    let (mut scans, mut failed) = (0, 0);
    for _ in 0..2000 {
        match scan_tree(&root) {
            Ok(tree) => {
                scans += 1;
                for e in tree.entries.values() {
                    assert!(
                        !e.rel.ends_with("secret-file") && !e.src.starts_with(&secret),
                        "the scan followed the swapped-in symlink: {} ({})",
                        e.rel.display(),
                        e.src.display()
                    );
                }
            }
            // A directory that turned into a symlink under the scan: refused, not followed.
            Err(_) => failed += 1,
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    assert!(swaps > 0 && scans > 0, "{swaps} swaps, {scans} scans");
    eprintln!("{scans} scans, {failed} refused mid-swap, {swaps} swaps");
}
