//! `agentbox kill`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct KillArgs {
    /// [BOX] ID: process id or PID inside the box.
    #[arg(required = true, num_args = 1..=2, value_name = "[BOX] ID")]
    pub args: Vec<String>,
    /// Signal number or name (default TERM).
    #[arg(short, long, default_value = "TERM")]
    pub signal: String,
}
