//! `agentbox start`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct StartArgs {
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// Relaunch the box's last agent (`last_agent`) in a detached session.
    #[arg(long)]
    pub resume: bool,
}
