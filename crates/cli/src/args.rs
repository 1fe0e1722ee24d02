//! Command-line arguments.
//!
//! Commands that act on a box or environment take it as an optional first positional
//! argument (or `-b NAME`): a name, a box's id, unique id prefix, display name or number in
//! the current project. When it is left out, it is the versioned directory containing the
//! current directory, else the current project's only box, else the only one there is.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "agentbox",
    version,
    about = "Isolated, versioned boxes of a project for coding agents",
    long_about = "Isolated, versioned boxes of a project for coding agents.\n\nInside a project, `agentbox create` makes a box of it on its own git branch (your uncommitted work carried over, your checkout untouched); `agentbox exec -- CMD` runs a command in it; every command that changes something is a snapshot (`agentbox log`, `agentbox undo`, `agentbox checkout REF`). `agentbox env DIR` versions a directory in place instead."
)]
pub struct Cli {
    /// Agentbox home (default: $AGENTBOX_HOME, else ~/.agentbox).
    // Not clap's `env`: an argument clap fills from the environment is printed in the
    // usage line of every "required argument missing" error as if the user had to give it.
    // `Home::from_env` reads AGENTBOX_HOME when --home is left out.
    #[arg(long, global = true)]
    pub home: Option<PathBuf>,
    /// Print machine-readable JSON on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// The box or environment to act on (instead of the first argument or the current
    /// directory).
    #[arg(short = 'b', long = "box", global = true, value_name = "NAME")]
    pub env: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a box of the current project (or -C DIR) at /workspace, on its own git branch: [NAME].
    Create(Box<CreateArgs>),
    /// Run a command in a box and wait for it: [BOX] [--] CMD [ARGS...].
    Exec(ExecArgs),
    /// An interactive shell in a box (or CMD on a terminal): [BOX] [CMD...].
    Shell(BoxCommandArgs),
    /// Run an agent (any command) in a box; with --supervise, relaunch it whenever a
    /// checkout of the box killed it (not when it exits by itself): [BOX] [--] CMD [ARGS...].
    Run(RunArgs),
    /// Start a background process in a box: [BOX] [--] CMD [ARGS...].
    Spawn(BoxCommandArgs),
    /// List a box's processes (the running ones, then the last that ended): [BOX].
    Ps(BoxArg),
    /// Sessions: commands on a terminal the box keeps, which outlive this command, its
    /// terminal and an ssh connection (`session start`; see `attach`, `sessions`).
    #[command(subcommand)]
    Session(SessionCmd),
    /// Attach this terminal to a session of a box (detach: Ctrl-\ then d, config
    /// session.detachKey): [BOX] [SESSION].
    Attach(AttachArgs),
    /// List a box's sessions (--prune removes the exited ones): [BOX].
    Sessions(SessionsArgs),
    /// Output of a spawned process: [BOX] ID.
    Logs(LogsArgs),
    /// Signal a box's process (by id or PID): [BOX] ID.
    Kill(KillArgs),
    /// Start a box (its supervisor and PID 1): [BOX].
    Start(StartArgs),
    /// Stop a box: every process is killed; the tree and history stay: [BOX].
    Stop(BoxArg),
    /// List boxes (this project's, or --all) and versioned directories.
    List(ListArgs),
    /// A box's state, branches (ahead/behind, uncommitted files) and processes; the store's
    /// backend, counts and true disk usage: [BOX].
    Status(StatusArgs),
    /// Give a box a display name (shown by `list`; the box can be referred to by it); an
    /// empty name clears it: [BOX] NAME.
    Rename(Positional),
    /// Remove a box or environment (its nodes are freed by `gc` once unreferenced): BOX.
    Destroy(DestroyArgs),
    /// Remove what boxes left behind: records without a box, stale supervisor files, git
    /// pins of boxes that no longer exist, stray mounts and cgroups; and what interrupted
    /// commits and imports left in the store (half-made layers, staging, unreferenced
    /// layers), never while another agentbox process is using the store.
    Prune(PruneArgs),
    /// Move a box back to HEAD's parent (processes are killed): [BOX].
    Undo(BoxArg),
    /// Make the working tree hold a node's tree and move HEAD there: [ENV] REF.
    Checkout(CheckoutArgs),
    /// Freeze the working tree as a new node (child of HEAD).
    Commit(CommitArgs),
    /// Show the history as a tree, HEAD marked: [ENV].
    Log(LogArgs),
    /// What a node changed relative to its parent: [ENV] [REF].
    Show(Positional),
    /// Differences between two nodes, or a node (default HEAD) and the working tree:
    /// [ENV] [A [B]]; -p shows the changed files' contents.
    Diff(DiffArgs),
    /// List tags, set or move one ([ENV] NAME [REF]), or delete one (-d NAME).
    Tag(TagArgs),
    /// Delete a node; its children move to its parent: [ENV] REF.
    Delete(Positional),
    /// Thin the history: keep structure, tags and the newest K nodes, thin the rest: [ENV].
    Retain(RetainArgs),
    /// Bring a box's branches (agentbox/BOX, agentbox/BOX--SUB) into the host repositories
    /// now: [BOX]. It also happens after every node.
    Sync(BoxArg),
    /// Push a box's branches (agentbox/BOX, and agentbox/BOX--SUB of sub-repositories) from
    /// the host repositories to their remotes, with the host's credentials: [BOX].
    Push(PushArgs),
    /// Fetch on the host (with its credentials) and merge into the box's branches inside
    /// the box: [BOX].
    Pull(PullArgs),
    /// A new box from a node of a box's history (HEAD, or --at REF), on a branch of its
    /// own, with the work it held there; no copy is made: [BOX] [NEW].
    Fork(crate::forkcmds::ForkArgs),
    /// Race candidate commands, each in its own fork of a box, and pick the first (in the
    /// order given, or with --first the soonest) whose test passes:
    /// [BOX] --test CMD -c NAME=CMD...
    Tournament(crate::forkcmds::TournamentArgs),
    /// Layered configuration of new boxes: get, set, unset, list, edit, path, schema,
    /// list-projects.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Trust a project's agentbox.yaml as it is now, so its defaults: may set what only your
    /// own configuration may (broker upstreams, host paths…); untrusted, it may only make
    /// boxes stricter. Any change to the file revokes it: [PATH] (--revoke, --list).
    Trust(TrustArgs),
    /// Base images for boxes: import a rootfs tarball (`docker export`), list, remove.
    #[command(subcommand)]
    Image(ImageCmd),
    /// Claude Code in a box (made for it when the project has none): [BOX] [-- ARGS...].
    Claude(AgentArgs),
    /// Codex in a box: [BOX] [-- ARGS...].
    Codex(AgentArgs),
    /// OpenCode in a box: [BOX] [-- ARGS...].
    Opencode(AgentArgs),
    /// Any agent of the catalogue (`agentbox agents`) in a box: AGENT [BOX] [-- ARGS...].
    Agent(NamedAgentArgs),
    /// The agents agentbox can launch (built in, and from agents.yaml in the agentbox home).
    Agents,
    /// Warm checkpoints of a project: capture a box, start new boxes from it.
    Checkpoint(CheckpointArgs),
    /// Write a bundle: the whole history, one snapshot, or a flat rootfs tar: [ENV] [REF].
    Export(ExportArgs),
    /// Create an environment from a bundle or rootfs tar (file, URL or - for stdin).
    Import(ImportArgs),
    /// Make DIR a versioned directory: its current content becomes the first node.
    Env(EnvArgs),
    /// Mount an environment's directory again (after a reboot): [ENV].
    Mount(Positional),
    /// Unmount an environment's directory (its state is kept): [ENV].
    Unmount(Positional),
    /// Free the data of nodes no longer referenced (--dry-run: list what would be freed).
    Gc(GcArgs),
    /// Check the store's consistency (and repair what can be repaired); reports half-made
    /// data an interrupted commit or import left, with its path and size.
    Fsck(FsckArgs),
    /// Create a loop-mounted btrfs filesystem for the store (root only).
    Setup(SetupArgs),
    #[command(name = "__box-init", hide = true)]
    BoxInit,
    #[command(name = "__supervise", hide = true)]
    Supervise { name: String },
    /// Delete the working files `destroy` set aside (`tmp/discarded-…` of the store).
    #[command(name = "__remove-discarded", hide = true)]
    RemoveDiscarded { entry: String },
}

