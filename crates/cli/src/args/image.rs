//! `agentbox image`: its arguments.

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum ImageCmd {
    /// Import a rootfs tarball (file, URL, or - for stdin) as image NAME.
    Import { name: String, source: String },
    /// List images.
    List,
    /// Remove an image no box uses.
    Rm { name: String },
}
