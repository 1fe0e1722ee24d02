//! `agentbox export`: its arguments.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct ExportArgs {
    pub args: Vec<String>,
    /// history (every node), snapshot (one node), rootfs (a plain tar for `docker import`).
    #[arg(long, default_value = "history")]
    pub kind: String,
    /// zstd, gzip or none.
    #[arg(long, default_value = "zstd")]
    pub compress: String,
    /// Output file, or - for stdout.
    #[arg(short, long)]
    pub output: PathBuf,
}
