//! One-time host setup helpers: giving a store a btrfs filesystem when the host has none.
//!
//! Nothing here edits system configuration: the report says what was done, how to undo it
//! and which `/etc/fstab` line would make it permanent.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use crate::{Error, Result};

/// Smallest image `mkfs.btrfs` accepts comfortably (it needs ~110 MiB with default
/// profiles).
pub const MIN_BTRFS_IMAGE: u64 = 128 << 20;

/// What [`setup_loop_btrfs`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetupReport {
    pub image: PathBuf,
    pub mountpoint: PathBuf,
    pub size_bytes: u64,
    /// The loop device backing the mount, when it could be determined.
    pub loop_device: Option<String>,
    /// Shell commands equivalent to what was done, in order.
    pub done: Vec<String>,
    /// Shell commands that undo it, in order.
    pub undo: Vec<String>,
    /// A line for `/etc/fstab` that mounts the image at boot (not written anywhere).
    pub fstab_line: String,
}

/// Quote `s` for a POSIX shell when needed.
fn sh_quote(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c));
    if safe {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Escape a path for an fstab field (space, tab, newline and backslash as octal).
fn fstab_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            ' ' => out.push_str(r"\040"),
            '\t' => out.push_str(r"\011"),
            '\n' => out.push_str(r"\012"),
            '\\' => out.push_str(r"\134"),
            c => out.push(c),
        }
    }
    out
}

fn run(cmd: &mut Command, what: &Path) -> Result<String> {
    let out = cmd.output().map_err(|e| Error::Backend {
        path: what.to_owned(),
        message: format!("cannot run {:?}: {e}", cmd.get_program()),
    })?;
    if !out.status.success() {
        return Err(Error::Backend {
            path: what.to_owned(),
            message: format!(
                "{cmd:?} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn have(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/sbin", "/usr/sbin"].map(PathBuf::from))
        .any(|dir| dir.join(program).is_file())
}

/// Create a sparse `size_bytes` image file at `image`, format it as btrfs and mount it (as a
/// loop device) at `mountpoint`, creating the mount point directory if needed.
///
/// Needs root. Refuses when `image` already exists or `mountpoint` is already a mount point
/// or a non-empty directory. On failure, whatever was done is undone. `/etc/fstab` is never
/// edited: the report carries a suggested line.
pub fn setup_loop_btrfs(image: &Path, size_bytes: u64, mountpoint: &Path) -> Result<SetupReport> {
    if !rustix::process::geteuid().is_root() {
        return Err(Error::NeedsRoot {
            operation: "setting up a btrfs loop filesystem".to_owned(),
            reason: "formatting an image and mounting it need root; rerun with sudo".to_owned(),
        });
    }
    if size_bytes < MIN_BTRFS_IMAGE {
        return Err(Error::Backend {
            path: image.to_owned(),
            message: format!(
                "image size {size_bytes} bytes is too small for btrfs (minimum {MIN_BTRFS_IMAGE})"
            ),
        });
    }
    if fs_err::symlink_metadata(image).is_ok() {
        return Err(Error::Backend {
            path: image.to_owned(),
            message: "already exists; refusing to overwrite it".to_owned(),
        });
    }
    for program in ["mkfs.btrfs", "mount", "losetup"] {
        if !have(program) {
            return Err(Error::Backend {
                path: image.to_owned(),
                message: format!("{program} is not installed (install btrfs-progs / util-linux)"),
            });
        }
    }
    let mp_existed = match fs_err::symlink_metadata(mountpoint) {
        Ok(md) if md.is_dir() => true,
        Ok(_) => {
            return Err(Error::Backend {
                path: mountpoint.to_owned(),
                message: "exists and is not a directory".to_owned(),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e.into()),
    };
    if mp_existed {
        let canonical = fs_err::canonicalize(mountpoint)?;
        if crate::mounts::is_mountpoint(&canonical) {
            return Err(Error::Backend {
                path: mountpoint.to_owned(),
                message: "is already a mount point".to_owned(),
            });
        }
        if fs_err::read_dir(mountpoint)?.next().is_some() {
            return Err(Error::Backend {
                path: mountpoint.to_owned(),
                message: "is not empty; mounting over it would hide its files".to_owned(),
            });
        }
    }

    let img_s = image.to_string_lossy().into_owned();
    let mp_s = mountpoint.to_string_lossy().into_owned();
    let mut done = Vec::new();
    let mut undo = Vec::new();

    let result = (|| -> Result<Option<String>> {
        if let Some(parent) = image.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs_err::create_dir_all(parent)?;
        }
        // 0600: the image holds every box's files, readable to no other user (and hidden
        // from every box).
        use fs_err::os::unix::fs::OpenOptionsExt;
        let file = fs_err::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(image)?;
        file.set_len(size_bytes)?;
        file.sync_all()?;
        drop(file);
        done.push(format!("truncate -s {size_bytes} {}", sh_quote(&img_s)));
        undo.push(format!("rm {}", sh_quote(&img_s)));

        run(Command::new("mkfs.btrfs").arg("-q").arg(image), image)?;
        done.push(format!("mkfs.btrfs -q {}", sh_quote(&img_s)));

        if !mp_existed {
            fs_err::create_dir_all(mountpoint)?;
            done.push(format!("mkdir -p {}", sh_quote(&mp_s)));
            undo.push(format!("rmdir {}", sh_quote(&mp_s)));
        }

        run(
            Command::new("mount")
                .args(["-t", "btrfs", "-o", "loop"])
                .arg(image)
                .arg(mountpoint),
            mountpoint,
        )?;
        done.push(format!(
            "mount -t btrfs -o loop {} {}",
            sh_quote(&img_s),
            sh_quote(&mp_s)
        ));
        // `mount -o loop` sets up an auto-clearing loop device: unmounting frees it.
        undo.push(format!("umount {}", sh_quote(&mp_s)));
        use std::os::unix::fs::PermissionsExt;
        fs_err::set_permissions(mountpoint, std::fs::Permissions::from_mode(0o700))?;

        let listing = run(Command::new("losetup").arg("-j").arg(image), image).unwrap_or_default();
        Ok(listing
            .lines()
            .next()
            .and_then(|l| l.split(':').next())
            .map(str::to_owned))
    })();

    match result {
        Ok(loop_device) => {
            // Undo runs in reverse order of doing.
            undo.reverse();
            Ok(SetupReport {
                image: image.to_owned(),
                mountpoint: mountpoint.to_owned(),
                size_bytes,
                loop_device,
                done,
                undo,
                fstab_line: format!(
                    "{} {} btrfs loop,noatime 0 0",
                    fstab_escape(&img_s),
                    fstab_escape(&mp_s)
                ),
            })
        }
        Err(e) => {
            // Roll back: nothing was mounted (mount is the last step that can fail).
            if !mp_existed {
                let _ = fs_err::remove_dir(mountpoint);
            }
            if !done.is_empty() {
                let _ = fs_err::remove_file(image);
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("/var/lib/a.img"), "/var/lib/a.img");
        assert_eq!(sh_quote("/a b/it's"), r"'/a b/it'\''s'");
        assert_eq!(fstab_escape("/a b"), r"/a\040b");
    }
}
