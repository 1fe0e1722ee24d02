//! `agentbox list`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Every box, not only the current project's.
    #[arg(short, long)]
    pub all: bool,
}
