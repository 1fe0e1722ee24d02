//! The `agentbox` command.
//!
//! Data goes to stdout (a table or tree for humans, JSON with `--json`); progress and status
//! go to stderr. Errors print one line and a hint, and exit with the stable codes listed in
//! `errors`.

mod args;
mod boxcmds;
mod commands;
mod configcmd;
mod errors;
mod prune;
mod render;

use clap::Parser;

use crate::args::Cli;
use crate::errors::CliError;

fn main() {
    // Inside a box, agentbox is a thin client: the box's supervisor runs the command on the
    // host side, restricted to this box.
    if let Some(client) = agentbox_boxes::client::Client::inside_box() {
        let args = std::env::args().skip(1).collect();
        match client.forward_cli(args) {
            Ok(status) => std::process::exit(status),
            Err(e) => {
                eprintln!("agentbox: error: {e}");
                std::process::exit(1);
            }
        }
    }
    let cli = Cli::parse();
    let json = cli.json;
    match commands::run(cli) {
        Ok(()) => {}
        Err(e) => {
            if json {
                let v = serde_json::json!({
                    "error": e.message,
                    "hint": e.hint,
                    "code": e.code,
                });
                println!("{v}");
            }
            eprintln!("agentbox: error: {}", e.message);
            if let Some(h) = &e.hint {
                eprintln!("  hint: {h}");
            }
            std::process::exit(e.code);
        }
    }
}

/// Result of a command.
pub type CliResult<T = ()> = Result<T, CliError>;
