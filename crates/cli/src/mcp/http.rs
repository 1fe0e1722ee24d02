//! `agentbox mcp --http`: the same MCP server over streamable HTTP (rmcp's service on axum),
//! at `/mcp`, behind the API's bearer token ([`crate::api_token`]), on loopback unless
//! `--addr` says otherwise (then a warning, and that host is allowed by the SDK's own
//! `Host` check, which otherwise takes loopback names only). `GET /api/hello?nonce=N` answers
//! without the token: the server's proof that it holds it (the routes `proof` makes: the
//! command line passes `serve`'s, so that this module does not depend on `serve`), for a
//! client that reconnects with a stored token.

use std::net::SocketAddr;
use std::sync::Arc;

use agentbox_core::Home;
use axum::Router;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::api_token::{self, Token};
use crate::errors::{CliError, CliResult, ExitCode};
use crate::mcp::server::Tools;

/// The most bytes a request body may have (as the HTTP API's).
const BODY_LIMIT: usize = 1 << 20;

/// Serve MCP over HTTP for home `home` on `addr` until killed.
pub fn serve(
    home: Home,
    addr: SocketAddr,
    proof: impl FnOnce(Arc<Token>, u16) -> Router,
) -> CliResult {
    let token = Arc::new(Token::load_or_create(&home)?);
    let failed =
        |e: &dyn std::fmt::Display| CliError::new(ExitCode::Failure, format!("mcp: {e}"), None);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| failed(&e))?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            CliError::new(
                ExitCode::Failure,
                format!("cannot listen on {addr}: {e}"),
                Some("pick another port with --addr 127.0.0.1:PORT".into()),
            )
        })?;
        let bound = listener.local_addr().map_err(|e| failed(&e))?;
        let mut config = StreamableHttpServerConfig::default()
            .with_max_request_body_bytes(BODY_LIMIT);
        if !bound.ip().is_loopback() {
            eprintln!(
                "agentbox: warning: MCP listens on {bound}, reachable from other machines; anyone holding the token drives every box"
            );
            let mut hosts = config.allowed_hosts.clone();
            hosts.push(bound.ip().to_string());
            hosts.push(bound.to_string());
            config = config.with_allowed_hosts(hosts);
        }
        let service = StreamableHttpService::new(
            move || Ok(Tools::new(home.clone(), None)),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let router = Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn_with_state(
                token.clone(),
                api_token::require,
            ))
            // The proof of the token (as `agentbox serve`'s), outside the token check.
            .merge(proof(token.clone(), bound.port()));
        eprintln!("agentbox: serving MCP on http://{bound}/mcp (streamable HTTP)");
        eprintln!(
            "  token: in {}; send it as `Authorization: Bearer $(cat {})`",
            token.path.display(),
            token.path.display()
        );
        crate::http_serve::run(listener, router).await;
        Ok(())
    })
}
