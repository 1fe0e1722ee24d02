//! Commands that run boxes: create, exec, shell, spawn, ps, logs, kill, start, stop, undo.

use std::io::{Read, Seek, Write};
use std::time::Duration;

use agentbox_boxes::history::remote::RemoteResult;
use agentbox_boxes::lifecycle::create;
use agentbox_boxes::provider::Command;
use agentbox_boxes::records::record::{self, BoxDirs, BoxRecord};
use agentbox_boxes::types::ProcKind;
use serde::Serialize;

use crate::args::{
    BoxCommandArgs, CreateArgs, ExecArgs, ImageCmd, KillArgs, LogsArgs, PullArgs, PushArgs, RunArgs,
};
use crate::commands::Ctx;
use crate::errors::CliError;
use crate::render;
use crate::CliResult;

#[derive(Serialize)]
struct Created<'a> {
    #[serde(flatten)]
    record: &'a BoxRecord,
    head: String,
}

pub fn create(ctx: &Ctx, a: CreateArgs) -> CliResult {
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

#[derive(Serialize)]
struct ExecResult {
    status: i32,
    node: Option<String>,
    killed_by_checkout: bool,
    capture_error: Option<String>,
}

pub(crate) fn finish_exec(ctx: &Ctx, outcome: agentbox_boxes::types::ExecOutcome) -> CliResult {
    if let Some(n) = &outcome.node {
        ctx.note(format!("agentbox: recorded node {}", render::short(n)));
    }
    if outcome.killed_by_checkout {
        ctx.note("agentbox: the command was killed by a checkout of its box");
    }
    if let Some(why) = &outcome.killed_because {
        ctx.note(format!("agentbox: the command was killed: {why}"));
    }
    if let Some(e) = &outcome.capture_error {
        ctx.note(format!(
            "agentbox: warning: the command's changes were not recorded as a node: {e}\n  hint: they stay in the box; `agentbox status` shows auto-capture's state, `agentbox commit` records them"
        ));
    }
    if ctx.json {
        ctx.out(
            &ExecResult {
                status: outcome.status,
                node: outcome.node.clone(),
                killed_by_checkout: outcome.killed_by_checkout,
                capture_error: outcome.capture_error.clone(),
            },
            String::new,
        )?;
    }
    let _ = std::io::stdout().flush();
    // The command's own status is ours.
    std::process::exit(outcome.status)
}

/// Remember which agent was started in a box (`last_agent` of its record), so a later
/// session knows what to relaunch.
fn note_agent(ctx: &Ctx, rec: &BoxRecord, argv: &[String]) {
    let Some(agent) = argv.first().and_then(|c| agent_of(c)) else {
        return;
    };
    if rec.last_agent.as_deref() == Some(agent) {
        return;
    }
    if let Err(e) = agentbox_boxes::records::registry::update(&ctx.home, &rec.name, |r| {
        r.last_agent = Some(agent.to_owned())
    }) {
        ctx.note(format!("agentbox: could not record the agent: {e}"));
    }
}

/// The agent a command starts, if it is one agentbox knows.
fn agent_of(command: &str) -> Option<&'static str> {
    let base = command.rsplit('/').next().unwrap_or(command);
    ["claude", "codex", "opencode"]
        .into_iter()
        .find(|a| *a == base)
}

/// `[BOX] [--] CMD…` of a command: the box, and the command (required unless `usage` is
/// `None`); an agent it starts is remembered.
pub(crate) fn target(
    ctx: &Ctx,
    name: Option<String>,
    argv: Vec<String>,
    usage: Option<(&str, &str)>,
) -> CliResult<(BoxRecord, Vec<String>)> {
    let (rec, argv) = ctx.box_and_command(name, argv)?;
    if let (Some((what, how)), true) = (usage, argv.is_empty()) {
        return Err(CliError::usage(format!("{what} needs a command"), how));
    }
    note_agent(ctx, &rec, &argv);
    Ok((rec, argv))
}