/// `agentbox config`. Layers, highest first: a command-line flag, the `defaults:` block of
/// the project's agentbox.yaml (workspace), the project's file, the global file, built-in.
#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
    /// Print a key's effective value (a list: one item per line; nothing when unset).
    Get {
        /// A key, e.g. box.network (`agentbox config list` shows them).
        key: String,
        /// Also print which layer (and file) the value comes from.
        #[arg(long)]
        show_origin: bool,
        #[command(flatten)]
        flags: ConfigFlags,
    },
    /// Set a key in the project's file (inside a project) or the global one: KEY VALUE...
    ///
    /// A list key takes its items as separate values (`box.env A=1 B=2`) or one YAML/JSON
    /// list (`box.env '[A=1, B=2]'`, `'[]'` to empty it); other keys take one value.
    /// Values starting with `-` go after `--`.
    Set {
        key: String,
        #[arg(required = true, num_args = 1.., allow_negative_numbers = true)]
        values: Vec<String>,
        #[command(flatten)]
        target: ConfigTarget,
    },
    /// Remove a key from the project's (or global) file: lower layers apply again.
    Unset {
        key: String,
        #[command(flatten)]
        target: ConfigTarget,
    },
    /// Every key with its effective value and description (or origin and file).
    List {
        /// Show the layer and file each value comes from instead of the descriptions.
        #[arg(long)]
        show_origin: bool,
        #[command(flatten)]
        flags: ConfigFlags,
    },
    /// Open the project's (or global) file in $VISUAL or $EDITOR (else vi), then check it.
    Edit {
        #[command(flatten)]
        target: ConfigTarget,
    },
    /// Where each layer's file is (or only the one --global/--project/--workspace names).
    Path {
        #[command(flatten)]
        target: ConfigTarget,
    },
    /// The JSON schema of the configuration files.
    Schema,
    /// Every project this home knows (boxes made from it, or a configuration file), with
    /// its number of boxes, next box number and configuration file.
    ListProjects,
}

