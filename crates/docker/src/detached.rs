//! A command started in a container and left running (`docker exec -d`): nothing of it
//! is attached, its output goes where the command itself sends it, and how it ended is
//! asked of the engine afterwards — for a while only: an engine forgets an exec some
//! minutes after it ended, and all of a container's with the container.

use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;

use crate::engine::{is_not_found, Engine};
use crate::exec::ExecSpec;
use crate::{DockerError, Result};

/// What the engine says of an exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecState {
    Running,
    /// It ended with this status (128 + N for a signal, as the engine reports it).
    Exited(i64),
    /// The engine no longer knows it (its container was removed, or it ended long ago).
    Gone,
}

impl Engine {
    /// Start `spec` in container `container` with no input and nothing attached (its
    /// `tty` unused); the exec's id, for [`Engine::exec_state`].
    pub fn exec_detached(&self, container: &str, spec: &ExecSpec) -> Result<String> {
        let config = ExecConfig {
            attach_stdin: Some(false),
            attach_stdout: Some(false),
            attach_stderr: Some(false),
            tty: Some(false),
            env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            cmd: Some(spec.argv.clone()),
            user: spec.user.clone(),
            working_dir: spec.workdir.clone(),
            privileged: Some(false),
            ..Default::default()
        };
        let created = self
            .block_on(self.docker.create_exec(container, config))
            .map_err(|e| self.missing_or(container, "run a command in", e))?;
        let options = StartExecOptions {
            detach: true,
            tty: false,
            output_capacity: None,
        };
        let doing = format!("start {:?} in container {container}", spec.argv);
        match self
            .block_on(self.docker.start_exec(&created.id, Some(options)))
            .map_err(|e| self.missing_or(container, &doing, e))?
        {
            StartExecResults::Detached => Ok(created.id),
            StartExecResults::Attached { .. } => Err(DockerError::Engine {
                engine: self.endpoint().shown(),
                doing,
                why: "the engine attached a command started detached".into(),
            }),
        }
    }

    /// Whether exec `id` runs, how it ended, or that the engine forgot it.
    pub fn exec_state(&self, id: &str) -> Result<ExecState> {
        match self.block_on(self.docker.inspect_exec(id)) {
            Ok(state) if state.running == Some(true) => Ok(ExecState::Running),
            Ok(state) => Ok(ExecState::Exited(state.exit_code.unwrap_or(-1))),
            Err(e) if is_not_found(&e) => Ok(ExecState::Gone),
            Err(e) => Err(self.fail(&format!("inspect exec {id}"), e)),
        }
    }
}
