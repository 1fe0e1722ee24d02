//! The accept loop of `agentbox serve` and `agentbox mcp --http` (hyper's HTTP/1 on tokio,
//! instead of `axum::serve`, which bounds neither): at most [`MAX_CONNECTIONS`] connections
//! at once — one past it is closed as soon as it is accepted — and a request's head must
//! arrive within [`HEADER_READ_TIMEOUT`] of the connection being ready for one (also while
//! a kept-alive connection idles between requests), or the connection is closed.
//!
//! Why: anyone who reaches the port (a box on the host's network does) could otherwise
//! open connections that send half a request head and never finish it, until the server
//! ran out of file descriptors and answered no one, the token's holder included. Now such
//! connections end after the timeout, and the server's descriptors stay bounded; an
//! answer being streamed (the event stream) is not a head being read and is not cut.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The most connections served at once.
pub const MAX_CONNECTIONS: usize = 512;
/// How long a request's head may take to arrive.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serve `router` on `listener` until the process ends.
pub async fn run(listener: TcpListener, router: Router) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // The client gave up before it was accepted: nothing to do.
            Err(e) if is_connection_error(&e) => continue,
            // Out of descriptors or memory: wait for some to be freed rather than spin.
            Err(_) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // Full: closed at once (dropped), before anything of it is read.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        // The event stream's small writes go out at once.
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let mut http = http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            // A connection's error (a timeout, a client gone) ends that connection only.
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
            drop(slot);
        });
    }
}

/// An accept error about one connection, not about the server.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
