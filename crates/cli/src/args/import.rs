//! `agentbox import`: its arguments.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Bundle or rootfs tar: a file, an http(s) URL, or - for stdin.
    pub source: String,
    /// Directory of the new environment (required; where its files appear).
    #[arg(long)]
    pub dir: PathBuf,
    /// Name of the new environment (default: the directory's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Accept device nodes in the archive.
    #[arg(long)]
    pub allow_devices: bool,
    /// Keep setuid/setgid bits and file capabilities (security.capability) of imported
    /// files. Without it they are stripped, since a bundle may come from an untrusted box.
    /// (overlayfs attributes, trusted.overlay.* and user.overlay.*, and every other
    /// trusted.* or security.* attribute are never imported.)
    #[arg(long)]
    pub allow_setuid: bool,
    /// Stop the import once the archive expands past SIZE bytes of tar data (e.g. 64G,
    /// 512M); a guard against decompression bombs. Default: 64 times the bundle's
    /// compressed size, at least 256M.
    #[arg(long, value_name = "SIZE", env = "AGENTBOX_IMPORT_MAX_SIZE")]
    pub max_size: Option<String>,
}
