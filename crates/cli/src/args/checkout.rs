//! `agentbox checkout`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct CheckoutArgs {
    pub args: Vec<String>,
    /// A running box: restore the tree under its running processes instead of killing
    /// them; the result is a new node holding REF's tree (for an agent rolling itself back).
    #[arg(long)]
    pub keep_processes: bool,
}
