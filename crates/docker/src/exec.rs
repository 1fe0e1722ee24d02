//! A command in a box's container: the exact argv (no shell in between), its stdin
//! streamed in, its stdout and stderr streamed out apart (or one terminal stream with a
//! TTY), and its exit status.

use std::io::{Read, Write};

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::engine::Engine;
use crate::{DockerError, Result};

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct ExecSpec {
    /// Passed as is: argv[0] is looked up on the container's `PATH`.
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub workdir: Option<String>,
    pub user: Option<String>,
    /// A terminal of `(rows, cols)`: output then comes as one stream, on `stdout`.
    pub tty: Option<(u16, u16)>,
    /// The terminal's size as it changes (rows in the high 16 bits, columns in the low):
    /// the command's terminal is resized to it whenever it differs from what it was given.
    pub tty_size: Option<std::sync::Arc<std::sync::atomic::AtomicU32>>,
}

/// `(rows, cols)` packed as [`ExecSpec::tty_size`] holds it.
pub fn pack_size(rows: u16, cols: u16) -> u32 {
    (u32::from(rows) << 16) | u32::from(cols)
}

/// How often a command's terminal size is compared with [`ExecSpec::tty_size`].
const RESIZE_LOOK: std::time::Duration = std::time::Duration::from_millis(100);

/// The largest piece of output handed over at once.
const OUTPUT_CAPACITY: usize = 1 << 20;

/// How the exec's status is polled after its output ended: the engine may take a moment
/// to record the exit.
const EXIT_POLLS: u32 = 200;
const EXIT_POLL: std::time::Duration = std::time::Duration::from_millis(10);

impl Engine {
    /// Run `spec` in container `container`, feeding it `stdin` (to its end, then closing
    /// it; no stdin at all when `None`) and writing its output to `stdout`/`stderr`;
    /// returns its exit status (128 + N for a signal, as the engine reports it).
    pub fn exec(
        &self,
        container: &str,
        spec: &ExecSpec,
        stdin: Option<Box<dyn Read + Send>>,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Result<i64> {
        let config = ExecConfig {
            attach_stdin: Some(stdin.is_some()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(spec.tty.is_some()),
            console_size: spec.tty.map(|(r, c)| vec![usize::from(r), usize::from(c)]),
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
        let id = created.id;
        // Stdin is read on a thread of its own (a terminal, a pipe: reads block) and
        // handed to the runtime through a channel.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<Vec<u8>>>(8);
        let has_stdin = stdin.is_some();
        if let Some(mut input) = stdin {
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    match input.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            if tx.blocking_send(Ok(buf[..n].to_vec())).is_err() {
                                break;
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            let _ = tx.blocking_send(Err(e));
                            break;
                        }
                    }
                }
            });
        }
        let doing = format!("run {:?} in container {container}", spec.argv);
        let options = StartExecOptions {
            detach: false,
            tty: spec.tty.is_some(),
            output_capacity: Some(OUTPUT_CAPACITY),
        };
        self.block_on(async {
            let started = self
                .docker
                .start_exec(&id, Some(options))
                .await
                .map_err(|e| self.fail(&doing, e))?;
            let StartExecResults::Attached {
                mut output,
                mut input,
            } = started
            else {
                return Err(DockerError::Engine {
                    engine: self.endpoint().shown(),
                    doing: doing.clone(),
                    why: "the engine detached the command".into(),
                });
            };
            let feed = async {
                if has_stdin {
                    while let Some(chunk) = rx.recv().await {
                        input.write_all(&chunk?).await?;
                    }
                }
                // End of stdin: the command reads EOF.
                input.shutdown().await
            };
            let drain = async {
                while let Some(piece) = output.next().await {
                    match piece.map_err(|e| self.fail(&doing, e))? {
                        LogOutput::StdOut { message } | LogOutput::Console { message } => {
                            stdout.write_all(&message)?;
                            stdout.flush()?;
                        }
                        LogOutput::StdErr { message } => {
                            stderr.write_all(&message)?;
                            stderr.flush()?;
                        }
                        LogOutput::StdIn { .. } => {}
                    }
                }
                Ok::<(), DockerError>(())
            };
            // The terminal follows the caller's: its size is looked at while the command
            // runs, and a changed one given to the command's terminal.
            let resize = async {
                let Some(initial) = spec.tty else {
                    return std::future::pending::<()>().await;
                };
                // Engines before API 1.42 (Docker 23) ignore the console size an exec is
                // made with: the first size is given here too, at once.
                let mut given = 0;
                loop {
                    let now = spec
                        .tty_size
                        .as_ref()
                        .map_or(pack_size(initial.0, initial.1), |s| {
                            s.load(std::sync::atomic::Ordering::Relaxed)
                        });
                    if now != given {
                        let options = bollard::exec::ResizeExecOptions {
                            height: (now >> 16) as u16,
                            width: (now & 0xffff) as u16,
                        };
                        // A command that just ended has no terminal to resize: no error.
                        let _ = self.docker.resize_exec(&id, options).await;
                        given = now;
                    }
                    if spec.tty_size.is_none() {
                        return std::future::pending::<()>().await;
                    }
                    tokio::time::sleep(RESIZE_LOOK).await;
                }
            };
            // A command may end before reading all its input: its end (its output's) is
            // what counts, a failed write of stdin to a command that exited is no error,
            // and an input that never ends (a terminal) is not waited for.
            futures_util::pin_mut!(feed);
            futures_util::pin_mut!(drain);
            futures_util::pin_mut!(resize);
            let mut fed = false;
            loop {
                tokio::select! {
                    drained = &mut drain => return drained,
                    _ = &mut feed, if !fed => fed = true,
                    _ = &mut resize => {}
                }
            }
        })?;
        for _ in 0..EXIT_POLLS {
            let state = match self.block_on(self.docker.inspect_exec(&id)) {
                Ok(state) => state,
                // The engine forgets a container's execs with it.
                Err(e) if crate::engine::is_not_found(&e) => {
                    return Err(DockerError::ExecGone {
                        engine: self.endpoint().shown(),
                        container: container.to_owned(),
                    })
                }
                Err(e) => return Err(self.fail(&doing, e)),
            };
            if state.running != Some(true) {
                return Ok(state.exit_code.unwrap_or(-1));
            }
            std::thread::sleep(EXIT_POLL);
        }
        Err(DockerError::Engine {
            engine: self.endpoint().shown(),
            doing,
            why: "its output ended but the engine still reports it running".into(),
        })
    }

    /// Resize the terminal of a running exec.
    pub fn resize_exec(&self, exec_id: &str, rows: u16, cols: u16) -> Result<()> {
        let options = bollard::exec::ResizeExecOptions {
            height: rows,
            width: cols,
        };
        self.block_on(self.docker.resize_exec(exec_id, options))
            .map_err(|e| self.fail("resize a terminal", e))
    }
}