pub fn exec(ctx: &Ctx, a: ExecArgs) -> CliResult {
    let (rec, argv) = target(
        ctx,
        a.name,
        a.argv,
        Some(("exec", "agentbox exec [BOX] [--] CMD [ARGS...]")),
    )?;
    let tty = if a.tty {
        Some(true)
    } else if a.no_tty || ctx.json {
        Some(false)
    } else {
        None
    };
    // With --json, stdout carries the JSON result alone, so that it parses as one
    // document: the command's own output goes to stderr while it runs (streamed, so a
    // huge output costs no memory; a script keeps it apart with `2>file`).
    let redirect = if ctx.json {
        Some(StdoutToStderr::start()?)
    } else {
        None
    };
    let outcome = ctx.boxes().exec(
        &rec.name,
        box_command(ctx, &rec, argv, &a.opts, ProcKind::Exec, !a.no_capture, tty),
    );
    drop(redirect);
    finish_exec(ctx, outcome?)
}

/// While alive, this process's standard output (descriptor 1) is its standard error; the
/// original is put back on drop. Used around a command whose output must not mix with a
/// JSON result on stdout.
struct StdoutToStderr {
    saved: std::os::fd::OwnedFd,
}

impl StdoutToStderr {
    fn start() -> CliResult<StdoutToStderr> {
        let _ = std::io::stdout().flush();
        // Close-on-exec: a supervisor this command starts must not inherit the caller's
        // stdout, or a reader waiting for its end (a script's `$(…)`) would wait forever.
        let saved =
            rustix::io::fcntl_dupfd_cloexec(std::io::stdout(), 3).map_err(std::io::Error::from)?;
        rustix::stdio::dup2_stdout(std::io::stderr()).map_err(std::io::Error::from)?;
        Ok(StdoutToStderr { saved })
    }
}

impl Drop for StdoutToStderr {
    fn drop(&mut self) {
        let _ = std::io::stdout().flush();
        // Nothing to report it to if this fails: stdout would stay on stderr, which is
        // still a valid stream.
        let _ = rustix::stdio::dup2_stdout(&self.saved);
    }
}

/// A command for box `rec` with the caller's options (`--env`, `-w`).
pub(crate) fn box_command(
    ctx: &Ctx,
    rec: &BoxRecord,
    argv: Vec<String>,
    opts: &crate::args::CommandOpts,
    kind: ProcKind,
    capture: bool,
    tty: Option<bool>,
) -> Command {
    Command {
        argv,
        env: agentbox_boxes::records::record::caller_env(&opts.vars),
        workdir: ctx.workdir(rec, opts.workdir.clone()),
        kind,
        capture,
        tty,
    }
}

pub fn run(ctx: &Ctx, a: RunArgs) -> CliResult {
    let (rec, argv) = target(
        ctx,
        a.name,
        a.argv,
        Some(("run", "agentbox run [BOX] [--supervise] [--] CMD [ARGS...]")),
    )?;
    let mut launches = 0u32;
    loop {
        launches += 1;
        let outcome = ctx.boxes().exec(
            &rec.name,
            box_command(ctx, &rec, argv.clone(), &a.opts, ProcKind::Exec, true, None),
        )?;
        if a.supervise && outcome.killed_by_checkout {
            ctx.note(format!(
                "agentbox: box {:?} was rolled back; relaunching {} (launch {})",
                rec.name,
                agentbox_boxes::types::render_command(&argv),
                launches + 1
            ));
            continue;
        }
        return finish_exec(ctx, outcome);
    }
}

pub fn shell(ctx: &Ctx, a: BoxCommandArgs) -> CliResult {
    let (rec, argv) = target(ctx, a.name, a.argv, None)?;
    let (argv, tty) = shell_command(argv);
    let outcome = ctx.boxes().exec(
        &rec.name,
        box_command(ctx, &rec, argv, &a.opts, ProcKind::Shell, true, Some(tty)),
    )?;
    finish_exec(ctx, outcome)
}

