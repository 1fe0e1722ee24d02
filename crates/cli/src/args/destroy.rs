//! `agentbox destroy`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct DestroyArgs {
    /// [BOX] (a box, or a versioned directory's environment).
    pub args: Vec<String>,
    /// Also delete the box's branches (`agentbox/BOX…`) from the host repositories.
    #[arg(long)]
    pub delete_branch: bool,
}
