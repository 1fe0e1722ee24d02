//! `agentbox log`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct LogArgs {
    pub args: Vec<String>,
    /// Only HEAD's ancestors, newest first (instead of the whole tree).
    #[arg(long)]
    pub ancestors: bool,
    /// Only the branch tips.
    #[arg(long, conflicts_with = "ancestors")]
    pub leaves: bool,
    /// Only HEAD and its ancestors, newest first, at most N of them (implies --ancestors).
    #[arg(
        short = 'n',
        long = "max-count",
        value_name = "N",
        conflicts_with = "leaves"
    )]
    pub max_count: Option<usize>,
}
