//! `agentbox logs`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// [BOX] ID: the process id as `agentbox spawn` and `ps` show it.
    #[arg(required = true, num_args = 1..=2, value_name = "[BOX] ID")]
    pub args: Vec<String>,
    /// Keep printing as the process writes, until it ends.
    #[arg(short, long)]
    pub follow: bool,
}
