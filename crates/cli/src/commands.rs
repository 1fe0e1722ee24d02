//! One function per command.

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

/// What every command gets.
pub(crate) struct Ctx {
    pub(crate) home: Home,
    pub(crate) json: bool,
    pub(crate) env: Option<String>,
    /// The domain façade over the provider this binary wires in (see [`Ctx::boxes`]).
    boxes: agentbox_boxes::ops::Boxes,
}

impl Ctx {
    /// The composition root: boxes of this home, run by the local provider.
    pub(crate) fn new(home: Home, json: bool, env: Option<String>) -> Ctx {
        let provider = std::sync::Arc::new(agentbox_boxes::local::LocalProvider::new(home.clone()));
        Ctx {
            boxes: agentbox_boxes::ops::Boxes::new(home.clone(), provider),
            home,
            json,
            env,
        }
    }

    /// Every box operation goes through the façade.
    pub(crate) fn boxes(&self) -> &agentbox_boxes::ops::Boxes {
        &self.boxes
    }

    fn store_dir(&self) -> PathBuf {
        self.home.store_dir()
    }

    /// Open the existing store.
    pub(crate) fn store(&self) -> CliResult<Store> {
        let dir = self.existing_store_dir()?;
        Ok(Store::open(&dir)?)
    }

    /// Open the existing store as a crash left it (for `fsck` and `prune`, which report
    /// and remove half-made data themselves).
    pub(crate) fn store_unreconciled(&self) -> CliResult<Store> {
        let dir = self.existing_store_dir()?;
        Ok(Store::open_unreconciled(&dir)?)
    }

    fn existing_store_dir(&self) -> CliResult<PathBuf> {
        let dir = self.store_dir();
        if !dir.join("store.json").exists() {
            return Err(CliError::new(
                3,
                format!("no agentbox store at {}", dir.display()),
                Some("create a box first: `agentbox create` inside a project (or `agentbox create NAME -C DIR`) (or version a directory: `agentbox env DIR`)".into()),
            ));
        }
        Ok(dir)
    }

    /// Print `value` as JSON, or `human` as text, on stdout.
    pub(crate) fn out<T: Serialize>(&self, value: &T, human: impl FnOnce() -> String) -> CliResult {
        let mut stdout = std::io::stdout().lock();
        let text = if self.json {
            let mut s = serde_json::to_string_pretty(value).map_err(|e| {
                CliError::new(1, format!("cannot encode output as JSON: {e}"), None)
            })?;
            s.push('\n');
            s
        } else {
            human()
        };
        // A closed pipe (`| head`) is not an error worth reporting.
        let _ = stdout.write_all(text.as_bytes());
        Ok(())
    }

    /// Status message on stderr (suppressed with --json, where stdout carries the result).
    pub(crate) fn note(&self, msg: impl AsRef<str>) {
        if !self.json {
            eprintln!("{}", msg.as_ref());
        }
    }

    /// Run long work under a spinner with the elapsed time on stderr (only on a terminal and
    /// without --json, so pipes and scripts see clean output).
    pub(crate) fn busy<T>(&self, msg: &str, work: impl FnOnce() -> T) -> T {
        use std::io::IsTerminal;
        if self.json || !std::io::stderr().is_terminal() {
            return work();
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .expect("the template is valid"),
        );
        bar.set_message(msg.to_owned());
        bar.enable_steady_tick(std::time::Duration::from_millis(100));
        let out = work();
        bar.finish_and_clear();
        out
    }

    /// Split positional arguments into the environment and the rest. The environment is
    /// `-b NAME`, else the first argument when more than `min_rest` were given and it names
    /// an environment or a box, else the environment containing the current directory, else
    /// the current project's only box, else the only environment.
    fn env_and_args(
        &self,
        store: &Store,
        args: &[String],
        min_rest: usize,
        max_rest: usize,
    ) -> CliResult<(String, Vec<String>)> {
        let (env, rest) = if let Some(e) = &self.env {
            let e = self.env_name(store, e)?;
            // Naming the same environment again as the first argument is harmless.
            if args.len() > min_rest && args.first() == Some(&e) {
                (e, args[1..].to_vec())
            } else {
                (e, args.to_vec())
            }
        } else if args.len() > min_rest && store.env(&args[0]).is_ok() {
            (args[0].clone(), args[1..].to_vec())
        } else if let Some(rec) = (args.len() > min_rest)
            .then(|| self.find_box(&args[0]))
            .transpose()?
            .flatten()
        {
            (rec.name, args[1..].to_vec())
        } else if args.len() == max_rest + 1 {
            // One argument too many for the command: the first must name the box.
            return Err(BoxError::NoSuchBox {
                name: args[0].clone(),
            }
            .into());
        } else {
            (self.implicit_env(store)?, args.to_vec())
        };
        store.env(&env)?;
        if rest.len() < min_rest || rest.len() > max_rest {
            return Err(CliError::usage(
                format!(
                    "expected {} argument{} after the environment, got {}: {:?}",
                    if min_rest == max_rest {
                        min_rest.to_string()
                    } else {
                        format!("{min_rest} to {max_rest}")
                    },
                    if max_rest == 1 { "" } else { "s" },
                    rest.len(),
                    rest
                ),
                "see `agentbox help <command>`",
            ));
        }
        Ok((env, rest))
    }

