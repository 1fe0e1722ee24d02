//! `agentbox fork`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The box to fork (left out: the current project's only box, or -b BOX).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// The new box's name (default: BOX-fork-N, the first free N).
    #[arg(value_name = "NEW")]
    pub new: Option<String>,
    /// Fork at this node of BOX's history instead of its HEAD: HEAD~N, a tag, a node id or
    /// a unique id prefix (`agentbox log BOX` shows them).
    #[arg(long, value_name = "REF")]
    pub at: Option<String>,
}
