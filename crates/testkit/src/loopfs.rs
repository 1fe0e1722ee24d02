//! Throwaway filesystems on loop devices, for tests that need btrfs (or a second ext4).
//!
//! Each [`LoopFs`] owns a sparse image in its own temporary directory, the loop device over
//! it and a private mount point; dropping it (also while a test panics) unmounts lazily,
//! detaches the loop device and removes the files. Tests running concurrently never share
//! anything.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::tier;

/// Filesystem to put on the loop device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsType {
    Btrfs,
    Ext4,
}

impl FsType {
    fn mkfs(self) -> &'static str {
        match self {
            FsType::Btrfs => "mkfs.btrfs",
            FsType::Ext4 => "mkfs.ext4",
        }
    }
}

/// A copy of a [`LoopFs`]'s image, not mounted (see [`LoopFs::crash_image`]); its files go
/// on drop.
#[derive(Debug)]
pub struct CrashImage(LoopFs);

/// A mounted loop-device filesystem, torn down on drop.
#[derive(Debug)]
pub struct LoopFs {
    fs: FsType,
    /// Holds the image and the mount point; removed last.
    dir: Option<tempfile::TempDir>,
    image: PathBuf,
    mountpoint: PathBuf,
    device: Option<String>,
    mounted: bool,
    /// Mount options (`-o`), if any.
    options: Option<&'static str>,
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{cmd:?}: cannot run: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "{cmd:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn have(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/sbin", "/usr/sbin"].map(PathBuf::from))
        .any(|dir| dir.join(program).is_file())
}

impl LoopFs {
    /// A fresh btrfs of `size` bytes (at least ~120 MiB; 256 MiB is a good default), or `None`
    /// (after printing why; a panic under `CI=true`) when not root or `mkfs.btrfs` is missing.
    pub fn btrfs(size: u64) -> Option<LoopFs> {
        LoopFs::new(FsType::Btrfs, size, "LoopFs::btrfs")
    }

    /// A fresh ext4 of `size` bytes, or `None` as for [`LoopFs::btrfs`].
    pub fn ext4(size: u64) -> Option<LoopFs> {
        LoopFs::new(FsType::Ext4, size, "LoopFs::ext4")
    }

    /// A fresh ext4 of `size` bytes that enforces project quotas (made with
    /// `-O quota,project`, mounted with `prjquota`), or `None` as for [`LoopFs::btrfs`].
    pub fn ext4_project_quotas(size: u64) -> Option<LoopFs> {
        LoopFs::new_with(
            FsType::Ext4,
            size,
            "LoopFs::ext4_project_quotas",
            &["-O", "quota,project"],
            Some("prjquota"),
        )
    }

    fn new(fs: FsType, size: u64, what: &str) -> Option<LoopFs> {
        LoopFs::new_with(fs, size, what, &[], None)
    }

    fn new_with(
        fs: FsType,
        size: u64,
        what: &str,
        mkfs_args: &[&str],
        options: Option<&'static str>,
    ) -> Option<LoopFs> {
        if !tier::require_root(what) {
            return None;
        }
        if !have(fs.mkfs()) && !tier::skip(what, &format!("{} is not installed", fs.mkfs())) {
            return None;
        }
        let mut this = LoopFs::unset(fs);
        this.options = options;
        let made = fs_err::File::create(&this.image)
            .and_then(|file| file.set_len(size))
            .map_err(|e| e.to_string())
            .and_then(|()| this.set_up(Some(mkfs_args)));
        if let Err(e) = made {
            // A mount with options the kernel was built without (ext4 quotas need
            // CONFIG_QFMT_V2) is a missing capability, not a broken test.
            if let Some(o) = options.filter(|_| this.device.is_some() && !this.mounted) {
                drop(this);
                tier::skip(
                    what,
                    &format!("this kernel cannot mount {fs:?} with {o} (see dmesg): {e}"),
                );
                return None;
            }
            // `this` is dropped here, undoing whatever was done.
            panic!("{what}: {e}");
        }
        Some(this)
    }

