//! The typed view of the configuration the product reads ([`Effective`]), built by
//! `Config::effective` from the registry's keys.

use agentbox_sandbox::proto::Network;

/// The settings a new box takes from the configuration (flags already applied).
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// `box.network`.
    pub network: Network,
    /// `box.capture`.
    pub capture: bool,
    /// `box.broker`.
    pub broker: bool,
    /// `broker.anthropicUpstream`.
    pub anthropic_upstream: String,
    /// `broker.openaiUpstream`.
    pub openai_upstream: String,
    /// `box.keep`.
    pub keep: u64,
    /// `box.memory`, in bytes.
    pub memory_bytes: Option<u64>,
    /// `box.pids`.
    pub pids: Option<u64>,
    /// `box.cpus`.
    pub cpus: Option<f64>,
    /// `box.env` (`KEY=VALUE` each).
    pub env: Vec<String>,
    /// `box.ignore`.
    pub ignore: Vec<String>,
    /// `box.hostPaths`.
    pub host_paths: Vec<String>,
    /// `box.homeTools`.
    pub home_tools: Vec<String>,
    /// `box.image`.
    /// `docker.hosts`: named engines, name → URL.
    pub docker_hosts: std::collections::BTreeMap<String, String>,
    /// `box.provider`: the provider of new boxes (`None`: the default, local).
    pub provider: Option<String>,
    pub image: Option<String>,
    /// `agents.broker`.
    pub agents_broker: bool,
    /// `agents.skipPermissions`.
    pub agents_skip_permissions: bool,
    /// The built-in agents whose `<agent>.isolateConfig` is on.
    pub isolate_config: Vec<String>,
    /// `box.defaultCheckpoint`.
    pub default_checkpoint: Option<String>,
    /// `box.resyncOnStart`.
    pub resync_on_start: bool,
    /// `checkpoint.cleanup`.
    pub checkpoint_cleanup: Vec<String>,
    /// `checkpoint.cleanupCommand`.
    pub checkpoint_cleanup_command: Option<String>,
    /// `checkpoint.maxLayers`.
    pub checkpoint_max_layers: u64,
    /// `git.carry`.
    pub carry: bool,
    /// `git.withEnv`.
    pub with_env: bool,
    /// `git.envPatterns`.
    pub env_patterns: Vec<String>,
    /// `git.remote`.
    pub remote: String,
    /// `session.detachKey`.
    pub detach_key: crate::sessions::DetachKey,
}