pub fn spawn(ctx: &Ctx, a: BoxCommandArgs) -> CliResult {
    let (rec, argv) = target(
        ctx,
        a.name,
        a.argv,
        Some(("spawn", "agentbox spawn [BOX] [--] CMD [ARGS...]")),
    )?;
    let name = rec.name.clone();
    let out = ctx.boxes().spawn(
        &name,
        box_command(
            ctx,
            &rec,
            argv,
            &a.opts,
            ProcKind::Spawn,
            false,
            Some(false),
        ),
    )?;
    let (id, pid) = (out.id, out.pid);
    ctx.out(&out, || {
        format!(
            "started process {id} (pid {pid} in the box)\nOutput: agentbox logs {name} {id} -f\n"
        )
    })
}

pub fn ps(ctx: &Ctx, reference: Option<&str>) -> CliResult {
    let name = &ctx.resolve_box(reference)?.name;
    // The running processes, then the recent exits (each with `exit`).
    let procs = ctx.boxes().processes(name)?;
    ctx.out(&procs, || render::procs(&procs))
}

/// `[BOX] ID`: the box and a process id.
fn box_and_id(ctx: &Ctx, args: &[String]) -> CliResult<(String, u64)> {
    let (reference, id) = match args {
        [id] => (None, id),
        [b, id] => (Some(b.as_str()), id),
        _ => unreachable!("clap takes one or two values"),
    };
    let id = id.parse::<u64>().map_err(|_| {
        CliError::usage(
            format!("{id:?} is not a process id"),
            "give the id `agentbox spawn` printed or `agentbox ps` shows",
        )
    })?;
    Ok((ctx.resolve_box(reference)?.name.into_string(), id))
}

pub fn logs(ctx: &Ctx, a: LogsArgs) -> CliResult {
    let (name, id) = box_and_id(ctx, &a.args)?;
    let a = ResolvedLogs {
        name,
        id,
        follow: a.follow,
    };
    let path = BoxDirs::new(&ctx.home, &a.name).log(a.id);
    let mut f = fs_err::File::open(&path).map_err(|_| {
        CliError::new(
            crate::errors::ExitCode::NotFound,
            format!("box {:?} has no log for process {}", a.name, a.id),
            Some(format!(
                "`agentbox ps {}` lists running processes; logs exist for spawned ones",
                a.name
            )),
        )
    })?;
    let mut out = std::io::stdout();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n > 0 {
            if out.write_all(&buf[..n]).is_err() {
                return Ok(());
            }
            continue;
        }
        let _ = out.flush();
        if !a.follow {
            return Ok(());
        }
        let alive = ctx
            .boxes()
            .processes(&a.name)?
            .iter()
            .any(|p| p.id == a.id && p.exit.is_none());
        if !alive {
            // One last read: it may have written just before it ended.
            let pos = f.stream_position()?;
            let _ = pos;
            let n = f.read(&mut buf)?;
            let _ = out.write_all(&buf[..n]);
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

struct ResolvedLogs {
    name: String,
    id: u64,
    follow: bool,
}

fn parse_signal(s: &str) -> CliResult<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return Ok(n);
    }
    let name = s.trim_start_matches("SIG").to_ascii_uppercase();
    Ok(match name.as_str() {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "TERM" => libc::SIGTERM,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "STOP" => libc::SIGSTOP,
        "CONT" => libc::SIGCONT,
        _ => {
            return Err(CliError::usage(
                format!("unknown signal {s:?}"),
                "use a number or one of HUP INT QUIT KILL TERM USR1 USR2 STOP CONT",
            ))
        }
    })
}

pub fn kill(ctx: &Ctx, a: KillArgs) -> CliResult {
    let signal = parse_signal(&a.signal)?;
    let (name, id) = box_and_id(ctx, &a.args)?;
    ctx.boxes().kill(&name, id, signal)?;
    ctx.out(
        &serde_json::json!({"signalled": id, "signal": signal}),
        || format!("sent signal {signal} to process {id}\n"),
    )
}

