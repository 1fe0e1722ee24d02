//! `agentbox setup`: its arguments.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct SetupArgs {
    /// Create a btrfs filesystem of this size (e.g. 20G) in a file and mount it for the store.
    #[arg(long, value_name = "SIZE")]
    pub btrfs: String,
    /// Image file (default: /var/lib/agentbox/btrfs.img).
    #[arg(long)]
    pub image: Option<PathBuf>,
}
