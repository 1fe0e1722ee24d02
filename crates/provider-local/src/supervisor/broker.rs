//! The box's credential broker (see `agentbox_broker`), run in the supervisor when the
//! owner asks ([`Request::Broker`](crate::proto::Request::Broker) on the host socket):
//! served on `broker.sock` in the box's inbox (`/run/agentbox/ctl/broker.sock` inside) and
//! on `127.0.0.1:PORT` inside the box's network namespace. On the host's network that is
//! the host's loopback, bound once; a box with a network of its own gets a new namespace at
//! every (re)start, so the port is bound again there — the same port, so the base URL an
//! agent was given stays right across checkouts.
//!
//! Invariant: the real credential is in this process's memory only (the broker's spec);
//! the box learns the endpoint (placeholder and port), which every command of the box
//! gets in its environment while the broker runs.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;

use agentbox_broker::{Broker, Endpoint, Serving, Spec, Token};

use super::*;

pub(super) struct BrokerState {
    broker: Broker,
    endpoint: Endpoint,
    _unix: Serving,
    /// The TCP listener being served (`None` while the box's current namespace has none:
    /// binding it there failed, which the supervisor's log says).
    tcp: Option<Serving>,
}

/// Start the broker with `spec`, or give the running one `spec`; answer with its endpoint.
pub(super) fn start_or_update(shared: &Arc<Shared>, conn: &OwnedFd, spec: Spec) -> Result<()> {
    let mut slot = lock(&shared.broker);
    if let Some(state) = slot.as_mut() {
        state.broker.update(spec.clone())?;
        state.endpoint = Endpoint::new(
            state.endpoint.port,
            state.broker.token().clone(),
            &spec.credentials,
        );
        let endpoint = state.endpoint.clone();
        drop(slot);
        reply(conn, &Reply::Broker { endpoint }, &[]);
        return Ok(());
    }
    let broker = Broker::start(Token::generate()?, spec.clone())?;
    let socket = shared.dirs.inbox().join(agentbox_broker::SOCKET_NAME);
    let _ = fs_err::remove_file(&socket);
    let unix =
        std::os::unix::net::UnixListener::bind(&socket).map_err(|e| BoxError::io(&socket, e))?;
    // Any user of the box may reach it (the token decides); the inbox is the box's alone.
    fs_err::set_permissions(&socket, std::fs::Permissions::from_mode(0o666))?;
    let unix = broker.serve_unix(unix)?;
    let listener = listen_in_box(shared, 0)?;
    let port = listener
        .local_addr()
        .map_err(|e| BoxError::Supervisor(format!("broker listener: {e}")))?
        .port();
    let tcp = broker.serve_tcp(listener)?;
    let endpoint = Endpoint::new(port, broker.token().clone(), &spec.credentials);
    eprintln!(
        "credential broker of box {:?} ready on 127.0.0.1:{port} in the box and {}",
        shared.name,
        socket.display()
    );
    *slot = Some(BrokerState {
        broker,
        endpoint: endpoint.clone(),
        _unix: unix,
        tcp: Some(tcp),
    });
    drop(slot);
    reply(conn, &Reply::Broker { endpoint }, &[]);
    Ok(())
}

/// After the box (re)started: a box with a network namespace of its own gets the broker's
/// port in the new one.
pub(super) fn on_start(shared: &Shared) {
    if shared.rec.network == Network::Host {
        return;
    }
    let mut slot = lock(&shared.broker);
    let Some(state) = slot.as_mut() else {
        return;
    };
    // The previous namespace is gone with the previous generation.
    state.tcp = None;
    match listen_in_box(shared, state.endpoint.port).and_then(|l| Ok(state.broker.serve_tcp(l)?)) {
        Ok(serving) => state.tcp = Some(serving),
        Err(e) => eprintln!(
            "credential broker: no listener on port {} in the restarted box: {e}",
            state.endpoint.port
        ),
    }
}

/// The environment the broker gives every command of the box (none while it is not
/// running).
pub(super) fn env(shared: &Shared) -> Vec<(String, String)> {
    lock(&shared.broker)
        .as_ref()
        .map(|s| s.endpoint.env())
        .unwrap_or_default()
}

/// A listener on `127.0.0.1:port` in the box's network namespace.
fn listen_in_box(shared: &Shared, port: u16) -> Result<TcpListener> {
    if shared.rec.network == Network::Host {
        // The box's network namespace is the host's, which is ours.
        return TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .map_err(|e| BoxError::Supervisor(format!("broker listener: {e}")));
    }
    crate::netns::listen_in(
        &shared.exe,
        launcher_pid(shared)?,
        shared.rec.rootless,
        port,
    )
}

/// The running box's launcher (whose namespaces the box's are), waiting out a restart.
fn launcher_pid(shared: &Shared) -> Result<u32> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(pid) = lock(&shared.box_).as_ref().map(|g| g.running.launcher.id()) {
            return Ok(pid);
        }
        if std::time::Instant::now() > deadline {
            return Err(BoxError::Supervisor(
                "the box did not come back from a restart within 30 s".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
