//! `agentbox status`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct StatusArgs {
    pub args: Vec<String>,
    /// Also count the box's (or environment's) nodes and branch tips and measure its disk:
    /// a walk of its whole history and data.
    #[arg(short, long)]
    pub usage: bool,
}
