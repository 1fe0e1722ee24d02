//! `agentbox create`: a box of a project (the library does the work:
//! `agentbox_boxes::lifecycle::create`); its settings as the flags give them, the errors named by flag.

use agentbox_boxes::lifecycle::create;
use agentbox_boxes::records::record::BoxRecord;
use serde::Serialize;

use super::ctx::Ctx;
use crate::args::CreateArgs;
use crate::errors::{CliError, CliResult};
use crate::render;

#[derive(Serialize)]
struct Created<'a> {
    #[serde(flatten)]
    record: &'a BoxRecord,
    head: String,
}

pub(super) fn create(ctx: &Ctx, a: CreateArgs) -> CliResult {
    let spec = create::Spec {
        name: a.name.clone(),
        workspace: match (&a.from, a.empty) {
            (Some(d), _) => create::Workspace::From(d.clone()),
            (None, true) => create::Workspace::Empty,
            (None, false) => {
                create::Workspace::ProjectOf(agentbox_boxes::records::registry::current_dir()?)
            }
        },
        from_ref: a.from_branch.clone(),
        no_git: a.no_git,
        settings: create_settings(&a),
        checkpoint: a.checkpoint.clone(),
        no_checkpoint: a.no_checkpoint,
        resync: a.no_resync.then_some(false),
        // Asked below on a terminal; a script gets the warning and goes on.
        accept_stale: a.yes || !std::io::IsTerminal::is_terminal(&std::io::stdin()),
        provider: a.provider.clone(),
        engine: a.docker_host.clone(),
        dockerfile: a.dockerfile.clone(),
    };
    let made = match ctx.boxes().create(&spec, ctx) {
        Err(agentbox_boxes::BoxError::CheckpointStale { name }) => {
            eprint!(
                "agentbox: checkpoint {} was made on a base that has changed since (system packages or image); its installed files may not match. Create the box from it anyway? [y/N] ",
                render::text(&name)
            );
            let mut answer = String::new();
            let _ = std::io::stdin().read_line(&mut answer);
            if !matches!(answer.trim(), "y" | "Y" | "yes") {
                return Err(agentbox_boxes::BoxError::CheckpointStale { name }.into());
            }
            let spec = create::Spec {
                accept_stale: true,
                ..spec
            };
            ctx.boxes().create(&spec, ctx)
        }
        other => other,
    }
    .map_err(setting_error)?;
    note_seeded(ctx, &made.seeded);
    let rec = &made.record;
    if let Some(c) = &rec.checkpoint {
        ctx.note(format!("started from checkpoint {}", render::text(c)));
    }
    note_resync_conflicts(ctx, rec);
    ctx.out(
        &Created {
            record: rec,
            head: made.head.clone(),
        },
        || {
            format!(
                "box {:?} (#{}, id {}) created (node {}); its workspace is /workspace.\nRun something: agentbox exec {} -- ls\n",
                rec.name,
                rec.index,
                &rec.id[..8],
                render::short(&made.head),
                rec.name
            )
        },
    )
}

/// The settings `create`'s flags give.
fn create_settings(a: &CreateArgs) -> create::Settings {
    let either = |on: bool, off: bool| match (on, off) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    create::Settings {
        network: a.network.clone(),
        capture: either(a.capture, a.no_capture),
        broker: a.broker.then_some(true),
        env: a.vars.clone(),
        ignore: a.ignore.clone(),
        host_paths: a.host_paths.clone(),
        keep: a.keep,
        memory: a.memory.clone(),
        pids: a.pids,
        cpus: a.cpus,
        disk: a.disk.clone(),
        image: a.image.clone(),
        carry: either(a.carry, a.no_carry),
        with_env: either(a.with_env, a.no_with_env),
        publish: a.publish.clone(),
    }
}

/// A bad setting named as the user gave it: by its `create` flag.
fn setting_error(e: agentbox_boxes::BoxError) -> CliError {
    use agentbox_boxes::BoxError as B;
    match e {
        B::BadSetting { key, given, reason } => {
            let flag = match key.as_str() {
                "box.network" => "--network",
                "box.capture" => "--capture",
                "box.env" => "--env",
                "box.ignore" => "--ignore",
                "box.hostPaths" => "--host-path",
                "box.keep" => "--keep",
                "box.memory" => "--memory",
                "box.pids" => "--pids",
                "box.cpus" => "--cpus",
                "box.image" => "--image",
                "box.provider" => "--provider",
                "git.carry" => "--carry",
                "git.withEnv" => "--with-env",
                _ => "",
            };
            let message = match (flag, given.is_empty()) {
                ("", _) => reason,
                (f, true) => format!("{f}: {reason}"),
                (f, false) => format!("{f} {given}: {reason}"),
            };
            CliError::usage(message, "see `agentbox create --help`")
        }
        B::PublishNeedsPrivate => CliError::usage(
            "publishing ports (--publish) needs a private network",
            "add --network private (config box.network = private)",
        ),
        other => other.into(),
    }
}

/// One line per box repository: its branch, base and what was carried over.
fn note_seeded(ctx: &Ctx, repos: &[agentbox_boxes::lifecycle::seeding::SeededRepo]) {
    for r in repos {
        let seeded = &r.seeded;
        let at = match &r.record.sub {
            None => String::new(),
            Some(s) => format!(" ({s}/)"),
        };
        ctx.note(format!(
            "box repository{at} on branch {} at {}{}",
            seeded.branch,
            &seeded.base[..12.min(seeded.base.len())],
            match (seeded.carried, seeded.untracked) {
                (false, 0) => String::new(),
                (false, n) => format!(
                    ", with {}",
                    render::count(n, "untracked file", "untracked files")
                ),
                (true, 0) => ", with uncommitted work (staged and unstaged)".to_owned(),
                (true, n) => format!(
                    ", with uncommitted work (staged and unstaged) and {}",
                    render::count(n, "untracked file", "untracked files")
                ),
            }
        ));
    }
}

/// Name the paths where a box made from a checkpoint kept the checkpoint's version over the
/// host's uncommitted work (`create`, and an agent's launch that made its box).
pub(super) fn note_resync_conflicts(ctx: &Ctx, rec: &BoxRecord) {
    if rec.resync_conflicts.is_empty() {
        return;
    }
    ctx.note(format!(
        "kept the checkpoint's version of {} your uncommitted work also changes (listed in the box at /run/agentbox/ctl/resync-conflicts; `agentbox status` shows them):",
        render::count(rec.resync_conflicts.len(), "path", "paths")
    ));
    for p in &rec.resync_conflicts {
        ctx.note(format!("  {}", render::text(p)));
    }
}
