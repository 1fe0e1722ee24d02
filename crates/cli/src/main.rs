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
    // Run by the host inside a box, before a sync: checks on the box's repository made where
    // only the box's files are reachable (see `agentbox_boxes::boxgit`).
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.len() == 5 && argv[1] == agentbox_boxes::boxgit::CHECK_COMMAND {
        let p = |i: usize| std::path::PathBuf::from(&argv[i]);
        match agentbox_boxes::boxgit::check_repo(&p(2), &argv[3].to_string_lossy(), &p(4)) {
            Ok(()) => std::process::exit(0),
            Err(why) => {
                println!("{why}");
                std::process::exit(3);
            }
        }
    }
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
            // Messages can quote box-controlled text (git's stderr, file names, refs).
            eprintln!("agentbox: error: {}", render::text(&e.message));
            if let Some(h) = &e.hint {
                eprintln!("  hint: {}", render::text(h));
            }
            std::process::exit(e.code);
        }
    }
}

/// Result of a command.
pub type CliResult<T = ()> = Result<T, CliError>;
