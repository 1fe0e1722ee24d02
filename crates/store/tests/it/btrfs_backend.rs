//! The btrfs backend on a throwaway loop-device btrfs (root only).

#![allow(clippy::unwrap_used)]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use agentbox_store::backend::btrfs::{probe, BtrfsBackend};
use agentbox_store::backend::{Backend, BackendKind, LayerRecord, WorkDirs};
use agentbox_sys::btrfs;
use agentbox_testkit::loopfs::LoopFs;

const SIZE: u64 = 256 << 20;

fn setup(fs: &LoopFs) -> (BtrfsBackend, WorkDirs) {
    let store = fs.path().join("store");
    fs::create_dir(&store).unwrap();
    let backend = BtrfsBackend::new(&store);
    let dirs = WorkDirs {
        work: store.join("envs/e/work"),
        mountpoint: Some(fs.path().join("mnt/e")),
        base: None,
        box_stopped: false,
    };
    (backend, dirs)
}

fn mount_count(mp: &Path) -> usize {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mp = mp.to_string_lossy();
    info.lines()
        .filter(|l| l.split(' ').nth(4) == Some(&*mp))
        .count()
}

fn set_mtime(path: &Path, sec: i64) {
    let t = rustix::fs::Timespec {
        tv_sec: sec,
        tv_nsec: 0,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        path,
        &rustix::fs::Timestamps {
            last_access: t,
            last_modification: t,
        },
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .unwrap();
}

#[test]
fn probe_tells_btrfs_apart() {
    let tmp = tempfile::tempdir().unwrap();
    if !btrfs::is_btrfs(tmp.path()).unwrap() {
        assert!(!probe(tmp.path()));
        assert!(!probe(&tmp.path().join("not/yet/there")));
    }
    if !agentbox_testkit::tier::require_root("probe_tells_btrfs_apart") {
        return;
    }
    let Some(fs) = LoopFs::btrfs(SIZE) else {
        return;
    };
    assert!(probe(fs.path()));
    assert!(probe(&fs.path().join("store/not/yet")));
}

#[test]
fn empty_layer_is_a_readonly_subvolume() {
    if !agentbox_testkit::tier::require_root("empty_layer_is_a_readonly_subvolume") {
        return;
    }
    let Some(fs) = LoopFs::btrfs(SIZE) else {
        return;
    };
    let (b, _) = setup(&fs);
    assert_eq!(b.kind(), BackendKind::Btrfs);
    let rec = b.empty_layer("l0").unwrap();
    assert_eq!(
        rec,
        LayerRecord {
            id: "l0".into(),
            parent: None,
            depth: 1,
            cleaned: None,
            compacted: false,
            held: None,
        }
    );
    let dir = b.layer_dir("l0");
    assert!(btrfs::is_subvolume(&dir).unwrap());
    assert!(btrfs::is_readonly(&dir).unwrap());
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    // No temporary left behind.
    let names: Vec<_> = fs::read_dir(dir.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("l0")]);

    let err = b.empty_layer("l0").unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    assert!(b.empty_layer(".tmp-x").is_err());
    assert!(b.empty_layer("a/b").is_err());

    b.remove_layer("l0").unwrap();
    assert!(!dir.exists());
    b.remove_layer("l0").unwrap();
}