    /// Nothing made yet: a temporary directory for the image and the mount point.
    fn unset(fs: FsType) -> LoopFs {
        let base = std::env::var_os("AGENTBOX_TEST_TMP")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = tempfile::Builder::new()
            .prefix("agentbox-loopfs-")
            .tempdir_in(base)
            .expect("create a temporary directory for a loop filesystem");
        LoopFs {
            fs,
            image: dir.path().join("image"),
            mountpoint: dir.path().join("mnt"),
            dir: Some(dir),
            device: None,
            mounted: false,
            options: None,
        }
    }

    /// The device as a crash at this instant would leave it: a copy of the image, which
    /// holds every write the filesystem issued and that completed (the loop device writes
    /// through to the image's page cache), and nothing the filesystem holds only in memory.
    /// So what an `fsync` or a transaction commit made durable is in it, and what is only in
    /// a running transaction is not. It cannot show what a device that loses its volatile
    /// cache would lose besides. Mount it with [`LoopFs::mount_crashed`].
    pub fn crash_image(&self) -> CrashImage {
        let copy = LoopFs::unset(self.fs);
        fs_err::copy(&self.image, &copy.image).expect("copy the loop image");
        CrashImage(copy)
    }

    /// Mount a crash image: its filesystem replays its journal or log as after a reboot.
    /// Unmount the original first: btrfs does not mount two filesystems with one UUID.
    pub fn mount_crashed(image: CrashImage) -> LoopFs {
        let mut fs = image.0;
        if let Err(e) = fs.set_up(None) {
            panic!("LoopFs::mount_crashed: {e}");
        }
        fs
    }

    /// Remount with `options` (e.g. `commit=600`, so that no periodic transaction commit
    /// makes anything durable behind a test's back).
    pub fn remount(&self, options: &str) {
        if let Err(e) = run(Command::new("mount")
            .arg("-o")
            .arg(format!("remount,{options}"))
            .arg(&self.mountpoint))
        {
            panic!("LoopFs::remount: {e}");
        }
    }

    /// Attach the image to a loop device, make the filesystem when `mkfs` (with those extra
    /// arguments), and mount it.
    fn set_up(&mut self, mkfs: Option<&[&str]>) -> Result<(), String> {
        fs_err::create_dir(&self.mountpoint).map_err(|e| e.to_string())?;
        // `losetup --find` can race with another process taking the same free device.
        let mut last_err = String::new();
        for attempt in 0..10 {
            match run(Command::new("losetup")
                .args(["--find", "--show"])
                .arg(&self.image))
            {
                Ok(dev) => {
                    self.device = Some(dev);
                    break;
                }
                Err(e) => {
                    last_err = e;
                    std::thread::sleep(std::time::Duration::from_millis(50 * (attempt + 1)));
                }
            }
        }
        let Some(device) = self.device.clone() else {
            return Err(last_err);
        };
        if let Some(args) = mkfs {
            let mut mkfs = Command::new(self.fs.mkfs());
            mkfs.arg("-q");
            if self.fs == FsType::Ext4 {
                mkfs.arg("-F");
            }
            run(mkfs.args(args).arg(&device))?;
        }
        let mut mount = Command::new("mount");
        if let Some(o) = self.options {
            mount.args(["-o", o]);
        }
        run(mount.arg(&device).arg(&self.mountpoint))?;
        self.mounted = true;
        Ok(())
    }

    /// The mount point (the filesystem's root directory).
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// The loop device, e.g. `/dev/loop3`.
    pub fn device(&self) -> &str {
        self.device.as_deref().unwrap_or("")
    }

    /// Which filesystem this is.
    pub fn fs_type(&self) -> FsType {
        self.fs
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        // Errors are reported but never panic: drop may run while unwinding.
        if self.mounted {
            if let Err(e) = run(Command::new("umount").arg("-l").arg(&self.mountpoint)) {
                eprintln!("LoopFs: {e}");
                // Never recurse into a filesystem that is still mounted: leave the files.
                if let Some(dir) = self.dir.take() {
                    let _ = dir.keep();
                }
            }
        }
        if let Some(dev) = &self.device {
            if let Err(e) = run(Command::new("losetup").arg("-d").arg(dev)) {
                eprintln!("LoopFs: {e}");
            }
        }
        if let Some(dir) = self.dir.take() {
            let path = dir.path().to_owned();
            if let Err(e) = dir.close() {
                eprintln!("LoopFs: removing {}: {e}", path.display());
            }
        }
    }
}
