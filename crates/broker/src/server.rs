//! The broker of one box: its own small runtime, the listeners it serves (a TCP one inside
//! the box's network namespace, a unix socket in the box's inbox), and its spec, which the
//! owner may replace while it runs.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;

use crate::endpoint::{Spec, Token};
use crate::proxy::{handle, State};
use crate::{BrokerError, Result};

/// Most connections one broker serves at once: a box must not be able to exhaust the
/// supervisor's descriptors or memory. Beyond it, new connections wait in the listen
/// backlog until one ends.
pub const MAX_CONNECTIONS: usize = 64;

/// How long a connection may take to send a request's headers: idle connections do not
/// hold one of [`MAX_CONNECTIONS`] for long. Bodies (a long prompt, a long answer) have no
/// limit.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// How long connecting to an upstream may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A running broker. Dropping it stops it: its listeners close, connections in flight are
/// cut.
pub struct Broker {
    runtime: tokio::runtime::Runtime,
    state: Arc<State>,
    slots: Arc<Semaphore>,
}

/// One listener being served; dropping it stops accepting on it (connections already
/// accepted go on).
#[must_use = "the listener is served only while this is kept"]
pub struct Serving(tokio::task::AbortHandle);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Broker {
    /// Start a broker accepting `token` and forwarding with `spec` (its upstreams checked).
    /// It serves nothing until given a listener.
    pub fn start(token: Token, spec: Spec) -> Result<Broker> {
        spec.upstreams.check()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            // Forwarding is I/O-bound: one thread moves every connection's bytes.
            .worker_threads(1)
            .thread_name("broker")
            .enable_io()
            .enable_time()
            .build()
            .map_err(BrokerError::Start)?;
        let client = |direct: bool| {
            let b = reqwest::Client::builder()
                // A redirect could carry the credential to another host.
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(CONNECT_TIMEOUT)
                .tcp_nodelay(true);
            let b = if direct { b.no_proxy() } else { b };
            b.build()
                .map_err(|e| BrokerError::Start(std::io::Error::other(e)))
        };
        let state = Arc::new(State {
            token,
            spec: RwLock::new(Arc::new(spec)),
            client: client(false)?,
            direct: client(true)?,
        });
        Ok(Broker {
            runtime,
            state,
            slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        })
    }

    /// The placeholder this broker accepts.
    pub fn token(&self) -> &Token {
        &self.state.token
    }

    /// The spec requests are forwarded with now.
    pub fn spec(&self) -> Arc<Spec> {
        self.state.spec()
    }

    /// Forward later requests with `spec` (new credentials, say); requests in flight keep
    /// the one they started with.
    pub fn update(&self, spec: Spec) -> Result<()> {
        spec.upstreams.check()?;
        *self.state.spec.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(spec);
        Ok(())
    }

    /// Serve `listener` (bound already, wherever it was bound: the box's network namespace).
    pub fn serve_tcp(&self, listener: std::net::TcpListener) -> Result<Serving> {
        listener.set_nonblocking(true).map_err(BrokerError::Io)?;
        let _in = self.runtime.enter();
        let listener = tokio::net::TcpListener::from_std(listener).map_err(BrokerError::Io)?;
        let (state, slots) = (self.state.clone(), self.slots.clone());
        let task = self.runtime.spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                match listener.accept().await {
                    Ok((conn, _)) => {
                        // Small events of a stream go out at once, not after a delay.
                        let _ = conn.set_nodelay(true);
                        tokio::spawn(serve_connection(state.clone(), conn, slot));
                    }
                    Err(e) => pause_after(e).await,
                }
            }
        });
        Ok(Serving(task.abort_handle()))
    }

    /// Serve `listener`, a unix socket (the box's inbox holds it).
    pub fn serve_unix(&self, listener: std::os::unix::net::UnixListener) -> Result<Serving> {
        listener.set_nonblocking(true).map_err(BrokerError::Io)?;
        let _in = self.runtime.enter();
        let listener = tokio::net::UnixListener::from_std(listener).map_err(BrokerError::Io)?;
        let (state, slots) = (self.state.clone(), self.slots.clone());
        let task = self.runtime.spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                match listener.accept().await {
                    Ok((conn, _)) => {
                        tokio::spawn(serve_connection(state.clone(), conn, slot));
                    }
                    Err(e) => pause_after(e).await,
                }
            }
        });
        Ok(Serving(task.abort_handle()))
    }
}

/// After a failed accept (out of descriptors, say), wait a little rather than spin.
async fn pause_after(e: std::io::Error) {
    eprintln!("broker: accept failed: {e}");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Serve HTTP/1.1 on one connection until it closes; its slot is given back then.
async fn serve_connection<IO>(state: Arc<State>, io: IO, slot: tokio::sync::OwnedSemaphorePermit)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| handle(state.clone(), req));
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        // Each frame's chunk header and data go out in one buffer: fewer, larger writes
        // (measured: a streamed answer moves about a quarter faster than with writev); a
        // frame is still written as soon as no other is ready, so events are not held.
        .writev(false)
        .serve_connection(TokioIo::new(io), service)
        .await;
    drop(slot);
}
