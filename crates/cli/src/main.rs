//! The `agentbox` command.
//!
//! Data goes to stdout (a table or tree for humans, JSON with `--json`); progress and status
//! go to stderr. Errors print one line and a hint, and exit with the stable codes listed in
//! `errors`.

mod api_token;
mod args;
mod commands;
mod compose;
mod docker_bridge;
mod errors;
mod http_serve;
mod mcp;
mod relay;
mod remote_helper;
mod render;
mod serve;

use clap::Parser;

use crate::args::Cli;

fn main() {
    // Run by the host inside a box, before a sync: checks on the box's repository made where
    // only the box's files are reachable (see `agentbox_provider_local::boxgit`).
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // git's remote helper for a box repository's remotes, inside a box.
    if argv.first().is_some_and(|a| remote_helper::is_helper(a)) {
        std::process::exit(remote_helper::main());
    }
    if argv.len() == 5 && argv[1] == agentbox_provider_local::boxgit::CHECK_COMMAND {
        let p = |i: usize| std::path::PathBuf::from(&argv[i]);
        match agentbox_provider_local::boxgit::check_repo(&p(2), &argv[3].to_string_lossy(), &p(4))
        {
            Ok(()) => std::process::exit(0),
            Err(why) => {
                println!("{why}");
                std::process::exit(3);
            }
        }
    }
    // Run by the host inside a box before an agent starts (see `agentbox_boxes::agents::sync`).
    if argv.len() == 3 && argv[1] == agentbox_boxes::agents::sync::COMMAND {
        let plan =
            serde_json::from_str(&argv[2].to_string_lossy()).map_err(|e| format!("bad plan: {e}"));
        match plan.and_then(|p| agentbox_boxes::agents::sync::inbox::run(&p)) {
            Ok(done) => {
                println!(
                    "{}{}",
                    agentbox_boxes::agents::launch::SYNCED_LINE,
                    serde_json::to_string(&done).unwrap_or_else(|_| "{}".into())
                );
                std::process::exit(0)
            }
            Err(why) => {
                println!("{why}");
                std::process::exit(3);
            }
        }
    }
    // Run by a box's supervisor to bind its credential broker's port inside the box's
    // network namespace: entering it needs a process with a single thread (see
    // `agentbox_provider_local::netns`).
    if argv.len() >= 2 && argv[1] == agentbox_provider_local::netns::LISTEN_COMMAND {
        std::process::exit(agentbox_provider_local::netns::listen_main(&argv[2..]));
    }
    // Run by the host inside a box made from a checkpoint (see `agentbox_boxes::lifecycle::reseed`).
    if argv.len() == 3 && argv[1] == agentbox_boxes::lifecycle::reseed::COMMAND {
        match agentbox_boxes::lifecycle::reseed::inside(std::path::Path::new(&argv[2])) {
            Ok(conflicts) => {
                println!(
                    "{}{}",
                    agentbox_boxes::lifecycle::reseed::CONFLICTS_LINE,
                    serde_json::to_string(&conflicts).unwrap_or_else(|_| "[]".into())
                );
                std::process::exit(0)
            }
            Err(why) => {
                println!("{why}");
                std::process::exit(3);
            }
        }
    }
    // Run by a Docker box's relay inside its container: the box's relay socket, bridged to
    // the host over the exec's stdin and stdout (see `docker_bridge`). Before the in-box
    // client: the bridge runs in a box too.
    if argv.len() == 2 && argv[1] == agentbox_provider_docker::relay::host::BRIDGE_COMMAND {
        std::process::exit(docker_bridge::main());
    }
    // Inside a box, agentbox is a thin client: its command line becomes one typed request
    // the box's supervisor answers on the host, for this box only (see `relay`).
    if let Some(client) = agentbox_provider_local::client::Client::inside_box() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let checked = relay::check_options(&args).and_then(|()| {
            let cli = Cli::parse();
            if let args::Command::Mcp(a) = &cli.command {
                if a.http {
                    let e = errors::CliError::usage(
                        "mcp --http is not available inside a box",
                        "inside a box, run `agentbox mcp` (stdio): it acts on this box",
                    );
                    eprint!("{}", errors::report(&e, false).1);
                    std::process::exit(e.code);
                }
                // The MCP server sends what the relay allows as its requests (see `mcp`).
                if let Err(e) = mcp::serve(None) {
                    eprint!("{}", errors::report(&e, false).1);
                    std::process::exit(e.code);
                }
                std::process::exit(0);
            }
            let own = std::env::var("AGENTBOX_BOX").unwrap_or_default();
            relay::request_for(&cli, &own)
        });
        let status = match checked {
            Ok(call) => client.relay(call).unwrap_or_else(|e| {
                eprintln!("agentbox: error: {e}");
                1
            }),
            Err(e) => {
                eprint!("{}", errors::report(&e, false).1);
                e.code
            }
        };
        std::process::exit(status);
    }
    let cli = Cli::parse();
    let json = cli.json;
    match commands::dispatch(cli) {
        Ok(()) => {}
        Err(e) => {
            let (data, text) = errors::report(&e, json);
            if let Some(d) = data {
                print!("{d}");
            }
            eprint!("{text}");
            std::process::exit(e.code);
        }
    }
}
