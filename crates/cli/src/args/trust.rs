//! `agentbox trust`: its arguments.

use std::path::PathBuf;

use clap::Args;

/// `agentbox trust`.
#[derive(Debug, Args)]
pub struct TrustArgs {
    /// The project file, or its directory (default: the current project's agentbox.yaml).
    pub path: Option<PathBuf>,
    /// Forget the trust of the file instead: its defaults may only make boxes stricter.
    #[arg(long, conflicts_with = "list")]
    pub revoke: bool,
    /// List the trusted files, and whether each still has the content that was trusted.
    #[arg(long, conflicts_with = "path")]
    pub list: bool,
}
