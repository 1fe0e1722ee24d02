//! `agentbox fsck`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct FsckArgs {
    /// Repair what can be repaired.
    #[arg(long)]
    pub repair: bool,
}
