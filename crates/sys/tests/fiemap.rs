//! Extent maps and sharing-aware disk usage.

#![allow(clippy::unwrap_used)]

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Command;

use agentbox_sys::{btrfs, fiemap};
use agentbox_testkit::loopfs::LoopFs;

const MIB: u64 = 1 << 20;

fn write_random(path: &Path, len: usize) {
    // Incompressible-ish, deterministic content.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut data = Vec::with_capacity(len);
    while data.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    data.truncate(len);
    let mut f = fs::File::create(path).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
}

fn near(actual: u64, expected: u64, slack: u64) -> bool {
    actual + slack >= expected && actual <= expected + slack
}

#[test]
fn extents_and_usage_on_tmp() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    write_random(&a, 4 * MIB as usize);
    let exts = fiemap::extents(&fs::File::open(&a).unwrap());
    let exts = match exts {
        Ok(e) => e,
        Err(e) if e.raw_os_error() == Some(95) => return, // tmpfs and co: no FIEMAP
        Err(e) => panic!("{e}"),
    };
    assert!(!exts.is_empty());
    assert_eq!(exts.iter().map(|e| e.length).sum::<u64>(), 4 * MIB);
    assert!(exts.last().unwrap().flags & fiemap::FIEMAP_EXTENT_LAST != 0);

    // A hard link and an empty file add no data; a plain copy doubles it.
    fs::hard_link(&a, dir.path().join("link")).unwrap();
    fs::write(dir.path().join("empty"), b"").unwrap();
    std::os::unix::fs::symlink("a", dir.path().join("sym")).unwrap();
    let u = fiemap::disk_usage(&[dir.path()]).unwrap();
    assert_eq!(u.logical_bytes, 4 * MIB);
    assert_eq!(u.files, 4); // dir, a (once), empty, sym
    assert!(near(u.physical_bytes, 4 * MIB, 64 * 1024), "{u:?}");

    fs::copy(&a, dir.path().join("copy")).unwrap();
    let u = fiemap::disk_usage(&[dir.path()]).unwrap();
    assert_eq!(u.logical_bytes, 8 * MIB);
    assert!(u.physical_bytes >= 8 * MIB, "{u:?}");

    // Walking the same tree twice counts it once.
    let twice = fiemap::disk_usage(&[dir.path(), dir.path()]).unwrap();
    assert_eq!(twice, u);

    let err = fiemap::disk_usage(&[&dir.path().join("missing")]).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn usage_on_ext4_loop() {
    if !agentbox_testkit::tier::require_root("usage_on_ext4_loop") {
        return;
    }
    let Some(fs) = LoopFs::ext4(64 * MIB) else {
        return;
    };
    let d = fs.path().join("d");
    fs::create_dir(&d).unwrap();
    write_random(&d.join("a"), 4 * MIB as usize);
    // Unflushed data (delayed allocation) is flushed by FIEMAP_FLAG_SYNC and counted.
    fs::write(d.join("b"), vec![7u8; MIB as usize]).unwrap();
    let u = fiemap::disk_usage(&[&d]).unwrap();
    assert_eq!(u.logical_bytes, 5 * MIB);
    assert!(near(u.physical_bytes, 5 * MIB, 64 * 1024), "{u:?}");
}

#[test]
fn shared_extents_count_once_on_btrfs() {
    if !agentbox_testkit::tier::require_root("shared_extents_count_once_on_btrfs") {
        return;
    }
    let Some(fs) = LoopFs::btrfs(256 * MIB) else {
        return;
    };
    let root = fs.path();
    let sv = btrfs::create_subvolume(root, OsStr::new("sv")).unwrap();
    write_random(&sv.join("big"), 4 * MIB as usize);
    fs::write(sv.join("small"), b"inline data").unwrap();

    let one = fiemap::disk_usage(&[&sv]).unwrap();
    assert_eq!(one.logical_bytes, 4 * MIB + 11);
    assert!(near(one.physical_bytes, 4 * MIB, 64 * 1024), "{one:?}");

    let snap = btrfs::snapshot(&sv, root, OsStr::new("snap"), true).unwrap();
    let exts = fiemap::extents(&fs::File::open(snap.join("big")).unwrap()).unwrap();
    assert!(
        exts.iter()
            .all(|e| e.flags & fiemap::FIEMAP_EXTENT_SHARED != 0),
        "{exts:?}"
    );
    let both = fiemap::disk_usage(&[&sv, &snap]).unwrap();
    assert_eq!(both.logical_bytes, 2 * (4 * MIB + 11));
    assert!(near(both.physical_bytes, 4 * MIB, 64 * 1024), "{both:?}");

    // A reflink copy shares the extents too.
    let st = Command::new("cp")
        .arg("--reflink=always")
        .arg(sv.join("big"))
        .arg(sv.join("reflinked"))
        .status()
        .unwrap();
    assert!(st.success());
    let with_reflink = fiemap::disk_usage(&[&sv, &snap]).unwrap();
    assert!(
        near(with_reflink.physical_bytes, 4 * MIB, 64 * 1024),
        "{with_reflink:?}"
    );

    // Overwriting half of the file in the writable subvolume un-shares that half.
    {
        use std::os::unix::fs::FileExt;
        let f = fs::OpenOptions::new()
            .write(true)
            .open(sv.join("big"))
            .unwrap();
        f.write_all_at(&vec![1u8; 2 * MIB as usize], 0).unwrap();
        f.sync_all().unwrap();
    }
    let after = fiemap::disk_usage(&[&sv, &snap]).unwrap();
    assert!(near(after.physical_bytes, 6 * MIB, 64 * 1024), "{after:?}");
}