pub fn start(ctx: &Ctx, reference: Option<&str>) -> CliResult {
    let name = &ctx.resolve_box(reference)?.name;
    ctx.boxes().start(name)?;
    ctx.out(&serde_json::json!({"box": name, "running": true}), || {
        format!("box {name:?} is running\n")
    })
}

/// Bring every box branch into its host repository now (through the supervisor, which
/// serialises it with nodes).
fn sync_now(ctx: &Ctx, rec: &BoxRecord) -> CliResult<Vec<agentbox_boxes::types::SyncedRepo>> {
    Ok(ctx.boxes().sync(rec)?)
}

fn short_tip(tip: Option<&str>) -> String {
    match tip {
        Some(t) => t[..12.min(t.len())].to_owned(),
        None => "-".to_owned(),
    }
}

/// `sync --json`: `{"box": NAME, "repos": [{"sub": null|SUB, "repo": PATH, "branch": B,
/// "tip": SHA|null}, …]}`.
pub fn sync(ctx: &Ctx, reference: Option<&str>) -> CliResult {
    let rec = ctx.resolve_box(reference)?;
    let name = &rec.name;
    let repos = sync_now(ctx, &rec)?;
    ctx.out(&serde_json::json!({"box": name, "repos": repos}), || {
        let mut s = String::new();
        for r in &repos {
            match &r.tip {
                Some(t) => s.push_str(&format!(
                    "{} in {} is at {}\n",
                    r.branch,
                    r.repo.display(),
                    short_tip(Some(t))
                )),
                None => s.push_str(&format!(
                    "box {name:?} has no branch {} to sync into {}\n",
                    r.branch,
                    r.repo.display()
                )),
            }
        }
        s
    })
}

fn remote_table(results: &[RemoteResult]) -> String {
    let mut s = format!(
        "{:<12} {:<28} {:<10} {:<13} RESULT\n",
        "REPO", "BRANCH", "REMOTE", "COMMIT"
    );
    for r in results {
        s.push_str(&format!(
            "{:<12} {:<28} {:<10} {:<13} {}\n",
            render::text(r.sub.as_deref().unwrap_or(".")),
            r.branch,
            r.remote,
            short_tip(r.commit.as_deref()),
            r.outcome.as_str()
        ));
    }
    s
}

/// `push --json`: a list of `{"sub", "repo", "remote", "branch", "commit", "outcome"}`, one
/// per repository. Runs on the host only, as the user, with the user's git configuration
/// and credentials: the box is never involved beyond the sync of its branches.
pub fn push(ctx: &Ctx, a: PushArgs) -> CliResult {
    let rec = ctx.resolve_box(a.name.as_deref())?;
    let results = ctx
        .boxes()
        .push(&rec, a.remote.as_deref(), &a.repos, a.force, ctx)?;
    ctx.out(&results, || remote_table(&results))
}

