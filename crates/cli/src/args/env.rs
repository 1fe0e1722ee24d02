//! `agentbox env`: its arguments.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct EnvArgs {
    /// The directory to version (created if missing).
    pub dir: PathBuf,
    /// Environment name (default: the directory's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Start from this instead of the directory's content: a directory, a rootfs tarball
    /// (.tar, .tar.gz, .tar.zst) or an http(s) URL of one.
    #[arg(long, value_name = "SRC")]
    pub from: Option<String>,
    /// Snapshot backend when the store is created (default: by the filesystem).
    #[arg(long)]
    pub backend: Option<String>,
    /// Message of the first node.
    #[arg(short, long)]
    pub message: Option<String>,
}
