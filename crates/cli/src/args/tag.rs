//! `agentbox tag`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct TagArgs {
    pub args: Vec<String>,
    /// Delete the named tag.
    #[arg(short, long, value_name = "NAME")]
    pub delete: Option<String>,
}
