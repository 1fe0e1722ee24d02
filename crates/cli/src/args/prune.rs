//! `agentbox prune`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Only say what would be removed.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Leave alone anything younger than this many seconds (a create running right now
    /// may own it).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub min_age: u64,
    /// Also remove the checkpoint images (`agentbox-ckpt-*` tags of this home) that no
    /// checkpoint and no box names.
    #[arg(long)]
    pub all: bool,
}
