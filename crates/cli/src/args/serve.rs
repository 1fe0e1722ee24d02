//! `agentbox serve`: its arguments.

use std::net::SocketAddr;

use clap::Args;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen. Loopback by default; any other address is reachable from other
    /// machines (a warning says so), and the token is all that guards the boxes.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:7878")]
    pub addr: SocketAddr,
    /// Seconds a request may take before it is answered 504 (an operation already running
    /// goes on).
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout: u64,
}
