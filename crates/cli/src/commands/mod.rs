//! The commands, one file each (a group of subcommands, like `config …` or `checkpoint …`, is
//! one file; so are `mount`/`unmount`, and `claude`/`codex`/`opencode`/`agent`). Each takes
//! its arguments (`crate::args`), calls the façade through [`Ctx`] and renders the answer
//! (`crate::render`, [`Ctx::out`]). [`dispatch`] dispatches; `relayed` answers the in-box
//! `agentbox`'s requests as the host commands they stand for.
//!
//! Imports go one way: this file imports the commands; a command imports `ctx`, `in_box`
//! (what every command run in a box shares) and, where one command is a step of another,
//! that command (`undo` → `checkout`, `start --resume` → `agent`, an agent's launch →
//! `session`, `create`); none imports this file.

mod agent;
mod agents;
mod attach;
mod checkout;
mod checkpoint;
mod commit;
mod config;
mod cp;
mod create;
mod ctx;
mod delete;
mod destroy;
mod diff;
mod env;
mod exec;
mod export;
mod fork;
mod fsck;
mod gc;
mod image;
mod import;
mod in_box;
mod internal;
mod kill;
mod list;
mod log;
mod logs;
mod mount;
mod prune;
mod ps;
mod pull;
mod push;
mod relayed;
mod rename;
mod retain;
mod run;
mod session;
mod setup;
mod shell;
mod show;
mod spawn;
mod start;
mod status;
mod stop;
mod sync;
mod tag;
mod tournament;
mod trust;
mod undo;

use agentbox_core::Home;

use self::ctx::Ctx;
use crate::args::{Cli, Command};
use crate::errors::CliResult;

pub fn dispatch(cli: Cli) -> CliResult {
    if let Command::Mcp(a) = &cli.command {
        let home = cli.home.clone().map(Home::at);
        if a.http {
            let home = match home {
                Some(h) => h,
                None => Home::from_env()?,
            };
            return crate::mcp::http::serve(home, a.addr, crate::serve::hello::routes);
        }
        return crate::mcp::serve(home);
    }
    let home = match &cli.home {
        Some(h) => Home::at(h.clone()),
        None => Home::from_env()?,
    };
    let ctx = Ctx::new(home, cli.json, cli.env.clone());
    match cli.command {
        Command::Setup(a) => setup::setup(&ctx, a),
        Command::Env(a) => env::env(&ctx, a),
        Command::List(a) => list::list(&ctx, a.all),
        Command::Commit(a) => commit::commit(&ctx, a),
        Command::Checkout(a) => checkout::checkout(&ctx, &a.args, a.keep_processes),
        Command::Log(a) => log::log(&ctx, a),
        Command::Show(a) => show::show(&ctx, &a.args),
        Command::Diff(a) => diff::diff(&ctx, a),
        Command::Tag(a) => tag::tag(&ctx, a),
        Command::Delete(a) => delete::delete(&ctx, &a.args),
        Command::Retain(a) => retain::retain(&ctx, a),
        Command::Gc(a) => gc::gc(&ctx, a.dry_run),
        Command::Status(a) => status::status(&ctx, &a.args, a.usage),
        Command::Export(a) => export::export(&ctx, a),
        Command::Import(a) => import::import(&ctx, a),
        Command::Fsck(a) => fsck::fsck(&ctx, a),
        Command::Mount(a) => mount::mount(&ctx, &a.args, true),
        Command::Unmount(a) => mount::mount(&ctx, &a.args, false),
        Command::Destroy(a) => destroy::destroy(&ctx, &a.args, a.delete_branch),
        Command::Rename(a) => rename::rename(&ctx, &a.args),
        Command::Prune(a) => prune::prune(&ctx, a.dry_run, a.min_age, a.all),
        Command::Create(a) => create::create(&ctx, *a),
        Command::Exec(a) => exec::exec(&ctx, a),
        Command::Shell(a) => shell::shell(&ctx, a),
        Command::Run(a) => run::run(&ctx, a),
        Command::Image(a) => image::image(&ctx, a),
        Command::Checkpoint(a) => checkpoint::checkpoint(&ctx, a.cmd),
        Command::Claude(a) => agent::launch(&ctx, "claude", a),
        Command::Codex(a) => agent::launch(&ctx, "codex", a),
        Command::Opencode(a) => agent::launch(&ctx, "opencode", a),
        Command::Agent(a) => agent::launch(&ctx, &a.agent, a.launch),
        Command::Agents => agents::list(&ctx),
        Command::Spawn(a) => spawn::spawn(&ctx, a),
        Command::Ps(a) => ps::ps(&ctx, a.name.as_deref()),
        Command::Session(a) => session::session(&ctx, a),
        Command::Attach(a) => attach::attach(&ctx, a),
        Command::Sessions(a) => session::sessions(&ctx, a),
        Command::Logs(a) => logs::logs(&ctx, a),
        Command::Kill(a) => kill::kill(&ctx, a),
        Command::Start(a) => start::start(&ctx, a),
        Command::Stop(a) => stop::stop(&ctx, a.name.as_deref()),
        Command::Sync(a) => sync::sync(&ctx, a.name.as_deref()),
        Command::Undo(a) => undo::undo(&ctx, a),
        Command::Config(a) => config::run(&ctx, a),
        Command::Trust(a) => trust::trust(&ctx, a),
        Command::Push(a) => push::push(&ctx, a),
        Command::Pull(a) => pull::pull(&ctx, a),
        Command::Fork(a) => fork::fork(&ctx, a),
        Command::Cp(a) => cp::cp(&ctx, a),
        Command::Download(a) => cp::download(&ctx, a),
        Command::Tournament(a) => tournament::tournament(&ctx, a),
        Command::Mcp(_) => unreachable!("served above"),
        Command::Serve(a) => crate::serve::serve(
            ctx.home.clone(),
            a.addr,
            std::time::Duration::from_secs(a.timeout),
        ),
        Command::Supervise { name } => internal::supervise(ctx, &name),
        Command::DockerRelay { name } => internal::docker_relay(ctx, &name),
        Command::BoxInit => agentbox_sandbox::init::launcher_main(),
        Command::RemoveDiscarded { entry } => internal::remove_discarded(&ctx, &entry),
    }
}
