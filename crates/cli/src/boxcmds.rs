//! Commands that run boxes: create, exec, shell, spawn, ps, logs, kill, start, stop, undo.

use std::io::{Read, Seek, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use agentbox_boxes::client::{self, Client};
use agentbox_boxes::proto::{ProcKind, Reply, Request};
use agentbox_boxes::record::{self, BoxDirs, BoxRecord};
use agentbox_sandbox::proto::Network;
use agentbox_store::{CommitOpts, Source, Store};
use chrono::Utc;
use serde::Serialize;

use crate::args::{
    BoxCommandArgs, CreateArgs, ExecArgs, ImageCmd, KillArgs, LogsArgs, PullArgs, PushArgs, RunArgs,
};
use crate::commands::Ctx;
use crate::errors::CliError;
use crate::render;
use crate::CliResult;

fn need_root(operation: &str) -> CliResult {
    if !rustix::process::geteuid().is_root() {
        return Err(CliError::new(
            6,
            format!("{operation} needs root in this version"),
            Some("boxes mount overlay filesystems and create namespaces; run it with sudo".into()),
        ));
    }
    Ok(())
}

fn connect(ctx: &Ctx, name: &str) -> CliResult<Client> {
    Ok(Client::connect(&ctx.home, name, true)?
        .expect("connect with start=true either connects or fails"))
}

/// The running supervisor of `name`; `None` when it is not running or `name` is not a box
/// (a versioned directory).
fn running(ctx: &Ctx, name: &str) -> CliResult<Option<Client>> {
    if !is_box(ctx, name) {
        return Ok(None);
    }
    Ok(Client::connect(&ctx.home, name, false)?)
}

#[derive(Serialize)]
struct Created<'a> {
    #[serde(flatten)]
    record: &'a BoxRecord,
    head: String,
}

