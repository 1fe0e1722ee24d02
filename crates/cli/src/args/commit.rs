//! `agentbox commit`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct CommitArgs {
    /// [ENV]
    pub args: Vec<String>,
    /// Message of the new node (taken verbatim, even when it starts with '-').
    #[arg(short, long, allow_hyphen_values = true)]
    pub message: String,
    /// Command label recorded with the node.
    #[arg(long)]
    pub command: Option<String>,
}
