//! The commands: `run` dispatches each to its function (one file per group: [`envs`],
//! [`history`], [`status`], and `crate::boxcmds` for boxes), after the in-box policy
//! ([`restrict_to_box`]) when the command came from inside a box. [`Ctx`] is what each gets.

use std::io::Write;
use std::path::{Path, PathBuf};

use agentbox_core::Home;
use agentbox_store::{BackendKind, CommitOpts, Source, Store};
use serde::Serialize;

use agentbox_boxes::proto::Workdir;
use agentbox_boxes::record::BoxRecord;
use agentbox_boxes::registry;
use agentbox_boxes::BoxError;

use crate::args::{BoxArg, Cli, Command};
use crate::boxcmds;
use crate::errors::CliError;
use crate::render;
use crate::CliResult;

mod ctx;
mod envs;
mod history;
mod status;

pub(crate) use self::ctx::Ctx;
use self::{envs::*, history::*, status::*};

/// For a command run on behalf of box `name` (from inside it): only the box's own history
/// commands, only on that box.
fn restrict_to_box(cli: &mut Cli, name: &str) -> CliResult {
    let refuse = |what: String| {
        CliError::new(
            4,
            what,
            Some("inside a box, agentbox can run: log, show, diff, status, commit, checkout, undo, tag, ps, push, pull — on this box only".into()),
        )
    };
    if cli.env.as_deref().is_some_and(|e| e != name) {
        return Err(refuse(format!(
            "this box is {name:?}; other boxes are not reachable from inside it"
        )));
    }
    cli.env = Some(name.to_owned());
    match &cli.command {
        Command::Log(_)
        | Command::Show(_)
        | Command::Diff(_)
        | Command::Status(_)
        | Command::Commit(_)
        | Command::Checkout(_)
        | Command::Tag(_) => Ok(()),
        Command::Undo(a) | Command::Ps(a) if a.name.as_deref().is_none_or(|n| n == name) => Ok(()),
        // Nothing of the box reaches the host's git command line: the host picks the
        // remote (the branch's, or `git.remote`) and the branch to pull.
        Command::Push(crate::args::PushArgs {
            remote: Some(_), ..
        })
        | Command::Pull(crate::args::PullArgs {
            remote: Some(_), ..
        }) => Err(CliError::usage(
            "--remote is not allowed inside a box".to_owned(),
            "the host pushes and pulls with the remote it configured (the branch's remote, or git.remote); run `agentbox push --remote …` on the host",
        )),
        Command::Pull(crate::args::PullArgs {
            branch: Some(_), ..
        }) => Err(CliError::usage(
            "--branch is not allowed inside a box".to_owned(),
            "inside a box, pull merges the upstream of the branch the box was made from; run `agentbox pull --branch …` on the host",
        )),
        // The relay for credentialed git: run here, on the host, with the user's
        // credentials, for this box's own branches.
        Command::Push(crate::args::PushArgs { name: n, .. })
        | Command::Pull(crate::args::PullArgs { name: n, .. })
            if n.as_deref().is_none_or(|n| n == name) =>
        {
            Ok(())
        }
        Command::Undo(BoxArg { name: Some(other) })
        | Command::Ps(BoxArg { name: Some(other) })
        | Command::Push(crate::args::PushArgs {
            name: Some(other), ..
        })
        | Command::Pull(crate::args::PullArgs {
            name: Some(other), ..
        }) => Err(refuse(format!(
            "this box is {name:?}; box {other:?} is not reachable from inside it"
        ))),
        _ => Err(refuse("that command is not available inside a box".into())),
    }
}

pub fn run(mut cli: Cli) -> CliResult {
    if let Ok(name) = std::env::var(agentbox_boxes::supervisor::INBOX_ENV) {
        restrict_to_box(&mut cli, &name)?;
    }
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
        Command::Diff(a) => diff(&ctx, &a.args),
        Command::Tag(a) => tag(&ctx, a),
        Command::Delete(a) => delete(&ctx, &a.args),
        Command::Retain(a) => retain(&ctx, a),
        Command::Gc => gc(&ctx),
        Command::Status(a) => status(&ctx, &a.args),
        Command::Export(a) => export(&ctx, a),
        Command::Import(a) => import(&ctx, a),
        Command::Fsck(a) => fsck(&ctx, a),
        Command::Mount(a) => mount(&ctx, &a.args, true),
        Command::Unmount(a) => mount(&ctx, &a.args, false),
        Command::Destroy(a) => destroy(&ctx, &a.args, a.delete_branch),
        Command::Rename(a) => boxcmds::rename(&ctx, &a.args),
        Command::Prune(a) => crate::prune::prune(&ctx, a.dry_run, a.min_age),
        Command::Create(a) => boxcmds::create(&ctx, a),
        Command::Exec(a) => boxcmds::exec(&ctx, a),
        Command::Shell(a) => boxcmds::shell(&ctx, a),
        Command::Run(a) => boxcmds::run(&ctx, a),
        Command::Image(a) => boxcmds::image(&ctx, a),
        Command::Spawn(a) => boxcmds::spawn(&ctx, a),
        Command::Ps(a) => boxcmds::ps(&ctx, a.name.as_deref()),
        Command::Logs(a) => boxcmds::logs(&ctx, a),
        Command::Kill(a) => boxcmds::kill(&ctx, a),
        Command::Start(a) => boxcmds::start(&ctx, a.name.as_deref()),
        Command::Stop(a) => boxcmds::stop(&ctx, a.name.as_deref()),
        Command::Sync(a) => boxcmds::sync(&ctx, a.name.as_deref()),
        Command::Undo(a) => {
            let name = ctx.resolve_box(a.name.as_deref())?.name;
            checkout(&ctx, &[name, "HEAD~1".to_owned()], false)
        }
        Command::Config(a) => crate::configcmd::run(&ctx, a),
        Command::Push(a) => boxcmds::push(&ctx, a),
        Command::Pull(a) => boxcmds::pull(&ctx, a),
        Command::Supervise { name } => Ok(agentbox_boxes::supervisor::run(ctx.home, &name)?),
        Command::BoxInit => agentbox_sandbox::init::launcher_main(),
    }
}