/// `agentbox trust`.
#[derive(Debug, Args)]
pub struct TrustArgs {
    /// The project file, or its directory (default: the current project's agentbox.yaml).
    pub path: Option<PathBuf>,
    /// Forget the trust of the file instead: its defaults may only make boxes stricter.
    #[arg(long, conflicts_with = "list")]
    pub revoke: bool,
    /// List the trusted files, and whether each still has the content that was trusted.
    #[arg(long, conflicts_with = "path")]
    pub list: bool,
}

/// Which file `config set|unset|edit|path` acts on (default: the project's file inside a
/// project, else the global file).
#[derive(Debug, Args)]
pub struct ConfigTarget {
    /// The global file (<home>/config.yaml).
    #[arg(long, conflicts_with_all = ["project", "workspace"])]
    pub global: bool,
    /// The project's file (<home>/projects/<key>/config.yaml).
    #[arg(long, conflicts_with = "workspace")]
    pub project: bool,
    /// The `defaults:` block of the project's agentbox.yaml: only `path` (it is edited by hand).
    #[arg(long)]
    pub workspace: bool,
}

/// Values as a command-line flag would set them (the highest layer).
#[derive(Debug, Args)]
pub struct ConfigFlags {
    /// Take KEY as if a flag set it to VALUE (repeatable; a list key collects them).
    #[arg(long = "flag", value_name = "KEY=VALUE")]
    pub flags: Vec<String>,
}

#[derive(Debug, Args)]
pub struct StartArgs {
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// Relaunch the box's last agent (`last_agent`) in a detached session.
    #[arg(long)]
    pub resume: bool,
}

