//! Setting up a btrfs loop filesystem for a store (root only).

#![allow(clippy::unwrap_used)]

use std::process::Command;

use agentbox_store::setup::setup_loop_btrfs;
use agentbox_store::Error;

/// Lazily unmounts on drop so a failing test leaves nothing mounted.
struct Unmount(std::path::PathBuf);
impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

#[test]
fn setup_loop_btrfs_mounts_and_undoes() {
    if !agentbox_testkit::tier::require_root("setup_loop_btrfs_mounts_and_undoes") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("img dir/store.img");
    let mp = tmp.path().join("mnt");
    let _guard = Unmount(mp.clone());
    let report = setup_loop_btrfs(&image, 256 << 20, &mp).unwrap();
    assert!(agentbox_sys::btrfs::is_btrfs(&mp).unwrap());
    assert_eq!(std::fs::metadata(&image).unwrap().len(), 256 << 20);
    assert!(
        report.fstab_line.contains(r"img\040dir/store.img"),
        "{report:?}"
    );
    assert!(report.fstab_line.contains(" btrfs loop"), "{report:?}");
    assert!(
        report
            .loop_device
            .as_deref()
            .unwrap_or("")
            .starts_with("/dev/loop"),
        "{report:?}"
    );

    // Refusals.
    let err = setup_loop_btrfs(&image, 256 << 20, &tmp.path().join("other")).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    let err = setup_loop_btrfs(&tmp.path().join("second.img"), 256 << 20, &mp).unwrap_err();
    assert!(err.to_string().contains("already a mount point"), "{err}");
    assert!(!tmp.path().join("second.img").exists());
    let err = setup_loop_btrfs(
        &tmp.path().join("small.img"),
        1 << 20,
        &tmp.path().join("m2"),
    )
    .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err}");

    // The undo commands undo everything.
    for cmd in &report.undo {
        let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
        assert!(st.success(), "{cmd}");
    }
    assert!(!image.exists());
    assert!(!mp.exists());
    let listing = Command::new("losetup").arg("-a").output().unwrap();
    assert!(!String::from_utf8_lossy(&listing.stdout).contains("store.img"));
}
