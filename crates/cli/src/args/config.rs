//! `agentbox config`: its arguments.

use clap::{Args, Subcommand};

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