/// How an agent is launched.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// BOX (left out: the current project's only box, else a new box of the project).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// Always make a new box.
    #[arg(long)]
    pub new: bool,
    /// Start its session and return (`agentbox attach BOX NAME` attaches).
    #[arg(short, long)]
    pub detach: bool,
    /// Relaunch the agent when a checkout (rollback) of the box kills it.
    #[arg(long)]
    pub supervise: bool,
    /// The first prompt.
    #[arg(long, value_name = "TEXT")]
    pub prompt: Option<String>,
    /// Keep the agent's own permission prompts (by default they are skipped: the box is the
    /// sandbox).
    #[arg(long)]
    pub ask: bool,
    /// Accepted for compatibility: every box keeps its own copy of the agent's configuration.
    #[arg(long)]
    pub isolate_config: bool,
    /// Arguments for the agent, exactly as given (after `--`).
    #[arg(last = true)]
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct NamedAgentArgs {
    /// The agent's name (`agentbox agents`).
    pub agent: String,
    #[command(flatten)]
    pub launch: AgentArgs,
}

#[derive(Debug, Args)]
pub struct CheckpointArgs {
    #[command(subcommand)]
    pub cmd: Option<CheckpointCmd>,
}

#[derive(Debug, Subcommand)]
pub enum CheckpointCmd {
    /// Capture BOX (its current tree, cleaned of temporary files, logs and its secrets)
    /// as a checkpoint of its project; the box and its processes are not touched.
    Create {
        #[arg(value_name = "BOX")]
        name: Option<String>,
        /// The checkpoint's name (default: <box>-<n>).
        #[arg(long = "name", value_name = "NAME")]
        checkpoint: Option<String>,
        /// Make it the project's default: new boxes start from it.
        #[arg(long)]
        set_default: bool,
        /// Flatten: a self-contained node that depends on no earlier layer.
        #[arg(long)]
        merged: bool,
        /// Move an existing name to this capture.
        #[arg(long)]
        replace: bool,
    },
    /// List the project's checkpoints (the default command).
    #[command(alias = "list")]
    Ls {
        /// Every project's.
        #[arg(long)]
        all: bool,
    },
    /// Show a checkpoint's manifest.
    Show { name: String },
    /// Remove checkpoints (`agentbox gc` then frees their data).
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Write a checkpoint to a file, to import it in another agentbox home (machine).
    Export {
        name: String,
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
    },
    /// Make a checkpoint of the current project from a file `checkpoint export` wrote.
    Import {
        file: PathBuf,
        /// Its name here (default: its name where it was made).
        #[arg(long = "name", value_name = "NAME")]
        checkpoint: Option<String>,
        /// Keep setuid/setgid bits and file capabilities (stripped otherwise: the file may
        /// come from an untrusted box).
        #[arg(long)]
        allow_setuid: bool,
        /// Stop once the bundle expands past SIZE (e.g. 64G); a guard against
        /// decompression bombs.
        #[arg(long, value_name = "SIZE", env = "AGENTBOX_IMPORT_MAX_SIZE")]
        max_size: Option<String>,
    },
    /// Make a checkpoint the project's default (or --clear it).
    SetDefault {
        #[arg(required_unless_present = "clear")]
        name: Option<String>,
        #[arg(long, conflicts_with = "name")]
        clear: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ImageCmd {
    /// Import a rootfs tarball (file, URL, or - for stdin) as image NAME.
    Import { name: String, source: String },
    /// List images.
    List,
    /// Remove an image no box uses.
    Rm { name: String },
}

/// A box: its name, id, unique id prefix, display name or number in the current project;
/// left out, the current project's only box.
#[derive(Debug, Args)]
pub struct BoxArg {
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Every box, not only the current project's.
    #[arg(short, long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct DestroyArgs {
    /// [BOX] (a box, or a versioned directory's environment).
    pub args: Vec<String>,
    /// Also delete the box's branches (`agentbox/BOX…`) from the host repositories.
    #[arg(long)]
    pub delete_branch: bool,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Only say what would be removed.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Leave alone anything younger than this many seconds (a create running right now
    /// may own it).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub min_age: u64,
}

#[derive(Debug, Args)]
pub struct PushArgs {
    /// BOX (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// The remote of each host repository (default: the one its source branch tracks,
    /// else `origin`).
    #[arg(long, value_name = "REMOTE")]
    pub remote: Option<String>,
    /// Overwrite the remote branch even when the push is not a fast-forward.
    #[arg(long)]
    pub force: bool,
    /// Only this repository: `.` for the project root, or a sub-repository's directory
    /// name (repeatable; default: all).
    #[arg(long = "repo", value_name = "SUB")]
    pub repos: Vec<String>,
}

#[derive(Debug, Args)]
pub struct PullArgs {
    /// BOX (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// The remote of each host repository (default: the one its source branch tracks,
    /// else `origin`).
    #[arg(long, value_name = "REMOTE")]
    pub remote: Option<String>,
    /// The remote's branch to merge (default: the upstream of the host branch each box
    /// repository was made from).
    #[arg(long, value_name = "BRANCH")]
    pub branch: Option<String>,
    /// Only this repository: `.` for the project root, or a sub-repository's directory
    /// name (repeatable; default: all).
    #[arg(long = "repo", value_name = "SUB")]
    pub repos: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Name of the box (default: the project directory's name and the box's number).
    pub name: Option<String>,
    /// The project to make the box from (default: the project of the current directory;
    /// outside a project, an empty workspace). A git repository gets a branch of its own.
    #[arg(
        short = 'C',
        long = "from",
        visible_alias = "project",
        value_name = "DIR"
    )]
    pub from: Option<PathBuf>,
    /// An empty /workspace, even inside a project.
    #[arg(long, conflicts_with = "from")]
    pub empty: bool,
    /// Run on an imported image instead of the host's own `/` (see `agentbox image`;
    /// config box.image).
    #[arg(long, value_name = "NAME")]
    pub image: Option<String>,
    /// When DIR is a git repository: copy it as a plain directory instead of giving the box
    /// its own repository on a branch `agentbox/NAME`.
    #[arg(long)]
    pub no_git: bool,
    /// Leave the host's uncommitted and untracked work behind (start from the commit;
    /// config git.carry).
    #[arg(long)]
    pub no_carry: bool,
    /// Carry the host's uncommitted and untracked work (the default; overrides git.carry).
    #[arg(long, conflicts_with = "no_carry")]
    pub carry: bool,
    /// Start the box's branch from this ref instead of HEAD (no carry-over then).
    #[arg(long, value_name = "REF")]
    pub from_branch: Option<String>,
    /// Start from this checkpoint of the project (its installed dependencies, build
    /// outputs and other untracked files), on a fresh branch at the host's commit with the
    /// host's uncommitted work (where both have a path, the checkpoint's is kept, reported).
    #[arg(long, value_name = "CHECKPOINT", conflicts_with_all = ["no_checkpoint", "empty", "from_branch"])]
    pub checkpoint: Option<String>,
    /// Do not start from the project's default checkpoint (config box.defaultCheckpoint).
    #[arg(long)]
    pub no_checkpoint: bool,
    /// From a checkpoint: re-branch at the host's commit but carry none of the host's
    /// uncommitted work over (config box.resyncOnStart).
    #[arg(long)]
    pub no_resync: bool,
    /// Use a checkpoint whose base changed since it was made without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Also copy ignored secret-bearing files (config git.envPatterns: `.env`, `.env.*`,
    /// `*.env`, `.envrc`; config git.withEnv).
    #[arg(long)]
    pub with_env: bool,
    /// Do not copy ignored secret-bearing files (overrides git.withEnv).
    #[arg(long, conflicts_with = "with_env")]
    pub no_with_env: bool,
    /// `host` (the host's network), `none` (loopback only) or `private` (a network of its
    /// own with outbound access through `pasta`, the host's loopback out of reach).
    /// Default: config box.network (built-in: host).
    #[arg(long)]
    pub network: Option<String>,
    /// Forward a host TCP port to a port of a private box: HOST:BOX (on the host's loopback,
    /// 127.0.0.1) or HOSTIP:HOST:BOX (0.0.0.0: every address) (repeatable; needs --network
    /// private).
    #[arg(long = "publish", short = 'p', value_name = "[HOSTIP:]HOST:BOX")]
    pub publish: Vec<String>,
    /// Do not record a node after each command that changed something (config box.capture).
    #[arg(long)]
    pub no_capture: bool,
    /// Record a node after each command that changed something (the default; overrides
    /// box.capture).
    #[arg(long, conflicts_with = "no_capture")]
    pub capture: bool,
    /// Run a credential broker for the box: its commands get ANTHROPIC_BASE_URL,
    /// OPENAI_BASE_URL and a placeholder key; the real key (ANTHROPIC_API_KEY,
    /// CLAUDE_CODE_OAUTH_TOKEN, OPENAI_API_KEY of the shell that starts the box, else
    /// <home>/credentials/) stays on the host (config box.broker).
    #[arg(long)]
    pub broker: bool,
    /// An environment variable set in every command of the box (repeatable; replaces
    /// config box.env). KEY alone takes its value from this shell.
    #[arg(long = "env", value_name = "KEY[=VALUE]", value_parser = env_var)]
    pub vars: Vec<String>,
    /// A path (relative to the box root, `**/` for any depth) whose changes alone never
    /// make a node, besides the defaults (caches, /tmp, logs, shell histories). Repeatable;
    /// replaces config box.ignore.
    #[arg(long, value_name = "PATTERN")]
    pub ignore: Vec<String>,
    /// A host path the box sees besides the host's software (`/srv/datasets`, read-only), or
    /// hides too (`!/opt/private`). Repeatable; replaces config box.hostPaths. The host's
    /// secrets (password hashes, host keys, the user's home, agentbox's own state) are
    /// never shown.
    #[arg(long = "host-path", value_name = "[!]PATH")]
    pub host_paths: Vec<String>,
    /// Memory limit of the box (RAM and swap together), e.g. 512M, 2G (config box.memory).
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Most processes (and threads) the box may run at once (config box.pids).
    #[arg(long, value_name = "N")]
    pub pids: Option<u64>,
    /// CPU time limit in cores, e.g. 1.5 (config box.cpus).
    #[arg(long, value_name = "CORES")]
    pub cpus: Option<f64>,
    /// Disk limit of what the box writes, e.g. 10G (default: none). Enforced by the store's
    /// filesystem: btrfs qgroups, or ext4/xfs project quotas (mounted with prjquota);
    /// refused where it has neither. Writes past it fail with "Disk quota exceeded".
    #[arg(long, value_name = "SIZE")]
    pub disk: Option<String>,
    /// Keep the newest N nodes when thinning after automatic nodes (config box.keep,
    /// built-in 100).
    #[arg(long, value_name = "N")]
    pub keep: Option<u64>,
}

/// Options of every command started in a box.
#[derive(Debug, Args)]
pub struct CommandOpts {
    /// Environment variable for this command (repeatable). KEY alone takes its value from
    /// this shell.
    #[arg(long = "env", value_name = "KEY[=VALUE]", value_parser = env_var)]
    pub vars: Vec<String>,
    /// Working directory inside the box (default: /workspace).
    #[arg(short = 'w', long)]
    pub workdir: Option<String>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "With --json, stdout holds only the JSON result (exit status, node made), so it parses as one document; the command's own output, stdout and stderr, goes to stderr as it runs (`2>out.txt` keeps it)."
)]
pub struct ExecArgs {
    /// BOX (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    #[command(flatten)]
    pub opts: CommandOpts,
    /// Do not record a node for this command.
    #[arg(long)]
    pub no_capture: bool,
    /// Allocate a terminal even when stdin is not one (-t) or never (-T).
    #[arg(short = 't', long, conflicts_with = "no_tty")]
    pub tty: bool,
    #[arg(short = 'T', long)]
    pub no_tty: bool,
    /// The command and its arguments, passed exactly.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub argv: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// BOX (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// Relaunch the command after a checkout (rollback) of the box killed it.
    #[arg(long)]
    pub supervise: bool,
    #[command(flatten)]
    pub opts: CommandOpts,
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub argv: Vec<String>,
}