/// Name the paths where a box made from a checkpoint kept the checkpoint's version over the
/// host's uncommitted work (`create`, and an agent's launch that made its box).
pub(crate) fn note_resync_conflicts(ctx: &Ctx, rec: &BoxRecord) {
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

/// `pull --json`: a list like `push`'s. A merge that conflicts leaves the box repository in
/// its conflicted state; the exit code is then 4.
pub fn pull(ctx: &Ctx, a: PullArgs) -> CliResult {
    let rec = ctx.resolve_box(a.name.as_deref())?;
    let results = ctx.boxes().pull(
        &rec,
        a.remote.as_deref(),
        a.branch.as_deref(),
        &a.repos,
        ctx,
    )?;
    for r in &results {
        if let Some(out) = &r.output {
            let inside =
                std::path::Path::new(record::WORKSPACE).join(r.sub.as_deref().unwrap_or(""));
            ctx.note(format!("{}: {}", inside.display(), render::text(out)));
        }
    }
    ctx.out(&results, || remote_table(&results))?;
    match agentbox_boxes::history::remote::pull_problem(&rec, &results) {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

pub fn stop(ctx: &Ctx, reference: Option<&str>) -> CliResult {
    let name = &ctx.resolve_box(reference)?.name;
    let was = ctx.boxes().stop(name)?;
    ctx.out(
        &serde_json::json!({"box": name, "was_running": was}),
        || {
            if was {
                format!("box {name:?} stopped\n")
            } else {
                format!("box {name:?} was not running\n")
            }
        },
    )
}

/// `rename [BOX] NAME`: set (or, with an empty NAME, clear) a box's display name.
pub fn rename(ctx: &Ctx, args: &[String]) -> CliResult {
    let (reference, display) = match args {
        [d] => (None, d.as_str()),
        [b, d] => (Some(b.as_str()), d.as_str()),
        _ => {
            return Err(CliError::usage(
                "rename takes [BOX] NAME",
                "agentbox rename BOX \"new name\" (an empty name clears it)",
            ))
        }
    };
    let rec = ctx.resolve_box(reference)?;
    let display = (!display.is_empty()).then_some(display);
    if let Some(d) = display {
        agentbox_boxes::records::registry::check_display_name(&ctx.home, &rec.name, d)?;
    }
    let rec = agentbox_boxes::records::registry::update(&ctx.home, &rec.name, |r| {
        r.display_name = display.map(str::to_owned)
    })?;
    ctx.out(&rec, || match &rec.display_name {
        Some(d) => format!("box {:?} is shown as {d:?}\n", rec.name),
        None => format!("box {:?} has no display name\n", rec.name),
    })
}

pub fn image(ctx: &Ctx, cmd: ImageCmd) -> CliResult {
    match cmd {
        ImageCmd::Import { name, source } => {
            let img = ctx.boxes().import_image(&name, &source, ctx)?;
            ctx.out(&img, || {
                format!(
                    "imported image {name:?}\nUse it: agentbox create --image {name} (inside a project, or with -C DIR)\n"
                )
            })
        }
        ImageCmd::List => {
            let list = ctx.boxes().images()?;
            ctx.out(&list, || {
                let mut s = format!("{:<20} {:<20} SOURCE\n", "NAME", "IMPORTED");
                for i in &list {
                    s.push_str(&format!(
                        "{:<20} {:<20} {}\n",
                        i.name,
                        render::time(&i.imported),
                        i.source
                    ));
                }
                s
            })
        }
        ImageCmd::Rm { name } => {
            ctx.boxes().remove_image(&name)?;
            ctx.out(&serde_json::json!({ "removed": name }), || {
                format!("removed image {name:?}\n")
            })
        }
    }
}

pub fn is_box(ctx: &Ctx, name: &str) -> bool {
    BoxDirs::new(&ctx.home, name).record().exists()
}

/// What `agentbox shell` runs, and whether on a terminal: `argv` (empty: the box's
/// shell), on a PTY only when the caller's stdin is a terminal. Without one the shell reads
/// the caller's own stdin and ends at its end: a PTY would keep the end of input from ever
/// reaching it, and an interactive shell ignores the SIGTERM that must end it.
fn shell_command(argv: Vec<String>) -> (Vec<String>, bool) {
    use std::io::IsTerminal;
    let tty = std::io::stdin().is_terminal();
    if !argv.is_empty() {
        return (argv, tty);
    }
    // bash when the base has it; `-l` would read the host's profile, so it is not used.
    let shell = if tty {
        "if command -v bash >/dev/null; then exec bash -i; else exec sh -i; fi"
    } else {
        "if command -v bash >/dev/null; then exec bash; else exec sh; fi"
    };
    (
        vec!["/bin/sh".to_owned(), "-c".to_owned(), shell.to_owned()],
        tty,
    )
}
