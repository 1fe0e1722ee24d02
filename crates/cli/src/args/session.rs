//! `agentbox session` and `agentbox sessions`: its arguments.

use clap::{Args, Subcommand};

use super::common::CommandOpts;

#[derive(Debug, Subcommand)]
pub enum SessionCmd {
    /// Start a session: CMD on a terminal the box keeps until it exits, then attach to it
    /// (-d: do not): [BOX] [--name NAME] [-d] [--supervise] [--] CMD [ARGS...].
    Start(SessionStartArgs),
    /// List a box's sessions, as `agentbox sessions` does: [BOX] [--prune].
    #[command(visible_alias = "list")]
    Ls(SessionsArgs),
}

#[derive(Debug, Args)]
pub struct SessionStartArgs {
    /// BOX (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// The session's name, unique in the box (default: the command's name, with -2, -3 …
    /// when taken).
    #[arg(long = "name", value_name = "NAME")]
    pub session: Option<String>,
    /// Do not attach: start it and return.
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// Relaunch the command after a checkout (rollback) of the box killed it.
    #[arg(long)]
    pub supervise: bool,
    #[command(flatten)]
    pub opts: CommandOpts,
    /// The command and its arguments, passed exactly.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub argv: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// BOX (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// Remove the exited sessions no terminal is attached to.
    #[arg(long)]
    pub prune: bool,
}