#[derive(Debug, Args)]
/// `[BOX] [--] CMD…` with the options of a command started in a box (`shell`, `spawn`).
pub struct BoxCommandArgs {
    /// BOX (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    #[command(flatten)]
    pub opts: CommandOpts,
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub argv: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum SessionCmd {
    /// Start a session: CMD on a terminal the box keeps until it exits, then attach to it
    /// (-d: do not): [BOX] [--name NAME] [-d] [--supervise] [--] CMD [ARGS...].
    Start(SessionStartArgs),
    /// List a box's sessions, as `agentbox sessions` does: [BOX] [--prune].
    #[command(visible_alias = "list")]
    Ls(SessionsArgs),
}

#[derive(Debug, Args)]
pub struct SessionStartArgs {
    /// BOX (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// The session's name, unique in the box (default: the command's name, with -2, -3 …
    /// when taken).
    #[arg(long = "name", value_name = "NAME")]
    pub session: Option<String>,
    /// Do not attach: start it and return.
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// Relaunch the command after a checkout (rollback) of the box killed it.
    #[arg(long)]
    pub supervise: bool,
    #[command(flatten)]
    pub opts: CommandOpts,
    /// The command and its arguments, passed exactly.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub argv: Vec<String>,
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// [BOX] [SESSION]: one word is the box when it names one, else a session of the
    /// current project's only box (or of -b BOX); no session: the box's only one.
    #[arg(num_args = 0..=2, value_names = ["BOX", "SESSION"])]
    pub args: Vec<String>,
    /// The keys that detach, as session.detachKey takes them (e.g. "ctrl-]", "ctrl-a d",
    /// "none").
    #[arg(long, value_name = "KEYS")]
    pub detach_key: Option<String>,
    /// Do not replay the session's scrollback before its screen.
    #[arg(long)]
    pub no_history: bool,
}

#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// BOX (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// Remove the exited sessions no terminal is attached to.
    #[arg(long)]
    pub prune: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// [BOX] ID: the process id as `agentbox spawn` and `ps` show it.
    #[arg(required = true, num_args = 1..=2, value_name = "[BOX] ID")]
    pub args: Vec<String>,
    /// Keep printing as the process writes, until it ends.
    #[arg(short, long)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct KillArgs {
    /// [BOX] ID: process id or PID inside the box.
    #[arg(required = true, num_args = 1..=2, value_name = "[BOX] ID")]
    pub args: Vec<String>,
    /// Signal number or name (default TERM).
    #[arg(short, long, default_value = "TERM")]
    pub signal: String,
}

