//! `agentbox attach`: its arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// [BOX] [SESSION]: one word is the box when it names one, else a session of the
    /// current project's only box (or of -b BOX); no session: the box's only one.
    #[arg(num_args = 0..=2, value_names = ["BOX", "SESSION"])]
    pub args: Vec<String>,
    /// The keys that detach, as session.detachKey takes them (e.g. "ctrl-]", "ctrl-a d",
    /// "none").
    #[arg(long, value_name = "KEYS")]
    pub detach_key: Option<String>,
    /// Do not replay the session's scrollback before its screen.
    #[arg(long)]
    pub no_history: bool,
}
