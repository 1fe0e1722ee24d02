//! `agentbox create`: its arguments.

use std::path::PathBuf;

use clap::Args;

use super::common::env_var;

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
    /// config box.image). With `--provider docker`: the Docker image of the box's
    /// container (it must be on the engine: nothing is pulled).
    #[arg(long, value_name = "NAME")]
    pub image: Option<String>,
    /// Where the box runs: `local` (namespaces on this machine, the default) or `docker` (a
    /// container on a Docker engine; config box.provider).
    #[arg(long, value_name = "PROVIDER")]
    pub provider: Option<String>,
    /// With `--provider docker`: the engine, as a URL (`unix:///…`, `tcp://HOST:2376`,
    /// `ssh://USER@HOST`) (default: DOCKER_HOST, else the current docker context, else the
    /// local socket).
    #[arg(long, value_name = "URL")]
    pub docker_host: Option<String>,
    /// With `--provider docker`: build the box's image from this Dockerfile (its directory
    /// is the build context), tagged by the fingerprint of what it bakes in.
    #[arg(long, value_name = "FILE", conflicts_with = "image")]
    pub dockerfile: Option<PathBuf>,
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