#[derive(Debug, Args)]
pub struct SetupArgs {
    /// Create a btrfs filesystem of this size (e.g. 20G) in a file and mount it for the store.
    #[arg(long, value_name = "SIZE")]
    pub btrfs: String,
    /// Image file (default: /var/lib/agentbox/btrfs.img).
    #[arg(long)]
    pub image: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct EnvArgs {
    /// The directory to version (created if missing).
    pub dir: PathBuf,
    /// Environment name (default: the directory's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Start from this instead of the directory's content: a directory, a rootfs tarball
    /// (.tar, .tar.gz, .tar.zst) or an http(s) URL of one.
    #[arg(long, value_name = "SRC")]
    pub from: Option<String>,
    /// Snapshot backend when the store is created (default: by the filesystem).
    #[arg(long)]
    pub backend: Option<String>,
    /// Message of the first node.
    #[arg(short, long)]
    pub message: Option<String>,
}

#[derive(Debug, Args)]
pub struct CommitArgs {
    /// [ENV]
    pub args: Vec<String>,
    /// Message of the new node (taken verbatim, even when it starts with '-').
    #[arg(short, long, allow_hyphen_values = true)]
    pub message: String,
    /// Command label recorded with the node.
    #[arg(long)]
    pub command: Option<String>,
}

#[derive(Debug, Args)]
pub struct Positional {
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    pub args: Vec<String>,
    /// Also count the box's (or environment's) nodes and branch tips and measure its disk:
    /// a walk of its whole history and data.
    #[arg(short, long)]
    pub usage: bool,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    pub args: Vec<String>,
    /// Show the content differences of changed files (unified diffs; binary and files over
    /// 1 MiB are named only).
    #[arg(short, long)]
    pub patch: bool,
}

#[derive(Debug, Args)]
pub struct CheckoutArgs {
    pub args: Vec<String>,
    /// A running box: restore the tree under its running processes instead of killing
    /// them; the result is a new node holding REF's tree (for an agent rolling itself back).
    #[arg(long)]
    pub keep_processes: bool,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    pub args: Vec<String>,
    /// Only HEAD's ancestors, newest first (instead of the whole tree).
    #[arg(long)]
    pub ancestors: bool,
    /// Only the branch tips.
    #[arg(long, conflicts_with = "ancestors")]
    pub leaves: bool,
    /// Only HEAD and its ancestors, newest first, at most N of them (implies --ancestors).
    #[arg(
        short = 'n',
        long = "max-count",
        value_name = "N",
        conflicts_with = "leaves"
    )]
    pub max_count: Option<usize>,
}

