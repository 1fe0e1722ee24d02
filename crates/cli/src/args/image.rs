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
    /// Build a Docker box image from a Dockerfile (its directory is the build context),
    /// tagged by the fingerprint of what it bakes in: the tag changes exactly when a file,
    /// name or mode of the context changes. Use it with `create --provider docker --image`.
    Build {
        /// The Dockerfile.
        #[arg(long, value_name = "FILE", default_value = "Dockerfile")]
        dockerfile: std::path::PathBuf,
        /// The engine, as a URL (default: DOCKER_HOST, else the current docker context,
        /// else the local socket).
        #[arg(long, value_name = "URL")]
        docker_host: Option<String>,
    },
}
