//! Command-line arguments.
//!
//! Commands that act on a box or environment take it as an optional first positional
//! argument (or `-b NAME`): a name, a box's id, unique id prefix, display name or number in
//! the current project. When it is left out, it is the versioned directory containing the
//! current directory, else the current project's only box, else the only one there is.
//!
//! This module is the command line itself ([`Cli`], [`Command`]: their doc comments are the
//! help text); each command's own arguments are in the file named after it, the options
//! several share in `common`. It imports nothing of the commands.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

mod agent;
mod attach;
mod checkout;
mod checkpoint;
mod commit;
mod common;
mod config;
mod cp;
mod create;
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
mod kill;
mod list;
mod log;
mod logs;
mod mcp;
mod prune;
mod pull;
mod push;
mod retain;
mod run;
mod serve;
mod session;
mod setup;
mod start;
mod status;
mod tag;
mod tournament;
mod trust;

pub use self::agent::{AgentArgs, NamedAgentArgs};
pub use self::attach::AttachArgs;
pub use self::checkout::CheckoutArgs;
pub use self::checkpoint::{CheckpointArgs, CheckpointCmd};
pub use self::commit::CommitArgs;
pub use self::common::{parse_size, BoxArg, BoxCommandArgs, CommandOpts, Positional};
pub use self::config::{ConfigCmd, ConfigFlags, ConfigTarget};
pub use self::cp::{CpArgs, DownloadArgs};
pub use self::create::CreateArgs;
pub use self::destroy::DestroyArgs;
pub use self::diff::DiffArgs;
pub use self::env::EnvArgs;
pub use self::exec::ExecArgs;
pub use self::export::ExportArgs;
pub use self::fork::ForkArgs;
pub use self::fsck::FsckArgs;
pub use self::gc::GcArgs;
pub use self::image::ImageCmd;
pub use self::import::ImportArgs;
pub use self::kill::KillArgs;
pub use self::list::ListArgs;
pub use self::log::LogArgs;
pub use self::logs::LogsArgs;
pub use self::mcp::McpArgs;
pub use self::prune::PruneArgs;
pub use self::pull::PullArgs;
pub use self::push::PushArgs;
pub use self::retain::RetainArgs;
pub use self::run::RunArgs;
pub use self::serve::ServeArgs;
pub use self::session::{SessionCmd, SessionStartArgs, SessionsArgs};
pub use self::setup::SetupArgs;
pub use self::start::StartArgs;
pub use self::status::StatusArgs;
pub use self::tag::TagArgs;
pub use self::tournament::TournamentArgs;
pub use self::trust::TrustArgs;

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
    #[command(alias = "ls")]
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
    Fork(ForkArgs),
    /// Copy files between a box and the host, either way, directories too:
    /// [BOX:]SRC... [BOX:]DST. Into a box the change is a node; out of a box only files
    /// and directories are made (its symlinks, hard links and devices are skipped).
    Cp(CpArgs),
    /// Bring a box's /workspace to a host directory (--to DIR, default ./BOX): what git
    /// does not ignore and the repository (--all: everything; --with-env: ignored .env
    /// files too): [BOX].
    Download(DownloadArgs),
    /// Race candidate commands, each in its own fork of a box, and pick the first (in the
    /// order given, or with --first the soonest) whose test passes:
    /// [BOX] --test CMD -c NAME=CMD...
    Tournament(TournamentArgs),
    /// Serve MCP (the Model Context Protocol) on stdin and stdout: boxes as tools for an
    /// agent or any MCP client.
    ///
    /// Tools create boxes, run commands in them, read and write their files, read and roll
    /// back their history, fork them, race candidates, checkpoint and destroy them. Inside a
    /// box it acts on that box only, as the in-box agentbox does. Add it to Claude Code with
    /// `claude mcp add agentbox -- agentbox mcp`; with --http, over streamable HTTP on
    /// loopback, behind the token `agentbox serve` uses.
    Mcp(McpArgs),
    /// Serve the HTTP API (JSON, OpenAPI document at /api/openapi.json, server-sent events
    /// at /api/events) on loopback: every request needs the token kept in the agentbox home
    /// (`api-token`, made on first serve): [--addr IP:PORT].
    Serve(ServeArgs),
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

#[cfg(test)]
mod tests {

    #[test]
    fn the_command_line_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
