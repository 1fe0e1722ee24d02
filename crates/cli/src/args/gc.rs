//! `agentbox gc`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Show what would be removed (nodes, layers, disk space), removing nothing.
    #[arg(long)]
    pub dry_run: bool,
}
