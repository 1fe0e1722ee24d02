//! The hidden commands agentbox runs itself: a box's supervisor (`__supervise`), its PID 1
//! (`__box-init`), a Docker box's relay (`__docker-relay`), and the removal of the working files `destroy` set aside
//! (`__remove-discarded`).

use super::ctx::Ctx;
use super::relayed::CliRelay;
use crate::errors::CliResult;

/// `__supervise NAME`: run box `NAME`'s supervisor, which answers the in-box `agentbox`
/// through [`CliRelay`].
pub(super) fn supervise(ctx: Ctx, name: &str) -> CliResult {
    // Taken first: nothing the supervisor starts may inherit it.
    let startup = agentbox_sandbox::startup::take_pipe();
    let relay = std::sync::Arc::new(CliRelay {
        home: ctx.home.clone(),
    });
    let result = agentbox_provider_local::supervisor::run(ctx.home, name, relay);
    if let (Err(e), Some(mut pipe)) = (&result, startup) {
        // Why it could not start, for the command that started it.
        let failure = agentbox_provider_local::client::StartFailure { error: e.into() };
        if let Ok(text) = serde_json::to_string(&failure) {
            agentbox_sandbox::startup::report(&mut pipe, &text);
        }
    }
    Ok(result?)
}

/// `__docker-relay NAME`: run Docker box `NAME`'s relay, which answers its in-box
/// `agentbox` through [`CliRelay`] (see `agentbox_provider_docker::relay::host`).
pub(super) fn docker_relay(ctx: Ctx, name: &str) -> CliResult {
    // Its own session: it outlives the command that started it.
    let _ = rustix::process::setsid();
    let relay = std::sync::Arc::new(CliRelay {
        home: ctx.home.clone(),
    });
    let provider = agentbox_provider_docker::DockerProvider::new(ctx.home.clone());
    Ok(agentbox_provider_docker::relay::host::serve(
        &provider, name, relay,
    )?)
}

/// `__remove-discarded ENTRY`: delete a destroyed box's working files set aside in the
/// store's `tmp/`.
pub(super) fn remove_discarded(ctx: &Ctx, entry: &str) -> CliResult {
    // Its own session: the terminal `destroy` ran on may close before it is done.
    let _ = rustix::process::setsid();
    // Its starter waits for this line: the store lock is held (see
    // `Store::remove_discarded_then`).
    Ok(ctx.boxes().store()?.remove_discarded_then(entry, || {
        use std::io::Write;
        let mut out = std::io::stdout();
        let _ = out.write_all(b"held\n").and_then(|()| out.flush());
    })?)
}
