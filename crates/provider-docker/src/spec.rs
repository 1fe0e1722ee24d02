//! The container a box runs in, from its settings: the same at creation and whenever a
//! checkout recreates it from another node's image.

use agentbox_boxes::cgroup::Limits;
use agentbox_core::home::Home;
use agentbox_docker::container::{self, ContainerSpec};
use agentbox_sandbox::proto::Network;

use crate::names;

/// What the container runs: nothing but staying up (every command is an exec into it),
/// in any image with a `sh`; it ends at once on `SIGTERM` (Docker's init, PID 1, forwards
/// it), so that a stop does not wait out the grace period.
pub const KEEP_ALIVE: [&str; 3] = [
    "sh",
    "-c",
    "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done",
];

/// Where a box's files are, and where its commands start.
pub const WORKSPACE: &str = "/workspace";

/// The settings a box's container is made with.
pub struct BoxSettings<'a> {
    /// `KEY=VALUE` each.
    pub env: &'a [String],
    pub limits: &'a Limits,
    pub network: Network,
}

/// The container of box `name` of home `home`, on image `image`.
pub fn container(home: &Home, name: &str, image: &str, s: &BoxSettings<'_>) -> ContainerSpec {
    let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    ContainerSpec {
        name: names::container(name),
        image: image.to_owned(),
        cmd: KEEP_ALIVE.iter().map(|s| (*s).to_owned()).collect(),
        // `AGENTBOX_BOX` tells the in-box `agentbox` it runs in a box (and which).
        env: s
            .env
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| *k != "AGENTBOX_BOX")
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .chain([("AGENTBOX_BOX".to_owned(), name.to_owned())])
            .collect(),
        workdir: Some(WORKSPACE.to_owned()),
        user: None,
        labels: names::labels(home, name),
        limits: container::Limits {
            memory_bytes: s.limits.memory_bytes.map(to_i64),
            pids: s.limits.pids.map(to_i64),
            // Whole billionths: the engine's unit.
            nano_cpus: s.limits.cpus.map(|c| (c * 1e9).round() as i64),
        },
        // A box without network gets none; any other setting the engine's default network
        // (a private network of the engine's, with outbound access).
        network: (s.network == Network::None).then(|| "none".to_owned()),
    }
}
