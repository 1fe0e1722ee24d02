//! btrfs ioctls on a throwaway loop-device filesystem (root only).

#![allow(clippy::unwrap_used)]

use std::ffi::OsStr;
use std::fs;

use agentbox_sys::btrfs;
use agentbox_testkit::loopfs::LoopFs;

const SIZE: u64 = 256 << 20;

#[test]
fn create_snapshot_readonly_delete() {
    if !agentbox_testkit::tier::require_root("create_snapshot_readonly_delete") {
        return;
    }
    let Some(fs) = LoopFs::btrfs(SIZE) else {
        return;
    };
    let root = fs.path();
    assert!(btrfs::is_btrfs(root).unwrap());
    // The top level of a btrfs is itself subvolume 5, with inode 256.
    assert!(btrfs::is_subvolume(root).unwrap());

    let sv = btrfs::create_subvolume(root, OsStr::new("sv")).unwrap();
    assert_eq!(sv, root.join("sv"));
    assert!(btrfs::is_subvolume(&sv).unwrap());
    assert!(!btrfs::is_readonly(&sv).unwrap());
    fs::write(sv.join("a"), b"hello").unwrap();
    fs::create_dir(sv.join("d")).unwrap();
    assert!(!btrfs::is_subvolume(&sv.join("d")).unwrap());

    let ro = btrfs::snapshot(&sv, root, OsStr::new("ro"), true).unwrap();
    let rw = btrfs::snapshot(&sv, root, OsStr::new("rw"), false).unwrap();
    assert!(btrfs::is_subvolume(&ro).unwrap());
    assert!(btrfs::is_readonly(&ro).unwrap());
    assert!(!btrfs::is_readonly(&rw).unwrap());
    assert_eq!(fs::read(ro.join("a")).unwrap(), b"hello");
    assert_eq!(fs::read(rw.join("a")).unwrap(), b"hello");

    // The snapshot is independent of its source.
    fs::write(sv.join("a"), b"changed").unwrap();
    assert_eq!(fs::read(ro.join("a")).unwrap(), b"hello");
    fs::write(rw.join("a"), b"rw").unwrap();
    assert_eq!(fs::read(sv.join("a")).unwrap(), b"changed");

    // Writes to a read-only snapshot fail with EROFS.
    let err = fs::write(ro.join("new"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(30), "{err}");
    let err = fs::write(ro.join("a"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(30), "{err}");

    // set_readonly round trip.
    btrfs::set_readonly(&rw, true).unwrap();
    assert!(btrfs::is_readonly(&rw).unwrap());
    btrfs::set_readonly(&rw, false).unwrap();
    assert!(!btrfs::is_readonly(&rw).unwrap());

    // A read-only snapshot can be renamed into place and deleted.
    fs::rename(&ro, root.join("ro2")).unwrap();
    let ro = root.join("ro2");
    assert!(btrfs::is_readonly(&ro).unwrap());
    btrfs::delete_subvolume(&ro).unwrap();
    assert!(!ro.exists());
    btrfs::delete_subvolume(&rw).unwrap();
    assert!(!rw.exists());

    btrfs::sync(root).unwrap();
    btrfs::delete_subvolume(&sv).unwrap();
    assert!(!sv.exists());
}

#[test]
fn delete_refuses_plain_dirs_and_nested_subvolumes() {
    if !agentbox_testkit::tier::require_root("delete_refuses_plain_dirs_and_nested_subvolumes") {
        return;
    }
    let Some(fs) = LoopFs::btrfs(SIZE) else {
        return;
    };
    let root = fs.path();
    let plain = root.join("plain");
    fs::create_dir(&plain).unwrap();
    let err = btrfs::delete_subvolume(&plain).unwrap_err();
    assert!(matches!(err, btrfs::Error::NotSubvolume { .. }), "{err}");
    assert!(err.to_string().contains("plain"), "{err}");

    let outer = btrfs::create_subvolume(root, OsStr::new("outer")).unwrap();
    let inner = btrfs::create_subvolume(&outer, OsStr::new("inner")).unwrap();
    let err = btrfs::delete_subvolume(&outer).unwrap_err();
    assert!(matches!(err, btrfs::Error::NestedSubvolume { .. }), "{err}");
    assert!(outer.exists() && inner.exists());
    btrfs::delete_subvolume(&inner).unwrap();
    btrfs::delete_subvolume(&outer).unwrap();

    // Snapshot of a plain directory is refused.
    let err = btrfs::snapshot(&plain, root, OsStr::new("s"), true).unwrap_err();
    assert!(matches!(err, btrfs::Error::NotSubvolume { .. }), "{err}");
    // Existing name.
    let sv = btrfs::create_subvolume(root, OsStr::new("sv")).unwrap();
    let err = btrfs::create_subvolume(root, OsStr::new("sv")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(17), "{err}");
    assert!(err.to_string().contains("sv"), "{err}");
    btrfs::delete_subvolume(&sv).unwrap();
}

#[test]
fn not_btrfs_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    if btrfs::is_btrfs(dir.path()).unwrap() {
        return;
    }
    assert!(!btrfs::is_subvolume(dir.path()).unwrap());
    let err = btrfs::create_subvolume(dir.path(), OsStr::new("x")).unwrap_err();
    assert!(matches!(err, btrfs::Error::NotBtrfs { .. }), "{err}");
    assert!(btrfs::is_btrfs(&dir.path().join("missing")).is_err());
}

#[test]
fn loopfs_is_torn_down_when_a_test_panics() {
    if !agentbox_testkit::tier::require_root("loopfs_is_torn_down_when_a_test_panics") {
        return;
    }
    let seen = std::sync::Mutex::new(None);
    let result = std::panic::catch_unwind(|| {
        let Some(fs) = LoopFs::btrfs(SIZE) else {
            return;
        };
        *seen.lock().unwrap() = Some((fs.path().to_owned(), fs.device().to_owned()));
        panic!("deliberate");
    });
    let Some((mnt, dev)) = seen.into_inner().unwrap() else {
        return;
    };
    assert!(result.is_err());
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!info.contains(&*mnt.to_string_lossy()), "{info}");
    assert!(!mnt.exists());
    let listing = std::process::Command::new("losetup")
        .arg("-a")
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(
        !listing.contains(&*mnt.parent().unwrap().to_string_lossy()),
        "{dev}: {listing}"
    );
}