#[test]
fn layer_from_dir_preserves_the_tree() {
    if !agentbox_testkit::tier::require_root("layer_from_dir_preserves_the_tree") {
        return;
    }
    let Some(fs) = LoopFs::btrfs(SIZE) else {
        return;
    };
    let (b, dirs) = setup(&fs);

    // Source tree on the root filesystem (not btrfs).
    let src_holder = tempfile::tempdir().unwrap();
    let src = src_holder.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("file"), b"content").unwrap();
    fs::write(src.join("suid"), b"#!/bin/sh\n").unwrap();
    rustix::fs::chown(
        src.join("suid").as_path(),
        Some(rustix::fs::Uid::from_raw(1234)),
        Some(rustix::fs::Gid::from_raw(5678)),
    )
    .unwrap();
    fs::set_permissions(src.join("suid"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::create_dir(src.join("private")).unwrap();
    fs::set_permissions(src.join("private"), fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink("file", src.join("link")).unwrap();
    xattr::set(src.join("file"), "user.note", b"hello").unwrap();
    // The root directory's own metadata must reach the subvolume root.
    xattr::set(&src, "user.root", b"r").unwrap();
    rustix::fs::chown(
        src.as_path(),
        Some(rustix::fs::Uid::from_raw(1000)),
        Some(rustix::fs::Gid::from_raw(1001)),
    )
    .unwrap();
    fs::set_permissions(&src, fs::Permissions::from_mode(0o2751)).unwrap();
    set_mtime(&src.join("private"), 1_000_000);
    set_mtime(&src, 1_500_000);

    b.layer_from_dir(&src, "base").unwrap();
    let l = b.layer_dir("base");
    assert!(btrfs::is_subvolume(&l).unwrap());
    assert!(btrfs::is_readonly(&l).unwrap());
    assert_eq!(fs::read(l.join("file")).unwrap(), b"content");
    assert_eq!(
        xattr::get(l.join("file"), "user.note").unwrap().unwrap(),
        b"hello"
    );
    let suid = fs::symlink_metadata(l.join("suid")).unwrap();
    assert_eq!(suid.mode() & 0o7777, 0o4755);
    assert_eq!((suid.uid(), suid.gid()), (1234, 5678));
    let private = fs::symlink_metadata(l.join("private")).unwrap();
    assert_eq!(private.mode() & 0o7777, 0o700);
    assert_eq!(private.mtime(), 1_000_000);
    assert_eq!(
        fs::read_link(l.join("link")).unwrap(),
        PathBuf::from("file")
    );
    let root = fs::symlink_metadata(&l).unwrap();
    assert_eq!(root.mode() & 0o7777, 0o2751);
    assert_eq!((root.uid(), root.gid()), (1000, 1001));
    assert_eq!(root.mtime(), 1_500_000);
    assert_eq!(xattr::get(&l, "user.root").unwrap().unwrap(), b"r");

    // The layer is immutable.
    let err = fs::write(l.join("file"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(30), "{err}");

    // A working tree from it shows the same tree at the mount point, writable.
    let chain = [b.layer_from_dir(&src, "base2").unwrap()];
    b.reset_work(&dirs, &chain).unwrap();
    let mp = dirs.mountpoint.as_ref().expect("a mount point");
    assert_eq!(fs::read(mp.join("file")).unwrap(), b"content");
    let root = fs::symlink_metadata(mp).unwrap();
    assert_eq!(root.mode() & 0o7777, 0o2751);
    fs::write(mp.join("file"), b"changed").unwrap();
    assert_eq!(fs::read(l.join("file")).unwrap(), b"content");
    b.remove_work(&dirs).unwrap();
    assert!(!dirs.work.exists());
    assert_eq!(mount_count(mp), 0);
}

#[test]
fn reset_commit_cycle() {
    if !agentbox_testkit::tier::require_root("reset_commit_cycle") {
        return;
    }
    let Some(fs) = LoopFs::btrfs(SIZE) else {
        return;
    };
    let (b, dirs) = setup(&fs);
    let mp = dirs.mountpoint.clone().expect("a mount point");

    let l0 = b.empty_layer("l0").unwrap();
    b.reset_work(&dirs, std::slice::from_ref(&l0)).unwrap();
    assert_eq!(mount_count(&mp), 1);
    assert_eq!(fs::read_dir(&mp).unwrap().count(), 0);

    fs::write(mp.join("a"), b"one").unwrap();
    let l1 = b.commit(&dirs, std::slice::from_ref(&l0), "l1").unwrap();
    assert_eq!(l1.depth, 1);
    assert_eq!(l1.parent, None);

    fs::write(mp.join("a"), b"two").unwrap();
    fs::write(mp.join("b"), b"bee").unwrap();
    let l2 = b.commit(&dirs, std::slice::from_ref(&l1), "l2").unwrap();

    // Each commit is its own read-only subvolume, separate from the working tree.
    for id in ["l1", "l2"] {
        let d = b.layer_dir(id);
        assert!(btrfs::is_subvolume(&d).unwrap());
        assert!(btrfs::is_readonly(&d).unwrap());
    }
    let tree = dirs.work.join("tree");
    assert!(btrfs::is_subvolume(&tree).unwrap());
    assert!(!btrfs::is_readonly(&tree).unwrap());
    let l1_dev = fs::metadata(b.layer_dir("l1")).unwrap().dev();
    assert_ne!(l1_dev, fs::metadata(b.layer_dir("l2")).unwrap().dev());
    assert_ne!(l1_dev, fs::metadata(&mp).unwrap().dev());
    assert_eq!(fs::read(b.layer_dir("l1").join("a")).unwrap(), b"one");
    assert!(!b.layer_dir("l1").join("b").exists());
    assert_eq!(fs::read(b.layer_dir("l2").join("a")).unwrap(), b"two");

    // Writing after a commit does not change the commit.
    fs::write(mp.join("a"), b"three").unwrap();
    assert_eq!(fs::read(b.layer_dir("l2").join("a")).unwrap(), b"two");

    // Back to the first commit.
    b.reset_work(&dirs, std::slice::from_ref(&l1)).unwrap();
    assert_eq!(mount_count(&mp), 1);
    assert_eq!(fs::read(mp.join("a")).unwrap(), b"one");
    assert!(!mp.join("b").exists());

    // mount is idempotent; unmount too; mount after unmount brings the tree back.
    b.mount(&dirs, std::slice::from_ref(&l1)).unwrap();
    b.mount(&dirs, std::slice::from_ref(&l1)).unwrap();
    assert_eq!(mount_count(&mp), 1);
    fs::write(mp.join("uncommitted"), b"u").unwrap();
    b.unmount(&dirs).unwrap();
    b.unmount(&dirs).unwrap();
    assert_eq!(mount_count(&mp), 0);
    assert!(!mp.join("a").exists());
    b.mount(&dirs, std::slice::from_ref(&l1)).unwrap();
    assert_eq!(fs::read(mp.join("uncommitted")).unwrap(), b"u");

    // A lost working tree (crash during a reset) is rebuilt from HEAD's layer by mount.
    b.unmount(&dirs).unwrap();
    btrfs::delete_subvolume(&tree).unwrap();
    b.mount(&dirs, std::slice::from_ref(&l2)).unwrap();
    assert_eq!(fs::read(mp.join("a")).unwrap(), b"two");

    // Leftover temporaries from a crash do not block the next commit.
    btrfs::snapshot(
        &tree,
        b.layer_dir("l0").parent().unwrap(),
        std::ffi::OsStr::new(".tmp-l3"),
        true,
    )
    .unwrap();
    b.commit(&dirs, std::slice::from_ref(&l2), "l3").unwrap();
    assert!(!b.layer_dir(".tmp-l3").exists());

    b.remove_layer("l1").unwrap();
    assert!(!b.layer_dir("l1").exists());
    assert_eq!(fs::read(mp.join("a")).unwrap(), b"two");
    b.remove_work(&dirs).unwrap();
    assert_eq!(mount_count(&mp), 0);
    for id in ["l0", "l2", "l3"] {
        b.remove_layer(id).unwrap();
    }
    assert_eq!(
        fs::read_dir(fs.path().join("store/layers"))
            .unwrap()
            .count(),
        0
    );
}