pub fn create(ctx: &Ctx, a: CreateArgs) -> CliResult {
    if let Some(n) = &a.name {
        agentbox_boxes::registry::check_new_name(&ctx.home, n)?;
    }
    // Flags over the configuration (see `configcmd`).
    let o = crate::configcmd::effective_create_options(ctx, &a)?;
    let rootless = !rustix::process::geteuid().is_root();
    if rootless && o.image.is_some() {
        return Err(CliError::new(
            6,
            "a box on an image needs root in this version",
            Some(
                "run it with sudo, or create the box on the host's own tools (without --image)"
                    .into(),
            ),
        ));
    }
    let network = o.network;
    if network == Network::Private {
        // Checked again whenever the box starts; here, before anything is copied.
        let what = match &a.name {
            Some(n) => format!("box {n:?}"),
            None => "the new box".to_owned(),
        };
        agentbox_sandbox::net::preflight(&what, rootless)
            .map_err(agentbox_boxes::BoxError::from)?;
    }
    let limits = o.limits.clone();
    limits
        .validate()
        .map_err(|e| CliError::usage(e.to_string(), "see `agentbox create --help`"))?;
    if !limits.is_empty() {
        agentbox_boxes::cgroup::available().map_err(|e| {
            CliError::new(
                6,
                format!("resource limits cannot be enforced here: {e}"),
                Some(
                    "create the box without --memory/--pids/--cpus, or on a machine with cgroups"
                        .into(),
                ),
            )
        })?;
    }
    let source = match &a.from {
        Some(d) => {
            if !d.exists() {
                return Err(CliError::usage(
                    format!("{} does not exist", d.display()),
                    "--from takes the directory to copy into /workspace",
                ));
            }
            let d = fs_err::canonicalize(d)?;
            if !d.is_dir() {
                return Err(CliError::usage(
                    format!("{} is not a directory", d.display()),
                    "--from takes the directory to copy into /workspace",
                ));
            }
            Some(d)
        }
        None if a.empty => None,
        None => {
            let found =
                agentbox_boxes::project::find_root(&agentbox_boxes::project::current_dir()?);
            match &found {
                Some(p) => ctx.note(format!("making the box from project {}", p.display())),
                None => ctx.note(
                    "not inside a project: the box's /workspace starts empty (-C DIR makes it from a directory)",
                ),
            }
            found
        }
    };
    let store = Store::open_or_init(&ctx.home.store_dir(), None)?;
    if let Some(image) = &o.image {
        agentbox_boxes::images::get(&ctx.home, image)?;
    }
    let taken = |n: &str| BoxDirs::new(&ctx.home, n).record().exists() || store.env(n).is_ok();
    if let Some(n) = a.name.as_deref().filter(|n| taken(n)) {
        return Err(agentbox_boxes::BoxError::BoxExists { name: n.to_owned() }.into());
    }
    let index = agentbox_boxes::registry::allocate_index(&ctx.home, source.as_deref())?;
    let name = match a.name.clone() {
        Some(n) => n,
        None => agentbox_boxes::registry::default_name(&ctx.home, source.as_deref(), index),
    };
    let dirs = BoxDirs::new(&ctx.home, &name);
    // A port taken now would fail the box's first start: say so before copying anything.
    agentbox_sandbox::net::check_ports(&name, &o.publish)
        .map_err(agentbox_boxes::BoxError::from)?;
    // The first node: the box's root layer, holding the workspace copy.
    // Held until the box's environment exists: see `Store::hold`.
    let _staging = store.hold("create a box")?;
    let staged = agentbox_store::transfer::staging(&store, "box")?;
    // A staging directory the backend can adopt without a copy (a subvolume on btrfs).
    match store.backend().staging_dir_maker() {
        Some(make) => make(&staged).map_err(|e| CliError::from(agentbox_store::Error::Io(e)))?,
        None => fs_err::create_dir_all(&staged)?,
    }
    fs_err::set_permissions(&staged, std::fs::Permissions::from_mode(0o755))?;
    let ws = staged.join("workspace");
    let mut git_rec = Vec::new();
    let copied = ctx.busy("copying the workspace", || -> CliResult {
        if rootless {
            // Mount points for the host's directories, bound read-only into the box.
            agentbox_sandbox::init::host_skeleton(&staged)?;
        }
        match &source {
            Some(src) => {
                git_rec = agentbox_boxes::seeding::seed_workspace(
                    &ctx.home,
                    src,
                    &name,
                    &ws,
                    &seed_opts(&a, &o),
                    !a.no_git,
                )
                .map_err(git_error)?;
            }
            None => fs_err::create_dir(&ws)?,
        }
        Ok(())
    });
    if let Err(e) = copied {
        let _ = fs_err::remove_dir_all(&staged);
        return Err(e);
    }
    note_seeded(ctx, &git_rec);
    let message = match &source {
        Some(s) => format!("box created from {}", s.display()),
        None => "box created".to_owned(),
    };
    let state = store.create_env(&name, None, Source::Staged(staged), &message)?;
    let rec = BoxRecord {
        id: agentbox_core::id::new_id(),
        name: name.clone(),
        display_name: None,
        provider: record::LOCAL_PROVIDER.to_owned(),
        project: source.clone(),
        index,
        last_agent: None,
        created: Utc::now(),
        source,
        network,
        publish: o.publish.clone(),
        repos: git_rec.into_iter().map(|r| r.record).collect(),
        rootless,
        image: o.image,
        capture: o.capture,
        env: o.env,
        ignore: o.ignore,
        host_paths: o.host_paths,
        limits,
        keep: Some(o.keep),
    };
    fs_err::create_dir_all(&dirs.dir)?;
    if let Err(e) = record::write(&ctx.home, &rec) {
        let _ = store.remove_env(&name);
        let _ = fs_err::remove_dir_all(&dirs.dir);
        return Err(e.into());
    }
    ctx.out(
        &Created {
            record: &rec,
            head: state.head.clone(),
        },
        || {
            format!(
                "box {:?} (#{}, id {}) created (node {}); its workspace is /workspace.\nRun something: agentbox exec {} -- ls\n",
                rec.name,
                rec.index,
                &rec.id[..8],
                render::short(&state.head),
                rec.name
            )
        },
    )
}

/// What `create` makes of its git options, for every repository of the project.
fn seed_opts(a: &CreateArgs, o: &crate::configcmd::CreateOptions) -> agentbox_git::SeedOpts {
    agentbox_git::SeedOpts {
        from_ref: a.from_branch.clone(),
        no_carry: !o.carry,
        with_env: o.with_env.clone(),
        exclude: Vec::new(),
    }
}

