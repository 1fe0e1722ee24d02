//! `agentbox push`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct PushArgs {
    /// BOX (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// The remote of each host repository (default: the one its source branch tracks,
    /// else `origin`).
    #[arg(long, value_name = "REMOTE")]
    pub remote: Option<String>,
    /// Overwrite the remote branch even when the push is not a fast-forward.
    #[arg(long)]
    pub force: bool,
    /// Only this repository: `.` for the project root, or a sub-repository's directory
    /// name (repeatable; default: all).
    #[arg(long = "repo", value_name = "SUB")]
    pub repos: Vec<String>,
}
