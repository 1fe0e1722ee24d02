//! Diffs of trees, and scans and copies that never follow a directory swapped for a
//! symlink while they run.

use super::*;

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
