//! Full-fidelity tree copy.
//!
//! placeholder replaced by the real fsops::copy on merge: this stand-in shells out to
//! `cp -a --reflink=auto` so the btrfs backend builds and runs before the real copy lands.

use std::path::Path;
use std::process::Command;

use crate::{Error, Result};

/// Options of [`copy_dir`].
#[derive(Debug, Clone, Default)]
pub struct CopyOpts {}

/// What [`copy_dir`] did.
#[derive(Debug, Clone, Default)]
pub struct CopyStats {}

/// Copy the tree at `src` onto the directory `dst` (created if missing), preserving
/// everything `cp -a` preserves.
pub fn copy_dir(src: &Path, dst: &Path, _opts: &CopyOpts) -> Result<CopyStats> {
    fs_err::create_dir_all(dst)?;
    let out = Command::new("cp")
        .arg("-a")
        .arg("--reflink=auto")
        .arg("--")
        .arg(src.join("."))
        .arg(dst)
        .output()
        .map_err(|e| Error::Backend {
            path: src.to_owned(),
            message: format!("cannot run cp: {e}"),
        })?;
    if !out.status.success() {
        return Err(Error::Backend {
            path: src.to_owned(),
            message: format!(
                "copy to {} failed: {}",
                dst.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(CopyStats::default())
}
