//! `agentbox mcp`: its arguments.

use std::net::SocketAddr;

use clap::Args;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Serve over streamable HTTP at http://ADDR/mcp instead of stdin and stdout; every
    /// request needs the token kept in the agentbox home (`api-token`, as `agentbox serve`).
    #[arg(long)]
    pub http: bool,
    /// Where to listen with --http. Loopback by default; any other address is reachable from
    /// other machines (a warning says so).
    #[arg(
        long,
        value_name = "IP:PORT",
        default_value = "127.0.0.1:7879",
        requires = "http"
    )]
    pub addr: SocketAddr,
}