    /// An environment's name from `-b NAME`: an environment's own name, else a box
    /// reference (id, number, display name…).
    fn env_name(&self, store: &Store, reference: &str) -> CliResult<String> {
        if store.env(reference).is_ok() {
            return Ok(reference.to_owned());
        }
        Ok(self.resolve_box(Some(reference))?.name)
    }

    fn implicit_env(&self, store: &Store) -> CliResult<String> {
        if let Ok(cwd) = std::env::current_dir() {
            if let Some(e) = store.env_for_path(&cwd)? {
                return Ok(e.name);
            }
        }
        if let Some(rec) = self.implicit_box()? {
            return Ok(rec.name);
        }
        let envs = store.envs()?;
        match envs.len() {
            1 => Ok(envs[0].name.clone()),
            0 => Err(CliError::new(
                3,
                "there are no boxes or environments",
                Some("create a box with `agentbox create` inside a project (or `agentbox create NAME -C DIR`) (or version a directory with `agentbox env DIR`)".into()),
            )),
            _ => Err(CliError::usage(
                format!(
                    "which box or environment? there are {}: {}",
                    envs.len(),
                    envs.iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
                "name it as the first argument or with -b NAME, or run the command inside its directory or project",
            )),
        }
    }
}

/// Library operations report through the printer: notes to stderr, long work under a
/// spinner.
impl agentbox_boxes::create::Progress for Ctx {
    fn note(&self, line: &str) {
        Ctx::note(self, line);
    }
    fn busy(
        &self,
        what: &str,
        work: &mut dyn FnMut() -> agentbox_boxes::Result<()>,
    ) -> agentbox_boxes::Result<()> {
        Ctx::busy(self, what, work)
    }
}

impl Ctx {
    /// The project the current directory is in: box numbers and the implicit box are
    /// relative to it.
    pub(crate) fn here(&self) -> CliResult<Option<PathBuf>> {
        let cwd = agentbox_boxes::project::current_dir()?;
        Ok(registry::current_project(&self.home, &cwd)?)
    }

    /// The box `reference` names (else `-b`, else the current project's only box).
    pub(crate) fn resolve_box(&self, reference: Option<&str>) -> CliResult<BoxRecord> {
        let cwd = agentbox_boxes::project::current_dir()?;
        Ok(match reference.or(self.env.as_deref()) {
            Some(r) => registry::resolve(&self.home, r, &cwd)?,
            None => registry::implicit(&self.home, &cwd)?,
        })
    }

