//! `agentbox run`: its arguments.

use clap::Args;

use super::common::CommandOpts;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// BOX (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// Relaunch the command after a checkout (rollback) of the box killed it.
    #[arg(long)]
    pub supervise: bool,
    #[command(flatten)]
    pub opts: CommandOpts,
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub argv: Vec<String>,
}
