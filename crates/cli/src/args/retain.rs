//! `agentbox retain`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct RetainArgs {
    pub args: Vec<String>,
    /// How many of the newest nodes to keep untouched.
    #[arg(long, default_value_t = 20)]
    pub keep: u64,
}
