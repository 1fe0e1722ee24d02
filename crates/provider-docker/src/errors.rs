//! The Docker client's errors as box errors: they keep the engine's name and the client's
//! hint (what to do), and are told apart by their exit-code class.

use agentbox_boxes::BoxError;
use agentbox_core::exit::ExitCode;
use agentbox_docker::DockerError;

/// `e` as a [`BoxError::Remote`]: its message (which names the engine), its hint, and the
/// exit-code class of what went wrong.
pub fn remote(e: DockerError) -> BoxError {
    let code = match &e {
        DockerError::ImageMissing { .. } | DockerError::ContainerMissing { .. } => {
            ExitCode::NotFound
        }
        DockerError::UnknownHost { .. }
        | DockerError::BadHost { .. }
        | DockerError::BadContext { .. } => ExitCode::BadConfig,
        DockerError::TooOld { .. } | DockerError::ImageInUse { .. } => ExitCode::Refused,
        DockerError::Unreachable { .. }
        | DockerError::Engine { .. }
        | DockerError::ExecGone { .. }
        | DockerError::Io(_) => ExitCode::Failure,
    };
    BoxError::Remote {
        message: e.to_string(),
        hint: e.hint(),
        code: code.into(),
    }
}

/// A failure of the box's side that has no error of the client's: `message` says what,
/// naming the box.
pub fn failed(message: String) -> BoxError {
    BoxError::Remote {
        message,
        hint: None,
        code: ExitCode::Failure.into(),
    }
}
