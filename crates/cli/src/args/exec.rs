//! `agentbox exec`: its arguments.

use clap::Args;

use super::common::CommandOpts;

#[derive(Debug, Args)]
#[command(
    after_help = "With --json, stdout holds only the JSON result (exit status, node made), so it parses as one document; the command's own output, stdout and stderr, goes to stderr as it runs (`2>out.txt` keeps it)."
)]
pub struct ExecArgs {
    /// BOX (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    #[command(flatten)]
    pub opts: CommandOpts,
    /// Do not record a node for this command.
    #[arg(long)]
    pub no_capture: bool,
    /// Allocate a terminal even when stdin is not one (-t) or never (-T).
    #[arg(short = 't', long, conflicts_with = "no_tty")]
    pub tty: bool,
    #[arg(short = 'T', long)]
    pub no_tty: bool,
    /// The command and its arguments, passed exactly.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub argv: Vec<String>,
}
