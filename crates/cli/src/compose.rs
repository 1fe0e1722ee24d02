//! The composition root: the façade over the providers this binary wires in. Every front
//! end of the binary (the commands, the MCP server) builds its [`Boxes`] here, so they all
//! run the same boxes the same way.

use agentbox_boxes::Boxes;
use agentbox_core::Home;

/// Boxes of `home`, run by the local provider, and those made with `--provider docker` by
/// the Docker provider (which connects to an engine only when one of its boxes needs it).
pub fn boxes(home: &Home) -> Boxes {
    let local = std::sync::Arc::new(agentbox_provider_local::local::LocalProvider::new(
        home.clone(),
    ));
    let mut docker = agentbox_provider_docker::DockerProvider::new(home.clone());
    // Its boxes' relays are this binary (`__docker-relay`).
    if let Ok(exe) = std::env::current_exe() {
        docker = docker.with_relay(exe);
    }
    let docker = std::sync::Arc::new(docker);
    Boxes::new(home.clone(), local).with_provider(docker)
}