#[derive(Debug, Args)]
pub struct TagArgs {
    pub args: Vec<String>,
    /// Delete the named tag.
    #[arg(short, long, value_name = "NAME")]
    pub delete: Option<String>,
}

#[derive(Debug, Args)]
pub struct RetainArgs {
    pub args: Vec<String>,
    /// How many of the newest nodes to keep untouched.
    #[arg(long, default_value_t = 20)]
    pub keep: u64,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    pub args: Vec<String>,
    /// history (every node), snapshot (one node), rootfs (a plain tar for `docker import`).
    #[arg(long, default_value = "history")]
    pub kind: String,
    /// zstd, gzip or none.
    #[arg(long, default_value = "zstd")]
    pub compress: String,
    /// Output file, or - for stdout.
    #[arg(short, long)]
    pub output: PathBuf,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Bundle or rootfs tar: a file, an http(s) URL, or - for stdin.
    pub source: String,
    /// Directory of the new environment (required; where its files appear).
    #[arg(long)]
    pub dir: PathBuf,
    /// Name of the new environment (default: the directory's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Accept device nodes in the archive.
    #[arg(long)]
    pub allow_devices: bool,
    /// Keep setuid/setgid bits and file capabilities (security.capability) of imported
    /// files. Without it they are stripped, since a bundle may come from an untrusted box.
    /// (overlayfs attributes, trusted.overlay.* and user.overlay.*, and every other
    /// trusted.* or security.* attribute are never imported.)
    #[arg(long)]
    pub allow_setuid: bool,
    /// Stop the import once the archive expands past SIZE bytes of tar data (e.g. 64G,
    /// 512M); a guard against decompression bombs. Default: 64 times the bundle's
    /// compressed size, at least 256M.
    #[arg(long, value_name = "SIZE", env = "AGENTBOX_IMPORT_MAX_SIZE")]
    pub max_size: Option<String>,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Show what would be removed (nodes, layers, disk space), removing nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct FsckArgs {
    /// Repair what can be repaired.
    #[arg(long)]
    pub repair: bool,
}

/// An `--env` value: `KEY=VALUE`, or `KEY` alone, which takes the value `KEY` has in this
/// process's environment (as `docker run -e KEY` does: the user named the variable). A `KEY`
/// this environment does not set is refused rather than dropped, so a typo is not silent.
fn env_var(s: &str) -> Result<String, String> {
    if let Some((key, _)) = s.split_once('=') {
        if key.is_empty() {
            return Err("the variable has no name (expected KEY=VALUE)".to_owned());
        }
        return Ok(s.to_owned());
    }
    if s.is_empty() {
        return Err("expected KEY=VALUE, or KEY to pass this shell's value".to_owned());
    }
    match std::env::var(s) {
        Ok(value) => Ok(format!("{s}={value}")),
        Err(_) => Err(format!(
            "{s} is not set in this shell (or not UTF-8); give its value: --env {s}=VALUE"
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn env_values_take_the_shell_s_value_or_are_refused() {
        assert_eq!(super::env_var("A=b=c"), Ok("A=b=c".to_owned()));
        assert_eq!(super::env_var("A="), Ok("A=".to_owned()));
        assert!(super::env_var("=x").is_err());
        let path = std::env::var("PATH").expect("PATH is set for tests");
        assert_eq!(super::env_var("PATH"), Ok(format!("PATH={path}")));
        let unset = super::env_var("AGENTBOX_TEST_SURELY_UNSET_VARIABLE").expect_err("unset");
        assert!(
            unset.contains("--env AGENTBOX_TEST_SURELY_UNSET_VARIABLE=VALUE"),
            "{unset}"
        );
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
