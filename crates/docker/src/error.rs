//! Errors of the Docker engine client. Each carries the engine (as the user named it, see
//! [`crate::Endpoint::shown`]) and, where there is one, the image or container involved.

/// Result of this crate.
pub type Result<T, E = DockerError> = std::result::Result<T, E>;

/// What can go wrong talking to a Docker engine.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// `--docker-host NAME` names no configured host.
    #[error("no Docker host named {name:?} (known: {known})")]
    UnknownHost { name: String, known: String },
    /// An engine address agentbox cannot use.
    #[error("Docker host {host:?}: {why}")]
    BadHost { host: String, why: String },
    /// A docker context named by `DOCKER_CONTEXT` or the docker CLI's configuration that
    /// cannot be read.
    #[error("docker context {name:?}: {why}")]
    BadContext { name: String, why: String },
    /// The engine did not answer.
    #[error("the Docker engine at {engine} is unreachable: {why}")]
    Unreachable { engine: String, why: String },
    /// The engine speaks an API older than agentbox needs.
    #[error(
        "the Docker engine at {engine} speaks API {version}, older than the {min} agentbox needs"
    )]
    TooOld {
        engine: String,
        version: String,
        min: String,
    },
    /// An image the operation needs is not on the engine.
    #[error("image {image:?} is not on the Docker engine at {engine}")]
    ImageMissing { engine: String, image: String },
    /// A container the operation needs is not on the engine.
    #[error("container {container:?} is not on the Docker engine at {engine}")]
    ContainerMissing { engine: String, container: String },
    /// A command's container was removed while the command ran (the engine forgets the
    /// command with it): the command was killed with it.
    #[error("container {container:?} on the Docker engine at {engine} was removed while the command ran")]
    ExecGone { engine: String, container: String },
    /// An image that cannot be removed while something needs it: a container runs on it,
    /// or it is the parent of another image (the engine's "conflict").
    #[error("image {image:?} on the Docker engine at {engine} is in use: {why}")]
    ImageInUse {
        engine: String,
        image: String,
        why: String,
    },
    /// Any other refusal or failure of the engine, with what was being done.
    #[error("the Docker engine at {engine} failed to {doing}: {why}")]
    Engine {
        engine: String,
        doing: String,
        why: String,
    },
    /// A local file the operation reads or writes.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl DockerError {
    /// One line saying what the user can do about it.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            DockerError::UnknownHost { name, .. } => format!(
                "name it first: agentbox config set docker.hosts.{name} ssh://user@host (or pass a URL: unix://, tcp://, ssh://)"
            ),
            DockerError::BadHost { .. } => {
                "use unix:///path/to/docker.sock, tcp://host:2376 (TLS with DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH) or ssh://user@host".into()
            }
            DockerError::BadContext { .. } => {
                "`docker context ls` lists the contexts; `docker context use default` or DOCKER_HOST picks another engine".into()
            }
            DockerError::Unreachable { engine, .. } if engine.contains("ssh://") => {
                "over ssh the login must need no password (a key in ssh-agent or ~/.ssh/config) and `docker system dial-stdio` must work there: try `ssh HOST docker system dial-stdio`".into()
            }
            DockerError::Unreachable { .. } => {
                "is dockerd running there? check DOCKER_HOST, `docker context ls`, or pass --docker-host".into()
            }
            DockerError::TooOld { .. } => "upgrade the Docker engine (20.10 or later)".into(),
            DockerError::ImageMissing { .. } => {
                "build it there (`agentbox image build`) or pull it with `docker pull`".into()
            }
            DockerError::ExecGone { .. } => {
                "the command was killed with its container (a checkout or a destroy of its box replaces or removes it)".into()
            }
            DockerError::ContainerMissing { .. } => {
                "it was removed behind agentbox's back; `agentbox prune` forgets it".into()
            }
            DockerError::ImageInUse { .. } => {
                "it goes once no container runs on it and no image is built on it".into()
            }
            DockerError::Engine { .. } | DockerError::Io(_) => return None,
        })
    }
}