    /// The current project's only box; `None` when there is none, an error when there are
    /// several (the user has to say which).
    fn implicit_box(&self) -> CliResult<Option<BoxRecord>> {
        match registry::implicit(&self.home, &agentbox_boxes::project::current_dir()?) {
            Ok(rec) => Ok(Some(rec)),
            Err(BoxError::WhichBox { candidates, .. }) if candidates.is_empty() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The box `reference` names, `None` when it names none (other errors, like an
    /// ambiguous reference, are errors).
    pub(crate) fn find_box(&self, reference: &str) -> CliResult<Option<BoxRecord>> {
        match registry::resolve(
            &self.home,
            reference,
            &agentbox_boxes::project::current_dir()?,
        ) {
            Ok(r) => Ok(Some(r)),
            Err(BoxError::NoSuchBox { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Where a command in box `rec` starts: `explicit` (`-w`), else the directory matching
    /// the current one when it is inside the box's project (`/workspace/<same path>`),
    /// else the supervisor's default (`/workspace`).
    pub(crate) fn workdir(&self, rec: &BoxRecord, explicit: Option<String>) -> Option<Workdir> {
        if let Some(dir) = explicit {
            return Some(Workdir::explicit(dir));
        }
        let cwd = std::fs::canonicalize(std::env::current_dir().ok()?).ok()?;
        let rel = cwd.strip_prefix(rec.project.as_deref()?).ok()?;
        (!rel.as_os_str().is_empty()).then(|| {
            Workdir::default_for(
                Path::new(agentbox_boxes::record::WORKSPACE)
                    .join(rel)
                    .to_string_lossy(),
            )
        })
    }

    /// Split `[BOX] CMD…`: `first` is the box when it names one; otherwise it is the
    /// command's first word and the box is `-b` or the current project's only box — unless
    /// the user wrote `first --`, which only makes sense for a box.
    pub(crate) fn box_and_command(
        &self,
        first: Option<String>,
        mut argv: Vec<String>,
    ) -> CliResult<(BoxRecord, Vec<String>)> {
        let Some(first) = first else {
            return Ok((self.resolve_box(None)?, argv));
        };
        if let Some(b) = &self.env {
            let rec = self.resolve_box(Some(b))?;
            if first != *b && first != rec.name {
                argv.insert(0, first);
            }
            return Ok((rec, argv));
        }
        if let Some(rec) = self.find_box(&first)? {
            return Ok((rec, argv));
        }
        let meant_a_box = std::env::args()
            .collect::<Vec<_>>()
            .windows(2)
            .any(|w| w[0] == first && w[1] == "--");
        let missing = BoxError::NoSuchBox {
            name: first.clone(),
        };
        if meant_a_box {
            return Err(missing.into());
        }
        // Several boxes here: which one is the question, not `first`.
        match self.implicit_box()? {
            Some(rec) => {
                argv.insert(0, first);
                Ok((rec, argv))
            }
            None => Err(missing.into()),
        }
    }
}

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

fn parse_backend(s: Option<&str>) -> CliResult<Option<BackendKind>> {
    s.map(|s| {
        s.parse::<BackendKind>()
            .map_err(|e| CliError::usage(e, "use --backend btrfs or --backend layers"))
    })
    .transpose()
}

fn dir_name(dir: &Path) -> CliResult<String> {
    let abs = std::path::absolute(dir)?;
    abs.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| {
            CliError::usage(format!("{} has no name", dir.display()), "pass --name NAME")
        })
}

fn setup(ctx: &Ctx, a: crate::args::SetupArgs) -> CliResult {
    let size = parse_size(&a.btrfs)?;
    let image = a
        .image
        .unwrap_or_else(|| PathBuf::from("/var/lib/agentbox/btrfs.img"));
    let mountpoint = ctx.store_dir();
    if mountpoint.join("store.json").exists() {
        return Err(CliError::new(
            4,
            format!("a store already exists at {}", mountpoint.display()),
            Some("setup makes a new btrfs store; use another --home (AGENTBOX_HOME) or remove the existing store".into()),
        ));
    }
    let report = agentbox_store::setup::setup_loop_btrfs(&image, size, &mountpoint)?;
    Store::init(&mountpoint, Some(BackendKind::Btrfs))?;
    ctx.out(&report, || {
        let mut s = format!(
            "Created a {} btrfs filesystem in {} and mounted it at {}.\nThe agentbox store lives there now: snapshots are btrfs subvolumes (O(1)).\n\nWhat was done:\n",
            crate::render::bytes(report.size_bytes),
            report.image.display(),
            report.mountpoint.display()
        );
        for c in &report.done {
            s.push_str(&format!("  {c}\n"));
        }
        s.push_str("\nTo mount it again after a reboot, add this line to /etc/fstab:\n");
        s.push_str(&format!("  {}\n\nTo undo (destroys the store and everything in it):\n", report.fstab_line));
        for c in &report.undo {
            s.push_str(&format!("  {c}\n"));
        }
        s
    })
}

/// Parse sizes like `20G`, `512M`, `1T`, `1048576`.
fn parse_size(s: &str) -> CliResult<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = s[i..].to_ascii_uppercase();
            let mult: u64 = match unit.trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                _ => {
                    return Err(CliError::usage(
                        format!("unknown size unit in {s:?}"),
                        "use e.g. 20G or 512M",
                    ))
                }
            };
            (&s[..i], mult)
        }
        None => (s, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| CliError::usage(format!("invalid size {s:?}"), "use e.g. 20G or 512M"))?;
    n.checked_mul(mult)
        .ok_or_else(|| CliError::usage(format!("size {s:?} is too large"), "use e.g. 20G"))
}

#[derive(Serialize)]
struct EnvCreated<'a> {
    env: &'a agentbox_store::EnvState,
    backend: BackendKind,
    store: PathBuf,
}

fn env(ctx: &Ctx, a: crate::args::EnvArgs) -> CliResult {
    let name = match &a.name {
        Some(n) => n.clone(),
        None => agentbox_store::names::from_dir_name(&dir_name(&a.dir)?),
    };
    let store = Store::open_or_init(&ctx.store_dir(), parse_backend(a.backend.as_deref())?)?;
    store.check_new_env_name(&name).map_err(|e| {
        let mut e = CliError::from(e);
        if a.name.is_none() {
            e.hint = Some("the name comes from the directory; choose one with --name NAME".into());
        }
        e
    })?;
    let dir = std::path::absolute(&a.dir)?;
    // Held until the environment exists: see `Store::hold`.
    let _staging = store.hold("create an environment")?;
    let (source, message) = match &a.from {
        None if dir.exists() => (
            Source::Dir(dir.clone()),
            a.message
                .clone()
                .unwrap_or_else(|| format!("content of {}", dir.display())),
        ),
        None => (
            Source::Empty,
            a.message.clone().unwrap_or_else(|| "empty".into()),
        ),
        Some(src) => {
            let p = Path::new(src);
            let msg = a.message.clone().unwrap_or_else(|| format!("from {src}"));
            if p.is_dir() {
                (Source::Dir(p.to_owned()), msg)
            } else {
                let staged = ctx.busy("fetching and unpacking the rootfs", || {
                    agentbox_store::transfer::stage_rootfs(&store, src)
                })?;
                (Source::Staged(staged), msg)
            }
        }
    };
    ctx.note(format!(
        "Creating environment {name:?} at {} ({} backend)…",
        dir.display(),
        store.config().backend
    ));
    let state = ctx.busy("copying the tree into the first node", || {
        store.create_env(&name, Some(&dir), source, &message)
    })?;
    ctx.out(
        &EnvCreated {
            env: &state,
            backend: store.config().backend,
            store: store.root().to_owned(),
        },
        || {
            format!(
                "{} is now versioned as environment {:?} (node {}).\nEdit it with any tool, then: agentbox commit {} -m \"what changed\"\n",
                render::place(&state.mountpoint),
                state.name,
                render::short(&state.head),
                state.name
            )
        },
    )
}

/// One row of `list`: an environment, and whether it is a box or a versioned directory.
#[derive(Serialize)]
struct Listed {
    #[serde(flatten)]
    env: agentbox_store::EnvState,
    /// "box" or "directory".
    kind: &'static str,
    /// Boxes: "running" or "stopped"; directories: "mounted" or "unmounted".
    state: &'static str,
    /// Boxes: the directory the workspace was copied from.
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<PathBuf>,
    /// Boxes: the box's record (id, number, display name, project, branches…).
    #[serde(rename = "box", skip_serializing_if = "Option::is_none")]
    record: Option<BoxRecord>,
}

/// `list`: the current project's boxes (all boxes outside a project, or with `--all`), and
/// versioned directories unless the list is limited to a project.
fn list(ctx: &Ctx, all: bool) -> CliResult {
    let store = ctx.store()?;
    let here = if all { None } else { ctx.here()? };
    let records: std::collections::BTreeMap<String, BoxRecord> =
        agentbox_boxes::record::list(&ctx.home)?
            .into_iter()
            .map(|r| (r.name.clone(), r))
            .collect();
    let mut rows: Vec<Listed> = Vec::new();
    for env in store.envs()? {
        match &env.mountpoint {
            Some(m) if here.is_none() => rows.push(Listed {
                state: if agentbox_store::mounts::is_mountpoint(m) {
                    "mounted"
                } else {
                    "unmounted"
                },
                kind: "directory",
                source: None,
                record: None,
                env,
            }),
            Some(_) => {}
            None => {
                let record = records.get(&env.name).cloned();
                if here.is_some()
                    && record.as_ref().and_then(|r| r.project.as_deref()) != here.as_deref()
                {
                    continue;
                }
                rows.push(Listed {
                    state: if agentbox_boxes::client::is_running(&ctx.home, &env.name) {
                        "running"
                    } else {
                        "stopped"
                    },
                    kind: "box",
                    source: record.as_ref().and_then(|r| r.source.clone()),
                    record,
                    env,
                })
            }
        }
    }
    // Boxes by project and number; directories after them.
    rows.sort_by(|a, b| {
        let key = |r: &Listed| {
            (
                r.record.is_none(),
                r.record.as_ref().and_then(|x| x.project.clone()),
                r.record.as_ref().map(|x| x.index),
                r.env.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    if let (Some(p), true) = (&here, rows.is_empty()) {
        let others = records.len();
        ctx.note(format!(
            "no boxes of project {}{}",
            p.display(),
            if others > 0 {
                format!("; `agentbox list --all` shows {others} other(s)")
            } else {
                "; `agentbox create` makes one".to_owned()
            }
        ));
    }
    ctx.out(&rows, || {
        let mut s = format!(
            "{:<4} {:<20} {:<9} {:<8} {:<13} {:<24} WHERE\n",
            "#", "NAME", "ID", "STATE", "HEAD", "BRANCH"
        );
        for r in &rows {
            let place = match (&r.env.mountpoint, &r.source) {
                (Some(m), _) => m.display().to_string(),
                (None, Some(src)) => format!("/workspace (from {})", src.display()),
                (None, None) => "/workspace".to_owned(),
            };
            let (index, name, id, branch) = match &r.record {
                Some(b) => (
                    b.index.to_string(),
                    b.shown_name().to_owned(),
                    b.id[..8.min(b.id.len())].to_owned(),
                    match b.repos.as_slice() {
                        [] => "-".to_owned(),
                        [one] => one.branch.clone(),
                        [first, rest @ ..] => format!("{} +{}", first.branch, rest.len()),
                    },
                ),
                None => ("-".into(), r.env.name.clone(), "-".into(), "-".into()),
            };
            s.push_str(&format!(
                "{:<4} {:<20} {:<9} {:<8} {:<13} {:<24} {}\n",
                index,
                name,
                id,
                r.state,
                render::short(&r.env.head),
                branch,
                place
            ));
        }
        s
    })
}

fn commit(ctx: &Ctx, a: crate::args::CommitArgs) -> CliResult {
    let store = ctx.store()?;
    let (env, _) = ctx.env_and_args(&store, &a.args, 0, 0)?;
    let opts = CommitOpts {
        message: a.message,
        command: a.command,
        ..CommitOpts::default()
    };
    let node = ctx.boxes().commit(&store, &env, opts)?;
    ctx.out(&node, || {
        format!(
            "[{env} {}] {}\n",
            render::short(&node.id),
            render::text(&node.message)
        )
    })
}

fn checkout(ctx: &Ctx, args: &[String], keep_processes: bool) -> CliResult {
    let store = ctx.store()?;
    let (env, rest) = ctx.env_and_args(&store, args, 1, 1)?;
    let done = ctx
        .boxes()
        .checkout(&store, &env, &rest[0], keep_processes)?;
    let killed = done.killed;
    if killed > 0 {
        ctx.note(format!(
            "killed {killed} process{} of box {env:?}",
            if killed == 1 { "" } else { "es" }
        ));
    }
    let node = done.node;
    let state = store.env(&env)?;
    let inside = |m: &Path| {
        std::env::current_dir().is_ok_and(|cwd| cwd.starts_with(m))
            || std::env::var_os("PWD").is_some_and(|p| Path::new(&p).starts_with(m))
    };
    if state.mountpoint.as_deref().is_some_and(inside) {
        // The working tree was remounted: a shell already inside it still sees the old one.
        ctx.note(format!(
            "note: {} was remounted; shells already inside it see the previous tree until they run: cd \"$PWD\"",
            render::place(&state.mountpoint)
        ));
    }
    ctx.out(&node, || {
        format!(
            "{env}: HEAD is now {} {}\n",
            render::short(&node.id),
            render::text(&node.message)
        )
    })
}

fn log(ctx: &Ctx, a: crate::args::LogArgs) -> CliResult {
    let store = ctx.store()?;
    let (env, _) = ctx.env_and_args(&store, &a.args, 0, 0)?;
    if a.ancestors {
        let nodes = store.log(&env)?;
        let state = store.env(&env)?;
        let tags = render::tags_by_node(&state.tags);
        return ctx.out(&nodes, || {
            nodes
                .iter()
                .map(|n| format!("{}\n", render::node_line(n, &state.head, &tags)))
                .collect()
        });
    }
    let h = store.history(&env)?;
    if a.leaves {
        let leaves: Vec<_> = h.leaves().into_iter().cloned().collect();
        let tags = render::tags_by_node(&h.tags);
        return ctx.out(&leaves, || {
            leaves
                .iter()
                .map(|n| format!("{}\n", render::node_line(n, &h.head, &tags)))
                .collect()
        });
    }
    ctx.out(&h, || render::tree(&h))
}

#[derive(Serialize)]
struct Shown {
    node: agentbox_store::Node,
    changes: Vec<agentbox_store::fsops::diff::Change>,
}

fn show(ctx: &Ctx, args: &[String]) -> CliResult {
    let store = ctx.store()?;
    let (env, rest) = ctx.env_and_args(&store, args, 0, 1)?;
    let reference = rest.first().map(String::as_str).unwrap_or("HEAD");
    let (node, changes) = store.show(&env, reference)?;
    let state = store.env(&env)?;
    let shown = Shown { node, changes };
    ctx.out(&shown, || {
        let mut s = format!(
            "{}\nparent: {}\n",
            render::node_line(&shown.node, &state.head, &render::tags_by_node(&state.tags)),
            shown
                .node
                .parent
                .as_deref()
                .map(render::short)
                .unwrap_or("(none)")
        );
        s.push_str(&render::changes(&shown.changes));
        s
    })
}

fn diff(ctx: &Ctx, args: &[String]) -> CliResult {
    let store = ctx.store()?;
    let (env, rest) = ctx.env_and_args(&store, args, 1, 2)?;
    let changes = store.diff(&env, &rest[0], rest.get(1).map(String::as_str))?;
    ctx.out(&changes, || render::changes(&changes))
}

fn tag(ctx: &Ctx, a: crate::args::TagArgs) -> CliResult {
    let store = ctx.store()?;
    if let Some(name) = &a.delete {
        let (env, _) = ctx.env_and_args(&store, &a.args, 0, 0)?;
        let id = store.delete_tag(&env, name)?;
        ctx.note(format!("deleted tag {name} (was {})", render::short(&id)));
        return ctx.out(
            &serde_json::json!({"deleted": name, "node": id}),
            String::new,
        );
    }
    let (env, rest) = ctx.env_and_args(&store, &a.args, 0, 2)?;
    match rest.as_slice() {
        [] => {
            let tags = store.env(&env)?.tags;
            ctx.out(&tags, || {
                tags.iter()
                    .map(|(t, id)| format!("{t:<24} {}\n", render::short(id)))
                    .collect()
            })
        }
        [name, reference @ ..] => {
            let reference = reference.first().map(String::as_str).unwrap_or("HEAD");
            let id = store.set_tag(&env, name, reference)?;
            ctx.out(&serde_json::json!({"tag": name, "node": id}), || {
                format!("{name} -> {}\n", render::short(&id))
            })
        }
    }
}

fn delete(ctx: &Ctx, args: &[String]) -> CliResult {
    let store = ctx.store()?;
    let (env, rest) = ctx.env_and_args(&store, args, 1, 1)?;
    let node = store.delete_node(&env, &rest[0])?;
    ctx.out(&node, || {
        format!(
            "deleted node {} {} (its children now descend from {}); `agentbox gc` frees its data\n",
            render::short(&node.id),
            render::text(&node.message),
            node.parent
                .as_deref()
                .map(render::short)
                .unwrap_or("nothing")
        )
    })
}

fn retain(ctx: &Ctx, a: crate::args::RetainArgs) -> CliResult {
    let store = ctx.store()?;
    let (env, _) = ctx.env_and_args(&store, &a.args, 0, 0)?;
    let report = store.retain(&env, a.keep)?;
    ctx.out(&report, || {
        format!(
            "{env}: kept {} nodes, dropped {}; `agentbox gc` frees their data\n",
            report.kept,
            report.dropped.len()
        )
    })
}

fn gc(ctx: &Ctx) -> CliResult {
    let store = ctx.store()?;
    let report = ctx.busy("collecting garbage", || store.gc())?;
    ctx.out(&report, || {
        format!(
            "removed {} unreferenced layers; store disk usage {} -> {}\n",
            report.removed_layers.len(),
            render::bytes(report.disk_bytes_before),
            render::bytes(report.disk_bytes_after)
        )
    })
}

fn status(ctx: &Ctx, args: &[String]) -> CliResult {
    let store = ctx.store()?;
    let env = if ctx.env.is_some() || !args.is_empty() {
        Some(ctx.env_and_args(&store, args, 0, 0)?.0)
    } else {
        std::env::current_dir()
            .ok()
            .and_then(|cwd| store.env_for_path(&cwd).ok().flatten())
            .map(|e| e.name)
            // Inside a project with one box: that box.
            .or_else(|| ctx.resolve_box(None).ok().map(|r| r.name))
    };
    let st = store.status(env.as_deref())?;
    let boxed = match &env {
        Some(name) if boxcmds::is_box(ctx, name) => Some(ctx.boxes().status(&store, name)?),
        _ => None,
    };
    #[derive(Serialize)]
    struct Out<'a> {
        #[serde(flatten)]
        store: &'a agentbox_store::history::Status,
        #[serde(rename = "box", skip_serializing_if = "Option::is_none")]
        boxed: Option<&'a agentbox_boxes::ops::BoxStatus>,
    }
    let out = Out {
        store: &st,
        boxed: boxed.as_ref(),
    };
    ctx.out(&out, || {
        let mut s = format!(
            "store:        {}\nbackend:      {} ({})\nenvironments: {}\nnodes:        {}\nlayers:       {}\ndisk usage:   {} (shared data counted once; {} apparent)\n",
            st.store.display(),
            st.backend,
            if st.backend_chosen == "auto" { "chosen by the filesystem" } else { "chosen explicitly" },
            st.environments,
            st.nodes,
            st.layers,
            render::bytes(st.disk_bytes),
            render::bytes(st.logical_bytes),
        );
        if let (Some(e), Some(b)) = (&st.env, &boxed) {
            let r = &b.record;
            s.push_str(&format!(
                "\nbox:          {}{}\nid:           {}\nnumber:       {} {}\nstate:        {}\nprocesses:    {}\n",
                e.name,
                r.display_name.as_deref().map(|d| format!(" (shown as {d:?})")).unwrap_or_default(),
                r.id,
                r.index,
                match &r.project {
                    Some(p) => format!("in project {}", p.display()),
                    None => "(no project)".to_owned(),
                },
                b.state.as_str(),
                b.processes,
            ));
            if let Some(a) = &r.last_agent {
                s.push_str(&format!("last agent:   {a}\n"));
            }
            for br in &b.branches {
                let rel = match (&br.tip, br.ahead, br.behind, &br.against) {
                    (None, ..) => "not in the host repository yet".to_owned(),
                    (Some(_), Some(a), Some(bh), Some(against)) => {
                        format!("{a} ahead, {bh} behind {against}")
                    }
                    _ => "tip synced".to_owned(),
                };
                let dirty = match &br.dirty {
                    Some(d) if d.is_empty() => ", clean".to_owned(),
                    Some(d) => format!(", {} uncommitted path(s)", d.len()),
                    None if b.state == agentbox_boxes::ops::BoxState::Stopped => {
                        ", uncommitted paths not known while the box is stopped".to_owned()
                    }
                    None => String::new(),
                };
                s.push_str(&format!(
                    "branch:       {} in {} ({rel}{dirty})\n",
                    br.branch,
                    br.repository.display()
                ));
            }
            s.push_str(&format!(
                "base:         {}\nnetwork:      {}\nauto-capture: {}\nlimits:       {}\nchanged:      {} path(s) since HEAD\nHEAD:         {}\nnodes:        {} ({} branch tips, {} tags)\nchain depth:  {}\nbox disk:     {}\n",
                b.base,
                b.network,
                match (&b.capture_state, b.capture) {
                    (_, false) => "off".to_owned(),
                    (None, true) => "on".to_owned(),
                    (Some(h), true) => format!("on, {}", h.describe()),
                },
                b.limits,
                b.changed,
                render::short(&e.head),
                e.nodes,
                e.leaves,
                e.tags,
                e.chain_depth,
                render::bytes(e.disk_bytes),
            ));
            if !b.scratch.is_empty() {
                let mounts: Vec<String> = b
                    .scratch
                    .iter()
                    .map(|m| {
                        format!(
                            "{} {} of {}",
                            m.path,
                            render::bytes(m.used_bytes),
                            render::bytes(m.size_bytes)
                        )
                    })
                    .collect();
                s.push_str(&format!("in memory:    {}\n", mounts.join(", ")));
            }
            if b.state == agentbox_boxes::ops::BoxState::Running {
                s.push_str(&match &b.box_root {
                    Some(r) => format!(
                        "box root:     host uid {} (box ids 0-{} are host ids {}-{})\n",
                        r.uid,
                        r.count.saturating_sub(1),
                        r.uid,
                        r.uid.saturating_add(r.count.saturating_sub(1))
                    ),
                    None => "box root:     host root (no user namespace; see the supervisor's log)\n".to_owned(),
                });
            }
        } else if let Some(e) = &st.env {
            s.push_str(&format!(
                "\nenvironment:  {}\ndirectory:    {} ({})\nHEAD:         {}\nnodes:        {} ({} branch tips, {} tags)\nchain depth:  {}\n",
                e.name,
                render::place(&e.mountpoint),
                if e.mounted { "mounted" } else { "NOT mounted: run `agentbox mount`" },
                render::short(&e.head),
                e.nodes,
                e.leaves,
                e.tags,
                e.chain_depth
            ));
        }
        s
    })
}

fn export(ctx: &Ctx, a: crate::args::ExportArgs) -> CliResult {
    let store = ctx.store()?;
    let (env, rest) = ctx.env_and_args(&store, &a.args, 0, 1)?;
    let kind = a
        .kind
        .parse()
        .map_err(|e: String| CliError::usage(e, "use --kind history, snapshot or rootfs"))?;
    let compression = a
        .compress
        .parse()
        .map_err(|e: String| CliError::usage(e, "use --compress zstd, gzip or none"))?;
    let reference = rest.first().map(String::as_str).unwrap_or("HEAD");
    let report =
        agentbox_store::transfer::export(&store, &env, reference, kind, compression, &a.output)?;
    ctx.note(format!(
        "exported {} node(s) of {env} to {}",
        report.nodes,
        a.output.display()
    ));
    ctx.out(&report, String::new)
}

fn import(ctx: &Ctx, a: crate::args::ImportArgs) -> CliResult {
    let store = Store::open_or_init(&ctx.store_dir(), None)?;
    let name = match &a.name {
        Some(n) => n.clone(),
        None => dir_name(&a.dir)?,
    };
    let max_size = a.max_size.as_deref().map(parse_size).transpose()?;
    let options = agentbox_store::transfer::ImportOptions {
        allow_devices: a.allow_devices,
        allow_setuid: a.allow_setuid,
        max_size,
    };
    let report = agentbox_store::transfer::import(&store, &a.source, &name, &a.dir, options)?;
    ctx.out(&report, || {
        let mut s = format!(
            "imported {} ({} node(s)) as environment {name:?} at {}\n",
            report.kind,
            report.nodes,
            a.dir.display()
        );
        if report.stripped_setuid > 0 {
            s.push_str(&format!(
                "stripped setuid/setgid or file capabilities from {} file(s); --allow-setuid keeps them\n",
                report.stripped_setuid
            ));
        }
        if report.dropped_overlay_xattrs > 0 {
            s.push_str(&format!(
                "ignored {} overlayfs attribute(s) (trusted.overlay.*, user.overlay.*) found in the archive; they are never imported\n",
                report.dropped_overlay_xattrs
            ));
        }
        s
    })
}

fn fsck(ctx: &Ctx, a: crate::args::FsckArgs) -> CliResult {
    // Not reconciled on open: what a crash left is what fsck is here to report.
    let store = ctx.store_unreconciled()?;
    let report = store.fsck(a.repair)?;
    ctx.out(&report, || {
        let mut s = String::new();
        for r in &report.repairs {
            s.push_str(&format!("repaired: {r}\n"));
        }
        for p in &report.problems {
            s.push_str(&format!(
                "problem: {}: {}{}\n",
                p.path.display(),
                p.message,
                if p.repairable {
                    " (fsck --repair fixes it)"
                } else {
                    ""
                }
            ));
        }
        if report.unreferenced_layers > 0 {
            s.push_str(&format!(
                "{} layers are no longer referenced{}: `agentbox gc` (or `agentbox prune`) frees them\n",
                report.unreferenced_layers,
                if report.leftovers_checked {
                    format!(" ({})", render::bytes(report.unreferenced_bytes))
                } else {
                    String::new()
                }
            ));
        }
        if !report.leftovers_checked && !a.repair {
            s.push_str("another agentbox process is using the store: half-made data was not checked (run fsck again when it is idle)\n");
        }
        s.push_str(&format!(
            "{} nodes, {} layers, {} environments: {}\n",
            report.nodes,
            report.layers,
            report.environments,
            if report.problems.is_empty() {
                "consistent"
            } else {
                "PROBLEMS FOUND"
            }
        ));
        s
    })?;
    if report.problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::new(
            7,
            format!("{} consistency problem(s) found", report.problems.len()),
            Some("run `agentbox fsck --repair`".into()),
        ))
    }
}

fn mount(ctx: &Ctx, args: &[String], mount: bool) -> CliResult {
    let store = ctx.store()?;
    let (env, _) = ctx.env_and_args(&store, args, 0, 0)?;
    let state = if mount {
        store.mount_env(&env)?
    } else {
        store.unmount_env(&env)?
    };
    ctx.out(&state, || {
        format!(
            "{} {}\n",
            if mount { "mounted" } else { "unmounted" },
            render::place(&state.mountpoint)
        )
    })
}

fn destroy(ctx: &Ctx, args: &[String], delete_branch: bool) -> CliResult {
    let store = ctx.store()?;
    // Destroying is never implicit: the box is always named.
    let Some(reference) = ctx.env.clone().or_else(|| args.first().cloned()) else {
        return Err(CliError::usage(
            "destroy needs the box's name (or number, or id)",
            "agentbox destroy BOX; `agentbox list` shows the boxes",
        ));
    };
    let is_directory = store.env(&reference).is_ok_and(|e| e.mountpoint.is_some());
    if !is_directory {
        let rec = ctx.resolve_box(Some(&reference))?;
        let name = rec.name.clone();
        let deleted = ctx.boxes().destroy(&store, &name, delete_branch, ctx)?;
        return ctx.out(
            &serde_json::json!({ "destroyed": name, "id": rec.id, "deleted_branches": deleted }),
            || {
                let mut s =
                    format!("destroyed box {name:?} (`agentbox gc` frees unreferenced data)\n");
                for b in &deleted {
                    s.push_str(&format!("deleted branch {b}\n"));
                }
                s
            },
        );
    }
    let env = reference;
    let state = store.env(&env)?;
    store.remove_env(&env)?;
    ctx.out(&state, || {
        format!(
            "destroyed environment {env:?} ({} is unmounted; `agentbox gc` frees unreferenced data)\n",
            render::place(&state.mountpoint)
        )
    })
}
