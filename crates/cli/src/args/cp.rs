//! `agentbox cp` and `agentbox download`: their arguments.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct CpArgs {
    /// Sources then the destination: `BOX:PATH` is a path in box BOX (relative ones under
    /// /workspace), anything else a host path (write `./a:b` for a host name with a colon).
    /// Exactly one side is a box.
    #[arg(value_name = "[BOX:]PATH", num_args = 2.., required = true)]
    pub paths: Vec<String>,
    /// Leave out names matching this glob (`*`, `?`), at any depth; repeatable.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Stop with an error past this much file data (e.g. 500M, 2G; default 8G).
    #[arg(long, value_name = "SIZE")]
    pub max_size: Option<String>,
}

#[derive(Debug, Args)]
pub struct DownloadArgs {
    /// The box (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// The host directory to write to (default: ./BOX); made when missing.
    #[arg(long, value_name = "DIR")]
    pub to: Option<PathBuf>,
    /// Everything in /workspace, not only what git does not ignore.
    #[arg(long)]
    pub all: bool,
    /// Ignored env files (`.env*`) too.
    #[arg(long, conflicts_with = "all")]
    pub with_env: bool,
    /// Stop with an error past this much file data (e.g. 500M, 2G; default 8G).
    #[arg(long, value_name = "SIZE")]
    pub max_size: Option<String>,
}
