//! A box's container: created hardened (at least as tight as `docker run` with default
//! settings, and as the local provider's boxes where the engine allows it), started,
//! stopped, removed, and the containers carrying a label.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, RemoveContainerOptions, StopContainerOptions,
};

use crate::engine::{is_not_found, Engine};
use crate::{DockerError, Result};

/// The capabilities a box keeps: those engines grant by default, less `MKNOD` (a device
/// node of a host disk would read it) — the local provider's set. Its own network
/// namespace makes `NET_RAW` see only the box's traffic.
pub const BOX_CAPS: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "NET_RAW",
    "SYS_CHROOT",
    "AUDIT_WRITE",
    "SETFCAP",
];

/// Resource limits; `None` is the engine's default (none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    pub memory_bytes: Option<i64>,
    pub pids: Option<i64>,
    /// CPUs in billionths (`1.5` CPUs = 1_500_000_000).
    pub nano_cpus: Option<i64>,
}

/// What a box's container is made of.
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    /// `agentbox-<box>`.
    pub name: String,
    pub image: String,
    /// What the container runs (it must keep running: commands are `exec`s into it).
    pub cmd: Vec<String>,
    pub env: Vec<(String, String)>,
    pub workdir: Option<String>,
    pub user: Option<String>,
    pub labels: HashMap<String, String>,
    pub limits: Limits,
    /// `none`, or the engine's default network when `None`.
    pub network: Option<String>,
}

/// What agentbox reads of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    pub id: String,
    /// Without the leading `/`.
    pub name: String,
    pub image: String,
    pub running: bool,
    pub labels: HashMap<String, String>,
    /// When it was made, in seconds since the epoch (`None`: not said, as by an inspect).
    pub created: Option<i64>,
    /// When it last started, as the engine says it (RFC 3339; `None`: not said, as by a
    /// listing). A process of an earlier run is gone, whatever its PID now names.
    pub started: Option<String>,
}

impl Engine {
    /// Create (not start) the container `spec` describes; returns its id. Never
    /// privileged, no host path and no engine socket mounted, every capability dropped but
    /// [`BOX_CAPS`], `no-new-privileges`, the engine's default seccomp profile (never
    /// `unconfined`), and Docker's init as PID 1 so that orphans are reaped.
    pub fn create_container(&self, spec: &ContainerSpec) -> Result<String> {
        let host_config = HostConfig {
            cap_drop: Some(vec!["ALL".into()]),
            cap_add: Some(BOX_CAPS.iter().map(|c| (*c).to_owned()).collect()),
            security_opt: Some(vec!["no-new-privileges:true".into()]),
            privileged: Some(false),
            init: Some(true),
            memory: spec.limits.memory_bytes,
            pids_limit: spec.limits.pids,
            nano_cpus: spec.limits.nano_cpus,
            network_mode: spec.network.clone(),
            ..Default::default()
        };
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            cmd: Some(spec.cmd.clone()),
            // The image's entrypoint would wrap the keep-alive command: a box's commands
            // are `exec`s, so the container itself only has to stay up.
            entrypoint: Some(Vec::new()),
            env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            working_dir: spec.workdir.clone(),
            user: spec.user.clone(),
            labels: Some(spec.labels.clone()),
            host_config: Some(host_config),
            ..Default::default()
        };
        let options = CreateContainerOptions {
            name: Some(spec.name.clone()),
            ..Default::default()
        };
        match self.block_on(self.docker.create_container(Some(options), body)) {
            Ok(r) => Ok(r.id),
            Err(e) if is_not_found(&e) => Err(DockerError::ImageMissing {
                engine: self.endpoint().shown(),
                image: spec.image.clone(),
            }),
            Err(e) => Err(self.fail(&format!("create container {}", spec.name), e)),
        }
    }

    /// Start container `name` (nothing when it runs already).
    pub fn start_container(&self, name: &str) -> Result<()> {
        self.block_on(self.docker.start_container(name, None))
            .map_err(|e| self.missing_or(name, "start", e))
    }

    /// Stop container `name`: `SIGTERM`, then `SIGKILL` after `grace_secs`.
    pub fn stop_container(&self, name: &str, grace_secs: i32) -> Result<()> {
        let options = StopContainerOptions {
            t: Some(grace_secs),
            ..Default::default()
        };
        self.block_on(self.docker.stop_container(name, Some(options)))
            .map_err(|e| self.missing_or(name, "stop", e))
    }

    /// Remove container `name`, running or not, with its anonymous volumes. `Ok(false)`
    /// when there was none.
    pub fn remove_container(&self, name: &str) -> Result<bool> {
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        match self.block_on(self.docker.remove_container(name, Some(options))) {
            Ok(()) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(self.fail(&format!("remove container {name}"), e)),
        }
    }

    /// Container `name`, or `None` when the engine has none of that name.
    pub fn container(&self, name: &str) -> Result<Option<ContainerInfo>> {
        match self.block_on(self.docker.inspect_container(name, None)) {
            Ok(c) => Ok(Some(ContainerInfo {
                id: c.id.unwrap_or_default(),
                name: c
                    .name
                    .map(|n| n.trim_start_matches('/').to_owned())
                    .unwrap_or_default(),
                image: c.image.unwrap_or_default(),
                running: c.state.as_ref().and_then(|s| s.running).unwrap_or(false),
                labels: c.config.and_then(|c| c.labels).unwrap_or_default(),
                created: None,
                started: c.state.and_then(|s| s.started_at),
            })),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(self.fail(&format!("inspect container {name}"), e)),
        }
    }

    /// Every container (running or not) carrying label `key=value`.
    pub fn containers_labelled(&self, key: &str, value: &str) -> Result<Vec<ContainerInfo>> {
        let filters: HashMap<String, Vec<String>> =
            [("label".to_owned(), vec![format!("{key}={value}")])].into();
        let options = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let list = self
            .block_on(self.docker.list_containers(Some(options)))
            .map_err(|e| self.fail(&format!("list containers labelled {key}={value}"), e))?;
        Ok(list
            .into_iter()
            .map(|c| ContainerInfo {
                id: c.id.unwrap_or_default(),
                name: c
                    .names
                    .and_then(|n| n.into_iter().next())
                    .map(|n| n.trim_start_matches('/').to_owned())
                    .unwrap_or_default(),
                image: c.image.unwrap_or_default(),
                running: c.state.is_some_and(|s| s.to_string() == "running"),
                labels: c.labels.unwrap_or_default(),
                created: c.created,
                started: None,
            })
            .collect())
    }

    /// A 404 as [`DockerError::ContainerMissing`], anything else as the engine's failure.
    pub(crate) fn missing_or(
        &self,
        container: &str,
        doing: &str,
        e: bollard::errors::Error,
    ) -> DockerError {
        if is_not_found(&e) {
            DockerError::ContainerMissing {
                engine: self.endpoint().shown(),
                container: container.to_owned(),
            }
        } else {
            self.fail(&format!("{doing} container {container}"), e)
        }
    }
}
