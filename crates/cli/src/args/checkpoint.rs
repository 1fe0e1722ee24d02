//! `agentbox checkpoint`: its arguments.

use std::path::PathBuf;

use clap::{Args, Subcommand};

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
