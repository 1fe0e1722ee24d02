//! `agentbox claude|codex|opencode` and `agentbox agent NAME`: its arguments.

use clap::Args;

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
