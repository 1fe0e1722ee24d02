//! The commands: `run` dispatches each to its function (one file per group: [`envs`],
//! [`history`], [`status`], and `crate::boxcmds` for boxes), after the in-box policy
//! ([`answer`] serves the in-box `agentbox`'s requests, see [`crate::relay`]). [`Ctx`] is what each gets.

use std::io::Write;
use std::path::{Path, PathBuf};

use agentbox_core::Home;
use agentbox_store::{BackendKind, CommitOpts};
use serde::Serialize;

use agentbox_boxes::records::record::BoxRecord;
use agentbox_boxes::records::registry;
use agentbox_boxes::types::Workdir;
use agentbox_boxes::BoxError;

use crate::args::{Cli, Command};
use crate::boxcmds;
use crate::errors::CliError;
use crate::render;
use crate::CliResult;

mod agents;
mod checkpoints;
mod ctx;
mod envs;
mod history;
mod progress;
mod status;
mod trust;

pub(crate) use self::ctx::Ctx;
use self::{envs::*, history::*, status::*};

/// Answer a request of the in-box `agentbox` (see [`crate::relay`]) as the host command it
/// stands for, on the box `ctx` is for.
pub(crate) fn answer(ctx: &Ctx, request: agentbox_boxes::relay::RelayRequest) -> CliResult {
    use agentbox_boxes::relay::RelayRequest as R;
    let name = ctx
        .env
        .clone()
        .expect("a relayed request's context names its box");
    let args = |v: Vec<Option<String>>| v.into_iter().flatten().collect::<Vec<_>>();
    match request {
        R::Log { ancestors, leaves } => log(
            ctx,
            crate::args::LogArgs {
                args: Vec::new(),
                ancestors,
                leaves,
                max_count: None,
            },
        ),
        R::Show { reference } => show(ctx, &args(vec![reference])),
        R::Diff { from, to, patch } => diff(
            ctx,
            crate::args::DiffArgs {
                args: args(vec![from, to]),
                patch,
            },
        ),
        R::Status { usage } => status(ctx, &[name], usage),
        R::Commit { message, command } => commit(
            ctx,
            crate::args::CommitArgs {
                args: Vec::new(),
                message,
                command,
            },
        ),
        R::Checkout {
            reference,
            keep_processes,
        } => checkout(ctx, &[reference], keep_processes),
        R::Undo => checkout(ctx, &["HEAD~1".to_owned()], false),
        R::Tags => tag(
            ctx,
            crate::args::TagArgs {
                args: Vec::new(),
                delete: None,
            },
        ),
        R::Tag { name, reference } => tag(
            ctx,
            crate::args::TagArgs {
                args: args(vec![Some(name), reference]),
                delete: None,
            },
        ),
        R::Untag { name } => tag(
            ctx,
            crate::args::TagArgs {
                args: Vec::new(),
                delete: Some(name),
            },
        ),
        R::Ps => boxcmds::ps(ctx, Some(&name)),
        R::Push { force, repos } => boxcmds::push(
            ctx,
            crate::args::PushArgs {
                name: Some(name),
                remote: None,
                force,
                repos,
            },
        ),
        R::RemoteRefs { repo } => {
            let rec = ctx.resolve_box(Some(&name))?;
            let refs = ctx.boxes().remote_refs(&rec, &repo)?;
            ctx.out(&refs, String::new)
        }
        R::Checkpoint {
            name: checkpoint,
            set_default,
            merged,
            replace,
        } => checkpoints::checkpoint(
            ctx,
            Some(crate::args::CheckpointCmd::Create {
                name: Some(name),
                checkpoint,
                set_default,
                merged,
                replace,
            }),
        ),
        R::Pull { repos } => boxcmds::pull(
            ctx,
            crate::args::PullArgs {
                name: Some(name),
                remote: None,
                branch: None,
                repos,
            },
        ),
    }
}

