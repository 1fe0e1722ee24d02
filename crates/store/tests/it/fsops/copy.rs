//! Copying keeps every attribute: modes, symlinks, hard links, holes, mtimes, xattrs,
//! special files, owners; and `compare_exact` notices what a copy lost.

use super::*;

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
