//! `agentbox mcp`: the Model Context Protocol server, over stdio (or HTTP), on the official SDK
//! (`rmcp`). A front end like the command line, and as thin: a tool parses its input, calls
//! one operation of the façade and answers with its typed result as structured content; a
//! box error is a tool error with the command line's message and hint.
//!
//! * [`params`]: each tool's input, with its JSON schema;
//! * [`server`]: the server's state, and where a call runs (host or relay);
//! * [`tools`]: the tools, one façade operation each;
//! * [`reply`]: results and errors as tool results;
//! * [`inbox`]: inside a box, the tools the relay answers, sent as its requests;
//! * [`http`]: the same server over streamable HTTP (`--http`), behind a bearer token.
//!
//! Stdout carries the protocol alone: nothing else of this process writes to it (a command
//! run in a box has its output collected, never attached to this process's descriptors).

pub(crate) mod http;
mod inbox;
pub(crate) mod ops;
mod params;
pub(crate) mod reply;
pub(crate) mod server;
mod tools;

use agentbox_core::Home;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::{tool_handler, ServerHandler, ServiceExt};

use crate::errors::{CliError, CliResult, ExitCode};
use server::Tools;

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Tools {
    /// The tools [`Tools::offered`] (what the macro would list, less what a box may not
    /// call).
    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let cache_hints = context
            .protocol_version()
            .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28);
        Ok(rmcp::model::ListToolsResult {
            result_type: Some(rmcp::model::ResultType::COMPLETE),
            tools: self.offered(),
            meta: None,
            next_cursor: None,
            ttl_ms: cache_hints.then_some(0),
            cache_scope: cache_hints.then_some(rmcp::model::CacheScope::Public),
        })
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("agentbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "agentbox gives each coding agent its own box: an isolated, versioned copy of a \
                 project on its own git branch. Create a box of a project (create_box), run \
                 commands in it (exec), read and write its files (read_file, write_file, \
                 list_files), read its history (log, show, diff), roll it back (checkout, \
                 undo), name nodes (tag), fork it, race candidates (tournament), save \
                 checkpoints, see its status, destroy it. A box is named by its name, id or \
                 number; left out, it is the current project's only box.",
            )
    }
}

/// Serve MCP on this process's stdin and stdout until the client closes them: for agentbox
/// home `home` on the host, or, inside a box, for that box through the relay.
pub fn serve(home: Option<Home>) -> CliResult {
    let inbox = inbox::InBox::detect();
    let home = match (home, &inbox) {
        (Some(h), _) => h,
        // Inside a box the host's home answers; this one is never read.
        (None, Some(_)) => Home::at(std::path::PathBuf::from("/nonexistent")),
        (None, None) => Home::from_env()?,
    };
    let failed =
        |e: &dyn std::fmt::Display| CliError::new(ExitCode::Failure, format!("mcp: {e}"), None);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| failed(&e))?;
    runtime.block_on(async {
        let server = Tools::new(home, inbox)
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| failed(&e))?;
        server.waiting().await.map_err(|e| failed(&e))?;
        Ok(())
    })
}