pub fn run(cli: Cli) -> CliResult {
    let home = match &cli.home {
        Some(h) => Home::at(h.clone()),
        None => Home::from_env()?,
    };
    let ctx = Ctx::new(home, cli.json, cli.env.clone());
    match cli.command {
        Command::Setup(a) => setup(&ctx, a),
        Command::Env(a) => env(&ctx, a),
        Command::List(a) => list(&ctx, a.all),
        Command::Commit(a) => commit(&ctx, a),
        Command::Checkout(a) => checkout(&ctx, &a.args, a.keep_processes),
        Command::Log(a) => log(&ctx, a),
        Command::Show(a) => show(&ctx, &a.args),
        Command::Diff(a) => diff(&ctx, a),
        Command::Tag(a) => tag(&ctx, a),
        Command::Delete(a) => delete(&ctx, &a.args),
        Command::Retain(a) => retain(&ctx, a),
        Command::Gc(a) => gc(&ctx, a.dry_run),
        Command::Status(a) => status(&ctx, &a.args, a.usage),
        Command::Export(a) => export(&ctx, a),
        Command::Import(a) => import(&ctx, a),
        Command::Fsck(a) => fsck(&ctx, a),
        Command::Mount(a) => mount(&ctx, &a.args, true),
        Command::Unmount(a) => mount(&ctx, &a.args, false),
        Command::Destroy(a) => destroy(&ctx, &a.args, a.delete_branch),
        Command::Rename(a) => boxcmds::rename(&ctx, &a.args),
        Command::Prune(a) => crate::prune::prune(&ctx, a.dry_run, a.min_age),
        Command::Create(a) => boxcmds::create(&ctx, *a),
        Command::Exec(a) => boxcmds::exec(&ctx, a),
        Command::Shell(a) => boxcmds::shell(&ctx, a),
        Command::Run(a) => boxcmds::run(&ctx, a),
        Command::Image(a) => boxcmds::image(&ctx, a),
        Command::Checkpoint(a) => checkpoints::checkpoint(&ctx, a.cmd),
        Command::Claude(a) => agents::launch(&ctx, "claude", a),
        Command::Codex(a) => agents::launch(&ctx, "codex", a),
        Command::Opencode(a) => agents::launch(&ctx, "opencode", a),
        Command::Agent(a) => agents::launch(&ctx, &a.agent, a.launch),
        Command::Agents => agents::list(&ctx),
        Command::Spawn(a) => boxcmds::spawn(&ctx, a),
        Command::Ps(a) => boxcmds::ps(&ctx, a.name.as_deref()),
        Command::Session(a) => crate::sessioncmds::session(&ctx, a),
        Command::Attach(a) => crate::sessioncmds::attach(&ctx, a),
        Command::Sessions(a) => crate::sessioncmds::sessions(&ctx, a),
        Command::Logs(a) => boxcmds::logs(&ctx, a),
        Command::Kill(a) => boxcmds::kill(&ctx, a),
        Command::Start(a) => {
            let rec = ctx.resolve_box(a.name.as_deref())?;
            match (&rec.last_agent, a.resume) {
                (Some(agent), true) => agents::launch(
                    &ctx,
                    agent,
                    crate::args::AgentArgs {
                        name: Some(rec.name.to_string()),
                        new: false,
                        detach: true,
                        supervise: false,
                        prompt: None,
                        ask: false,
                        isolate_config: false,
                        args: Vec::new(),
                    },
                ),
                (last, _) => {
                    boxcmds::start(&ctx, Some(&rec.name))?;
                    if let (Some(agent), false) = (last, a.resume) {
                        ctx.note(format!(
                            "its last agent was {agent}: `agentbox start {} --resume` relaunches it (or `agentbox {agent} {}`)",
                            rec.name, rec.name
                        ));
                    }
                    Ok(())
                }
            }
        }
        Command::Stop(a) => boxcmds::stop(&ctx, a.name.as_deref()),
        Command::Sync(a) => boxcmds::sync(&ctx, a.name.as_deref()),
        Command::Undo(a) => {
            let name = ctx.resolve_box(a.name.as_deref())?.name;
            checkout(&ctx, &[name.into_string(), "HEAD~1".to_owned()], false)
        }
        Command::Config(a) => crate::configcmd::run(&ctx, a),
        Command::Trust(a) => trust::trust(&ctx, a),
        Command::Push(a) => boxcmds::push(&ctx, a),
        Command::Pull(a) => boxcmds::pull(&ctx, a),
        Command::Fork(a) => crate::forkcmds::fork(&ctx, a),
        Command::Tournament(a) => crate::forkcmds::tournament(&ctx, a),
        Command::Supervise { name } => {
            // Taken first: nothing the supervisor starts may inherit it.
            let startup = agentbox_sandbox::startup::take_pipe();
            let relay = std::sync::Arc::new(crate::relay::CliRelay {
                home: ctx.home.clone(),
            });
            let result = agentbox_provider_local::supervisor::run(ctx.home, &name, relay);
            if let (Err(e), Some(mut pipe)) = (&result, startup) {
                // Why it could not start, for the command that started it.
                let failure = agentbox_provider_local::client::StartFailure { error: e.into() };
                if let Ok(text) = serde_json::to_string(&failure) {
                    agentbox_sandbox::startup::report(&mut pipe, &text);
                }
            }
            Ok(result?)
        }
        Command::BoxInit => agentbox_sandbox::init::launcher_main(),
        Command::RemoveDiscarded { entry } => {
            // Its own session: the terminal `destroy` ran on may close before it is done.
            let _ = rustix::process::setsid();
            // Its starter waits for this line: the store lock is held (see
            // `Store::remove_discarded_then`).
            Ok(ctx.boxes().store()?.remove_discarded_then(&entry, || {
                use std::io::Write;
                let mut out = std::io::stdout();
                let _ = out.write_all(b"held\n").and_then(|()| out.flush());
            })?)
        }
    }
}