/// One line per box repository: its branch, base and what was carried over.
fn note_seeded(ctx: &Ctx, repos: &[agentbox_boxes::seeding::SeededRepo]) {
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
                (false, n) => format!(", with {n} untracked file(s)"),
                (true, 0) => ", with uncommitted work (staged and unstaged)".to_owned(),
                (true, n) => format!(
                    ", with uncommitted work (staged and unstaged) and {n} untracked file(s)"
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

fn finish_exec(ctx: &Ctx, outcome: client::ExecOutcome) -> CliResult {
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
    if let Err(e) = agentbox_boxes::registry::update(&ctx.home, &rec.name, |r| {
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
fn target(
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
    let client = connect(ctx, &rec.name)?;
    let tty = if a.tty {
        Some(true)
    } else if a.no_tty || ctx.json {
        Some(false)
    } else {
        None
    };
    let outcome = client::exec(
        &client,
        argv,
        client::caller_env(&a.opts.vars),
        ctx.workdir(&rec, a.opts.workdir),
        ProcKind::Exec,
        !a.no_capture,
        tty,
    )?;
    finish_exec(ctx, outcome)
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
        let client = connect(ctx, &rec.name)?;
        launches += 1;
        let outcome = client::exec(
            &client,
            argv.clone(),
            client::caller_env(&a.opts.vars),
            ctx.workdir(&rec, a.opts.workdir.clone()),
            ProcKind::Exec,
            true,
            None,
        )?;
        if a.supervise && outcome.killed_by_checkout {
            ctx.note(format!(
                "agentbox: box {:?} was rolled back; relaunching {} (launch {})",
                rec.name,
                agentbox_boxes::render_command(&argv),
                launches + 1
            ));
            continue;
        }
        return finish_exec(ctx, outcome);
    }
}

pub fn shell(ctx: &Ctx, a: BoxCommandArgs) -> CliResult {
    let (rec, argv) = target(ctx, a.name, a.argv, None)?;
    let client = connect(ctx, &rec.name)?;
    let (argv, tty) = client::shell_command(argv);
    let outcome = client::exec(
        &client,
        argv,
        client::caller_env(&a.opts.vars),
        ctx.workdir(&rec, a.opts.workdir),
        ProcKind::Shell,
        true,
        Some(tty),
    )?;
    finish_exec(ctx, outcome)
}

#[derive(Serialize)]
struct Spawned {
    id: u64,
    pid: i32,
    log: std::path::PathBuf,
}

pub fn spawn(ctx: &Ctx, a: BoxCommandArgs) -> CliResult {
    let (rec, argv) = target(
        ctx,
        a.name,
        a.argv,
        Some(("spawn", "agentbox spawn [BOX] [--] CMD [ARGS...]")),
    )?;
    let name = rec.name.clone();
    let client = connect(ctx, &name)?;
    let reply = client.request(&Request::Spawn {
        argv,
        env: client::caller_env(&a.opts.vars),
        cwd: ctx.workdir(&rec, a.opts.workdir),
    })?;
    let Reply::Started { id, pid } = reply else {
        return Err(unexpected(&reply));
    };
    let out = Spawned {
        id,
        pid,
        log: BoxDirs::new(&ctx.home, &name).log(id),
    };
    ctx.out(&out, || {
        format!(
            "started process {id} (pid {pid} in the box)\nOutput: agentbox logs {name} {id} -f\n"
        )
    })
}

fn unexpected(r: &Reply) -> CliError {
    CliError::new(
        1,
        format!("unexpected answer from the supervisor: {r:?}"),
        None,
    )
}

pub fn ps(ctx: &Ctx, reference: Option<&str>) -> CliResult {
    let name = &ctx.resolve_box(reference)?.name;
    // The running processes, then the recent exits (each with `exit`).
    let procs = match running(ctx, name)? {
        Some(c) => match c.request(&Request::Ps)? {
            Reply::Procs { procs, exited } => procs.into_iter().chain(exited).collect(),
            other => return Err(unexpected(&other)),
        },
        None => Vec::new(),
    };
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
    Ok((ctx.resolve_box(reference)?.name, id))
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
            3,
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
        let alive = match running(ctx, &a.name)? {
            Some(c) => {
                matches!(c.request(&Request::Ps)?, Reply::Procs { procs, .. } if procs.iter().any(|p| p.id == a.id))
            }
            None => false,
        };
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
    let Some(c) = running(ctx, &name)? else {
        return Err(CliError::new(
            3,
            format!("box {name:?} is not running"),
            Some(format!("`agentbox ps {name}` lists its processes")),
        ));
    };
    c.request(&Request::Kill { target: id, signal })?;
    ctx.out(
        &serde_json::json!({"signalled": id, "signal": signal}),
        || format!("sent signal {signal} to process {id}\n"),
    )
}

pub fn start(ctx: &Ctx, reference: Option<&str>) -> CliResult {
    let name = &ctx.resolve_box(reference)?.name;
    // A supervisor killed a moment ago may still accept connections while its last threads
    // exit; asking again reaches its successor.
    let answered = connect(ctx, name)?.request(&Request::Ping).is_ok();
    if !answered {
        std::thread::sleep(Duration::from_millis(100));
        connect(ctx, name)?.request(&Request::Ping)?;
    }
    ctx.out(&serde_json::json!({"box": name, "running": true}), || {
        format!("box {name:?} is running\n")
    })
}

/// The box's repositories; an error when it was not made from any.
fn box_repos(rec: &BoxRecord, what: &str) -> CliResult<()> {
    if rec.repos.is_empty() {
        return Err(CliError::new(
            4,
            format!("box {:?} was not made from a git repository", rec.name),
            Some(format!(
                "only boxes created --from a repository (or a directory of repositories) have branches to {what}"
            )),
        ));
    }
    Ok(())
}

/// The box's repositories `only` names (`.` for the root; all when empty).
fn chosen<'r>(rec: &'r BoxRecord, only: &[String]) -> CliResult<Vec<&'r record::GitRecord>> {
    if let Some(unknown) = only
        .iter()
        .find(|o| !rec.repos.iter().any(|g| g.label() == o.as_str()))
    {
        return Err(CliError::usage(
            format!("box {:?} has no repository {unknown:?}", rec.name),
            format!(
                "its repositories: {}",
                rec.repos
                    .iter()
                    .map(|g| g.label())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        ));
    }
    Ok(rec
        .repos
        .iter()
        .filter(|g| only.is_empty() || only.iter().any(|o| o == g.label()))
        .collect())
}

/// Bring every box branch into its host repository now (through the supervisor, which
/// serialises it with nodes).
fn sync_now(ctx: &Ctx, name: &str) -> CliResult<Vec<agentbox_boxes::proto::SyncedRepo>> {
    let reply = connect(ctx, name)?.request(&Request::Sync)?;
    let Reply::Synced { repos } = reply else {
        return Err(unexpected(&reply));
    };
    Ok(repos)
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
    box_repos(&rec, "sync")?;
    let repos = sync_now(ctx, name)?;
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

/// One repository's part of `push` or `pull`.
#[derive(Serialize)]
struct RemoteResult {
    /// `None`: the project root.
    sub: Option<String>,
    repo: std::path::PathBuf,
    remote: String,
    /// The box's branch (push), or the remote's branch merged (pull).
    branch: String,
    /// What was pushed, or what was merged (`None`: nothing, see `outcome`).
    commit: Option<String>,
    /// `pushed`, `no-branch` (push); `merged`, `up-to-date`, `conflict`, `failed` (pull).
    outcome: &'static str,
    /// The node the merge made, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<String>,
}

fn remote_table(results: &[RemoteResult]) -> String {
    let mut s = format!(
        "{:<12} {:<28} {:<10} {:<13} RESULT\n",
        "REPO", "BRANCH", "REMOTE", "COMMIT"
    );
    for r in results {
        s.push_str(&format!(
            "{:<12} {:<28} {:<10} {:<13} {}\n",
            r.sub.as_deref().unwrap_or("."),
            r.branch,
            r.remote,
            short_tip(r.commit.as_deref()),
            r.outcome
        ));
    }
    s
}

/// `push --json`: a list of `{"sub", "repo", "remote", "branch", "commit", "outcome"}`, one
/// per repository. Runs on the host only, as the user, with the user's git configuration
/// and credentials: the box is never involved beyond the sync of its branches.
/// The remote `push`/`pull` use: `--remote`, else `git.remote` when a configuration file
/// (not the built-in default) sets it, else `None` (the branch's tracked remote, or `origin`).
fn chosen_remote(ctx: &Ctx, rec: &BoxRecord, flag: Option<&str>) -> CliResult<Option<String>> {
    if let Some(r) = flag {
        return Ok(Some(r.to_owned()));
    }
    use agentbox_boxes::config::{keys::Value, layers::Layer, Config};
    let config = Config::load(&ctx.home, rec.project.as_deref())?;
    let entry = config.entry("git.remote")?;
    Ok(match (&entry.value, entry.origin.layer) {
        (Some(Value::Str(r)), layer) if layer != Layer::Builtin => Some(r.clone()),
        _ => None,
    })
}

pub fn push(ctx: &Ctx, a: PushArgs) -> CliResult {
    let rec = ctx.resolve_box(a.name.as_deref())?;
    let remote = chosen_remote(ctx, &rec, a.remote.as_deref())?;
    box_repos(&rec, "push")?;
    let repos = chosen(&rec, &a.repos)?;
    // Every remote is checked before anything is pushed.
    let remotes = repos
        .iter()
        .map(|g| agentbox_git::remote_for(&g.host(), remote.as_deref(), g.source_branch.as_deref()))
        .collect::<Result<Vec<_>, _>>()?;
    let synced = sync_now(ctx, &rec.name)?;
    let mut results = Vec::new();
    for (g, remote) in repos.into_iter().zip(remotes) {
        let tip = synced
            .iter()
            .find(|s| s.sub == g.sub)
            .and_then(|s| s.tip.clone());
        if tip.is_some() {
            ctx.busy(&format!("pushing {} to {remote}", g.branch), || {
                agentbox_git::push(&g.host(), &remote, &g.branch, a.force)
            })?;
        }
        results.push(RemoteResult {
            sub: g.sub.clone(),
            repo: g.repo.clone(),
            remote,
            branch: g.branch.clone(),
            outcome: if tip.is_some() { "pushed" } else { "no-branch" },
            commit: tip,
            node: None,
        });
    }
    ctx.out(&results, || remote_table(&results))
}

/// `pull --json`: a list like `push`'s. For each repository: fetch on the host (the user's
/// credentials) into `refs/agentbox/<box>/fetched`, then `git merge` of that commit inside
/// the box, where it is reachable through the read-only object store. A merge that
/// conflicts leaves the box repository in its conflicted state; the exit code is then 4.
pub fn pull(ctx: &Ctx, a: PullArgs) -> CliResult {
    let rec = ctx.resolve_box(a.name.as_deref())?;
    let remote = chosen_remote(ctx, &rec, a.remote.as_deref())?;
    box_repos(&rec, "pull")?;
    let mut plan = Vec::new();
    for g in chosen(&rec, &a.repos)? {
        let host = g.host();
        let remote =
            agentbox_git::remote_for(&host, remote.as_deref(), g.source_branch.as_deref())?;
        let branch = match (&a.branch, &g.source_branch) {
            (Some(b), _) => b.clone(),
            (None, Some(src)) => agentbox_git::upstream_branch(&host, src),
            (None, None) => {
                return Err(CliError::usage(
                    format!(
                        "box {:?}: {} was on no branch when the box was made",
                        rec.name,
                        g.repo.display()
                    ),
                    "name the remote's branch to merge with --branch",
                ))
            }
        };
        plan.push((g, remote, branch));
    }
    let client = connect(ctx, &rec.name)?;
    let mut results = Vec::new();
    for (g, remote, branch) in plan {
        let sha = ctx.busy(&format!("fetching {branch} from {remote}"), || {
            agentbox_git::fetch(&g.host(), &rec.name, &remote, &branch)
        })?;
        let argv = vec![
            "git".to_owned(),
            "merge".to_owned(),
            "--no-edit".to_owned(),
            "-m".to_owned(),
            format!("Merge {remote}/{branch}"),
            sha.clone(),
        ];
        let (outcome, output) = client::exec_collect(
            &client,
            argv,
            Some(g.workspace().to_string_lossy().into_owned()),
            true,
        )?;
        let result = match outcome.status {
            0 if output.contains("Already up to date") => "up-to-date",
            0 => "merged",
            _ if output.contains("CONFLICT") => "conflict",
            _ => "failed",
        };
        if outcome.status != 0 {
            ctx.note(format!(
                "{}: {}",
                g.workspace().display(),
                output.trim_end()
            ));
        }
        results.push(RemoteResult {
            sub: g.sub.clone(),
            repo: g.repo.clone(),
            remote,
            branch,
            commit: Some(sha),
            outcome: result,
            node: outcome.node,
        });
    }
    ctx.out(&results, || remote_table(&results))?;
    let inside = |r: &RemoteResult| {
        Path::new(record::WORKSPACE)
            .join(r.sub.as_deref().unwrap_or(""))
            .display()
            .to_string()
    };
    if let Some(r) = results.iter().find(|r| r.outcome == "conflict") {
        return Err(CliError::new(
            4,
            format!(
                "box {:?}: merging {}/{} into {} conflicts; the box repository is left mid-merge",
                rec.name,
                r.remote,
                r.branch,
                inside(r)
            ),
            Some(format!(
                "resolve the conflicts inside the box (agentbox shell {} -w {}), then `git commit`; or `git merge --abort` there",
                rec.name,
                inside(r)
            )),
        ));
    }
    if let Some(r) = results.iter().find(|r| r.outcome == "failed") {
        return Err(CliError::new(
            1,
            format!(
                "box {:?}: merging {}/{} into {} failed (see above)",
                rec.name,
                r.remote,
                r.branch,
                inside(r)
            ),
            Some("commit or stash the box's changes there first".to_owned()),
        ));
    }
    Ok(())
}

pub fn stop(ctx: &Ctx, reference: Option<&str>) -> CliResult {
    let name = &ctx.resolve_box(reference)?.name;
    let was = match running(ctx, name)? {
        Some(c) => {
            // The supervisor answers, then ends; the box's processes die with it.
            let _ = c.request(&Request::Stop);
            wait_stopped(ctx, name);
            true
        }
        None => false,
    };
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

/// Wait until the supervisor has exited (it holds the box's lock until then).
fn wait_stopped(ctx: &Ctx, name: &str) {
    if let Err(e) = agentbox_boxes::supervisor::wait_gone(&ctx.home, name) {
        ctx.note(format!(
            "agentbox: waiting for the supervisor of {name:?} to exit: {e}"
        ));
    }
}

/// Checkout of a box: through its supervisor when it runs (which kills its processes).
/// Returns the node and how many processes were killed; `None` when the box is not running.
pub fn checkout_running(
    ctx: &Ctx,
    name: &str,
    reference: &str,
    keep_processes: bool,
) -> CliResult<Option<(String, usize)>> {
    let Some(c) = running(ctx, name)? else {
        return Ok(None);
    };
    match c.request(&Request::Checkout {
        reference: reference.to_owned(),
        keep_processes,
    })? {
        Reply::Node {
            node: Some(node),
            killed,
        } => Ok(Some((node, killed))),
        other => Err(unexpected(&other)),
    }
}

/// Commit of a running box goes through its supervisor, which serialises it with
/// auto-capture.
pub fn commit_running(ctx: &Ctx, name: &str, opts: &CommitOpts) -> CliResult<Option<String>> {
    let Some(c) = running(ctx, name)? else {
        return Ok(None);
    };
    match c.request(&Request::Commit {
        message: opts.message.clone(),
        command: opts.command.clone(),
    })? {
        Reply::Node { node, .. } => Ok(node),
        other => Err(unexpected(&other)),
    }
}

/// A git error of `create`: where nothing better is known, the way around git.
fn git_error(e: agentbox_git::GitError) -> CliError {
    let mut err = CliError::from(e);
    if err.hint.is_none() {
        err.hint = Some("`agentbox create --no-git` copies the directory as it is".to_owned());
    }
    err
}

/// Remove a box: stop it, then its environment and its directory; with `delete_branch`,
/// its branches in the host repositories too. Returns the branches deleted.
pub fn destroy_box(
    ctx: &Ctx,
    store: &Store,
    name: &str,
    delete_branch: bool,
) -> CliResult<Vec<String>> {
    let mut deleted = Vec::new();
    let mut unpinned = true;
    if let Some(c) = running(ctx, name)? {
        let _ = c.request(&Request::Stop);
        wait_stopped(ctx, name);
    }
    agentbox_boxes::supervisor::remove_cgroup(&ctx.home, name);
    for git in record::read(&ctx.home, name)
        .map(|r| r.repos)
        .unwrap_or_default()
    {
        // The base pins go with the box; its branches stay (they are the user's work).
        if let Err(e) = agentbox_git::unpin(&git.repo, name) {
            unpinned = false;
            ctx.note(format!(
                "agentbox: could not remove refs/agentbox/{name}/ from {}: {e}",
                git.repo.display()
            ));
        }
        if delete_branch {
            match agentbox_git::delete_branch(&git.repo, &git.branch) {
                Ok(()) => deleted.push(git.branch.clone()),
                Err(e) => ctx.note(format!(
                    "agentbox: kept branch {} in {}: {e}",
                    git.branch,
                    git.repo.display()
                )),
            }
        }
    }
    if unpinned {
        // Kept otherwise: `prune` retries the refs that could not be removed.
        agentbox_boxes::registry::forget_pins(&ctx.home, name)?;
    }
    if store.env(name).is_ok() {
        store.remove_env(name)?;
    }
    let dirs = BoxDirs::new(&ctx.home, name);
    // The record goes first: without it the box no longer exists.
    let _ = fs_err::remove_file(dirs.record());
    fs_err::remove_dir_all(&dirs.dir)?;
    Ok(deleted)
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
        agentbox_boxes::registry::check_display_name(&ctx.home, &rec.name, d)?;
    }
    let rec = agentbox_boxes::registry::update(&ctx.home, &rec.name, |r| {
        r.display_name = display.map(str::to_owned)
    })?;
    ctx.out(&rec, || match &rec.display_name {
        Some(d) => format!("box {:?} is shown as {d:?}\n", rec.name),
        None => format!("box {:?} has no display name\n", rec.name),
    })
}

pub fn image(ctx: &Ctx, cmd: ImageCmd) -> CliResult {
    use agentbox_boxes::images;
    match cmd {
        ImageCmd::Import { name, source } => {
            need_root("importing an image")?;
            let store = Store::open_or_init(&ctx.home.store_dir(), None)?;
            let img = ctx.busy("unpacking the image", || {
                images::import(&ctx.home, &store, &name, &source)
            })?;
            ctx.out(&img, || {
                format!(
                    "imported image {name:?}\nUse it: agentbox create --image {name} (inside a project, or with -C DIR)\n"
                )
            })
        }
        ImageCmd::List => {
            let list = images::list(&ctx.home)?;
            ctx.out(&list, || {
                let mut s = format!("{:<20} {:<20} SOURCE\n", "NAME", "IMPORTED");
                for i in &list {
                    s.push_str(&format!(
                        "{:<20} {:<20} {}\n",
                        i.name,
                        i.imported.format("%Y-%m-%d %H:%M:%S"),
                        i.source
                    ));
                }
                s
            })
        }
        ImageCmd::Rm { name } => {
            let store = ctx.store()?;
            images::remove(&ctx.home, &store, &name)?;
            ctx.out(&serde_json::json!({ "removed": name }), || {
                format!("removed image {name:?}\n")
            })
        }
    }
}

/// A box branch as `status` shows it.
#[derive(Serialize)]
pub struct BranchStatus {
    /// The host repository.
    pub repository: std::path::PathBuf,
    pub branch: String,
    /// The branch's tip in the host repository (`None`: not synced yet, or deleted).
    pub tip: Option<String>,
    /// The host branch compared with (the one checked out in the host repository).
    pub against: Option<String>,
    /// Commits of the box branch not on `against`, and the reverse.
    pub ahead: Option<u64>,
    pub behind: Option<u64>,
    /// Uncommitted paths in the box's repository (`None` when it cannot be looked at: a
    /// rootless box that is not running).
    pub dirty: Option<Vec<String>>,
}

/// What `status BOX` adds for a box.
#[derive(Serialize)]
pub struct BoxStatus {
    #[serde(flatten)]
    pub record: BoxRecord,
    pub branches: Vec<BranchStatus>,
    pub state: &'static str,
    pub processes: usize,
    pub base: String,
    /// The network as a person reads it (`private (published 8080->8123)`).
    pub network: String,
    pub capture: bool,
    /// How auto-capture is doing in the running box (`None`: stopped, or capture off).
    pub capture_state: Option<agentbox_boxes::capture::CaptureHealth>,
    pub limits: String,
    /// The running box's private in-memory mounts and their use (empty: stopped).
    pub scratch: Vec<agentbox_boxes::proto::ScratchUse>,
    /// The host ids the running box's root is (`None`: host root, or stopped).
    pub box_root: Option<agentbox_sandbox::proto::IdRange>,
    /// Paths changed in the box's layer since HEAD (what the next node would hold).
    pub changed: usize,
}

pub fn box_status(ctx: &Ctx, store: &Store, name: &str) -> CliResult<BoxStatus> {
    let rec = record::read(&ctx.home, name)?;
    let (state, processes, (capture_state, scratch, pids_limit, box_root)) =
        match running(ctx, name)? {
            Some(c) => {
                let procs = match c.request(&Request::Ps)? {
                    Reply::Procs { procs, .. } => procs.len(),
                    other => return Err(unexpected(&other)),
                };
                // One request per connection.
                let health = match running(ctx, name)? {
                    Some(c) => match c.request(&Request::Health)? {
                        Reply::Health {
                            capture,
                            scratch,
                            pids_limit,
                            box_root,
                        } => (capture, scratch, pids_limit, box_root),
                        other => return Err(unexpected(&other)),
                    },
                    None => (None, Vec::new(), None, None),
                };
                ("running", procs, health)
            }
            None => ("stopped", 0, (None, Vec::new(), None, None)),
        };
    let l = &rec.limits;
    let mut limits = Vec::new();
    if let Some(m) = l.memory_bytes {
        limits.push(format!("memory {}", render::bytes(m)));
    }
    match (l.pids, pids_limit) {
        (Some(p), _) => limits.push(format!("{p} processes")),
        (None, Some(p)) => limits.push(format!("{p} processes (default)")),
        (None, None) => {}
    }
    if let Some(c) = l.cpus {
        limits.push(format!("{c} CPUs"));
    }
    let mut branches = Vec::new();
    // The box's repositories are read only inside the box, by its supervisor: a stopped
    // box's uncommitted paths are not known.
    let dirty_inside = match (rec.repos.is_empty(), running(ctx, name)?) {
        (false, Some(c)) => match c.request(&Request::Dirty)? {
            Reply::Dirty { repos } => repos,
            other => return Err(unexpected(&other)),
        },
        _ => Vec::new(),
    };
    for (i, git) in rec.repos.iter().enumerate() {
        let tip = agentbox_git::branch_tip(&git.repo, &git.branch, &git.objects)
            .ok()
            .flatten();
        let against = agentbox_git::current_branch(&git.repo).ok().flatten();
        let (ahead, behind) = match (&tip, &against) {
            (Some(_), Some(a)) => agentbox_git::ahead_behind(&git.repo, &git.branch, a)
                .map(|(x, y)| (Some(x), Some(y)))
                .unwrap_or((None, None)),
            _ => (None, None),
        };
        let dirty = dirty_inside.get(i).cloned().flatten();
        branches.push(BranchStatus {
            repository: git.repo.clone(),
            branch: git.branch.clone(),
            tip,
            against,
            ahead,
            behind,
            dirty,
        });
    }
    Ok(BoxStatus {
        branches,
        state,
        processes,
        base: match &rec.image {
            Some(i) => format!("image {i}"),
            None => "the host's /".to_owned(),
        },
        network: match rec.network {
            Network::Host => "host".to_owned(),
            Network::None => "none (loopback only)".to_owned(),
            Network::Private if rec.publish.is_empty() => "private".to_owned(),
            Network::Private => format!(
                "private (published {})",
                rec.publish
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        capture: rec.capture,
        capture_state,
        scratch,
        box_root,
        limits: if limits.is_empty() {
            "none".to_owned()
        } else {
            limits.join(", ")
        },
        changed: record::counted_changes(&record::ignore_set(&rec), &store.changed_paths(name)?)
            .len(),
        record: rec,
    })
}

pub fn is_box(ctx: &Ctx, name: &str) -> bool {
    BoxDirs::new(&ctx.home, name).record().exists()
}
