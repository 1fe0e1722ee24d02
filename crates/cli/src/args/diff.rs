//! `agentbox diff`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct DiffArgs {
    pub args: Vec<String>,
    /// Show the content differences of changed files (unified diffs; binary and files over
    /// 1 MiB are named only).
    #[arg(short, long)]
    pub patch: bool,
}
