//! What every command gets: the home, the output mode, the chosen environment, the façade
//! over the provider this binary wires in, and the printer (data to stdout, notes and
//! progress to stderr).

use std::io::Write;
use std::path::{Path, PathBuf};

use agentbox_boxes::records::record::BoxRecord;
use agentbox_boxes::records::registry;
use agentbox_boxes::types::Workdir;
use agentbox_boxes::BoxError;
use agentbox_core::Home;
use serde::Serialize;

use crate::errors::{CliError, CliResult};
use crate::render;

/// What every command gets.
pub(crate) struct Ctx {
    pub(crate) home: Home,
    pub(crate) json: bool,
    pub(crate) env: Option<String>,
    /// The domain façade over the provider this binary wires in (see [`Ctx::boxes`]).
    boxes: agentbox_boxes::facade::Boxes,
    /// Where data and notes go when not this process's stdout and stderr: the caller's own,
    /// for a request of the in-box `agentbox` answered on the host.
    relayed: Option<std::sync::Mutex<(std::fs::File, std::fs::File)>>,
}

impl Ctx {
    /// Boxes of this home, as the composition root ([`crate::compose`]) wires them.
    pub(crate) fn new(home: Home, json: bool, env: Option<String>) -> Ctx {
        Ctx {
            boxes: crate::compose::boxes(&home),
            home,
            json,
            env,
            relayed: None,
        }
    }

    /// The context of a request of the in-box `agentbox` of box `name`: that box is the
    /// environment, and the output goes to the caller's `stdout` and `stderr`.
    pub(crate) fn for_relay(
        home: Home,
        json: bool,
        name: &str,
        stdout: std::fs::File,
        stderr: std::fs::File,
    ) -> Ctx {
        let mut ctx = Ctx::new(home, json, Some(name.to_owned()));
        ctx.relayed = Some(std::sync::Mutex::new((stdout, stderr)));
        ctx
    }

    /// Whether this is a request of the in-box `agentbox` (the box itself is asking).
    pub(crate) fn relayed(&self) -> bool {
        self.relayed.is_some()
    }

    /// Write `text` to the command's stdout (`to_err`: stderr). A closed pipe (`| head`) is
    /// not an error worth reporting.
    fn write(&self, text: &str, to_err: bool) {
        match &self.relayed {
            Some(files) => {
                let mut files = files.lock().unwrap_or_else(|p| p.into_inner());
                let f = if to_err { &mut files.1 } else { &mut files.0 };
                let _ = f.write_all(text.as_bytes());
            }
            None if to_err => {
                let _ = std::io::stderr().lock().write_all(text.as_bytes());
            }
            None => {
                let _ = std::io::stdout().lock().write_all(text.as_bytes());
            }
        }
    }

    /// Report a failed command (see [`crate::errors::report`]).
    pub(crate) fn error(&self, e: &CliError) {
        let (data, text) = crate::errors::report(e, self.json);
        if let Some(d) = data {
            self.write(&d, false);
        }
        self.write(&text, true);
    }

    /// Every box operation goes through the façade.
    pub(crate) fn boxes(&self) -> &agentbox_boxes::facade::Boxes {
        &self.boxes
    }

    /// Print `value` as JSON, or `human` as text, on stdout.
    pub(crate) fn out<T: Serialize>(&self, value: &T, human: impl FnOnce() -> String) -> CliResult {
        let text = if self.json {
            let mut s = serde_json::to_string_pretty(value).map_err(|e| {
                CliError::new(
                    crate::errors::ExitCode::Failure,
                    format!("cannot encode output as JSON: {e}"),
                    None,
                )
            })?;
            s.push('\n');
            s
        } else {
            human()
        };
        self.write(&text, false);
        Ok(())
    }

    /// Status message on stderr (suppressed with --json, where stdout carries the result).
    pub(crate) fn note(&self, msg: impl AsRef<str>) {
        if !self.json {
            self.write(&format!("{}\n", msg.as_ref()), true);
        }
    }

    /// Run long work under a spinner with the elapsed time on stderr (only on a terminal and
    /// without --json, so pipes and scripts see clean output).
    pub(crate) fn busy<T>(&self, msg: &str, work: impl FnOnce() -> T) -> T {
        render::progress::busy(msg, self.json || self.relayed(), work)
    }

    /// Run `work`, a transfer, reporting its progress on stderr (not with --json, nor for
    /// the in-box `agentbox`, whose output must stay what it asked for).
    pub(crate) fn transfer<T>(&self, what: &str, work: impl FnOnce() -> T) -> T {
        render::progress::transfer(what, self.json || self.relayed(), work)
    }

    /// Split positional arguments into the environment and the rest. The environment is
    /// `-b NAME`, else the first argument when more than `min_rest` were given and it names
    /// an environment or a box, else the environment containing the current directory, else
    /// the current project's only box, else the only environment.
    pub(super) fn env_and_args(
        &self,
        args: &[String],
        min_rest: usize,
        max_rest: usize,
    ) -> CliResult<(String, Vec<String>)> {
        let (env, rest) = if let Some(e) = &self.env {
            let e = self.env_name(e)?;
            // Naming the same environment again as the first argument is harmless.
            if args.len() > min_rest && args.first() == Some(&e) {
                (e, args[1..].to_vec())
            } else {
                (e, args.to_vec())
            }
        } else if args.len() > min_rest && self.boxes.env(&args[0]).is_ok() {
            (args[0].clone(), args[1..].to_vec())
        } else if let Some(rec) = (args.len() > min_rest)
            .then(|| self.find_box(&args[0]))
            .transpose()?
            .flatten()
        {
            (rec.name.into_string(), args[1..].to_vec())
        } else if args.len() == max_rest + 1 {
            // One argument too many for the command: the first must name the box.
            return Err(BoxError::NoSuchBox {
                name: args[0].clone(),
            }
            .into());
        } else {
            (self.implicit_env()?, args.to_vec())
        };
        self.boxes.env(&env)?;
        if rest.len() < min_rest || rest.len() > max_rest {
            return Err(CliError::usage(
                format!(
                    "expected {} argument{} after the environment, got {}: {:?}",
                    if min_rest == max_rest {
                        min_rest.to_string()
                    } else {
                        format!("{min_rest} to {max_rest}")
                    },
                    if max_rest == 1 { "" } else { "s" },
                    rest.len(),
                    rest
                ),
                "see `agentbox help <command>`",
            ));
        }
        Ok((env, rest))
    }

    /// An environment's name from `-b NAME`: an environment's own name, else a box
    /// reference (id, number, display name…).
    pub(super) fn env_name(&self, reference: &str) -> CliResult<String> {
        if self.boxes.env(reference).is_ok() {
            return Ok(reference.to_owned());
        }
        Ok(self.resolve_box(Some(reference))?.name.into_string())
    }

    pub(super) fn implicit_env(&self) -> CliResult<String> {
        if let Ok(cwd) = std::env::current_dir() {
            if let Some(e) = self.boxes.env_for_path(&cwd)? {
                return Ok(e.name);
            }
        }
        if let Some(rec) = self.implicit_box()? {
            return Ok(rec.name.into_string());
        }
        let envs = self.boxes.envs()?;
        match envs.len() {
            1 => Ok(envs[0].name.clone()),
            0 => Err(CliError::new(crate::errors::ExitCode::NotFound,
                "there are no boxes or environments",
                Some("create a box with `agentbox create` inside a project (or `agentbox create NAME -C DIR`) (or version a directory with `agentbox env DIR`)".into()),
            )),
            _ => Err(CliError::usage(
                format!(
                    "which box or environment? there are {}: {}",
                    envs.len(),
                    envs.iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
                "name it as the first argument or with -b NAME, or run the command inside its directory or project",
            )),
        }
    }
}

/// Library operations report through the printer: notes to stderr, long work under a
/// spinner.
impl agentbox_boxes::progress::Progress for Ctx {
    fn note(&self, line: &str) {
        Ctx::note(self, line);
    }
    fn busy(
        &self,
        what: &str,
        work: &mut dyn FnMut() -> agentbox_boxes::Result<()>,
    ) -> agentbox_boxes::Result<()> {
        Ctx::busy(self, what, work)
    }
}

impl Ctx {
    /// The project the current directory is in: box numbers and the implicit box are
    /// relative to it.
    pub(crate) fn here(&self) -> CliResult<Option<PathBuf>> {
        let cwd = agentbox_boxes::records::registry::current_dir()?;
        Ok(registry::current_project(&self.home, &cwd)?)
    }

    /// The box `reference` names (else `-b`, else the current project's only box).
    pub(crate) fn resolve_box(&self, reference: Option<&str>) -> CliResult<BoxRecord> {
        let cwd = agentbox_boxes::records::registry::current_dir()?;
        Ok(match reference.or(self.env.as_deref()) {
            Some(r) => registry::resolve(&self.home, r, &cwd)?,
            None => match registry::implicit(&self.home, &cwd) {
                Ok(rec) => rec,
                Err(BoxError::WhichBox {
                    project: None,
                    candidates,
                }) if candidates.is_empty() => return Err(not_a_project(None)),
                Err(e) => return Err(e.into()),
            },
        })
    }

    /// The current project's only box; `None` when there is none, an error when there are
    /// several (the user has to say which).
    pub(super) fn implicit_box(&self) -> CliResult<Option<BoxRecord>> {
        match registry::implicit(
            &self.home,
            &agentbox_boxes::records::registry::current_dir()?,
        ) {
            Ok(rec) => Ok(Some(rec)),
            Err(BoxError::WhichBox { candidates, .. }) if candidates.is_empty() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The box `reference` names, `None` when it names none (other errors, like an
    /// ambiguous reference, are errors).
    pub(crate) fn find_box(&self, reference: &str) -> CliResult<Option<BoxRecord>> {
        match registry::resolve(
            &self.home,
            reference,
            &agentbox_boxes::records::registry::current_dir()?,
        ) {
            Ok(r) => Ok(Some(r)),
            Err(BoxError::NoSuchBox { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Where a command in box `rec` starts: `explicit` (`-w`), else the directory matching
    /// the current one when it is inside the box's project (`/workspace/<same path>`),
    /// else the supervisor's default (`/workspace`).
    pub(crate) fn workdir(&self, rec: &BoxRecord, explicit: Option<String>) -> Option<Workdir> {
        if let Some(dir) = explicit {
            return Some(Workdir::explicit(dir));
        }
        let cwd = std::fs::canonicalize(std::env::current_dir().ok()?).ok()?;
        let rel = cwd.strip_prefix(rec.project.as_deref()?).ok()?;
        (!rel.as_os_str().is_empty()).then(|| {
            Workdir::default_for(
                Path::new(agentbox_boxes::records::record::WORKSPACE)
                    .join(rel)
                    .to_string_lossy(),
            )
        })
    }

    /// Split `[BOX] CMD…`: `first` is the box when it names one; otherwise it is the
    /// command's first word and the box is `-b` or the current project's only box — unless
    /// the user wrote `first --`, which only makes sense for a box.
    pub(crate) fn box_and_command(
        &self,
        first: Option<String>,
        mut argv: Vec<String>,
    ) -> CliResult<(BoxRecord, Vec<String>)> {
        let Some(first) = first else {
            return Ok((self.resolve_box(None)?, argv));
        };
        if let Some(b) = &self.env {
            let rec = self.resolve_box(Some(b))?;
            if first != *b && first != rec.name {
                argv.insert(0, first);
            }
            return Ok((rec, argv));
        }
        if let Some(rec) = self.find_box(&first)? {
            return Ok((rec, argv));
        }
        let meant_a_box = std::env::args()
            .collect::<Vec<_>>()
            .windows(2)
            .any(|w| w[0] == first && w[1] == "--");
        let missing = BoxError::NoSuchBox {
            name: first.clone(),
        };
        if meant_a_box {
            return Err(missing.into());
        }
        // Several boxes here: which one is the question, not `first`.
        match self.implicit_box()? {
            Some(rec) => {
                argv.insert(0, first);
                Ok((rec, argv))
            }
            // Outside a project the trouble is the directory, not `first`: it was most
            // likely the command (`agentbox exec -- ls`), so "no box named ls" misleads.
            None if self.here()?.is_none() => Err(not_a_project(Some(&first))),
            None => Err(missing.into()),
        }
    }
}

/// The error of a command that needs the current project's box, run where there is no
/// project (no git repository, no box made from this directory). `word` is the argument
/// that was tried as a box name and names none.
fn not_a_project(word: Option<&str>) -> CliError {
    let dir = std::env::current_dir()
        .map(|d| render::path(&d))
        .unwrap_or_else(|_| "the current directory".to_owned());
    let mut message = format!("{dir} is not in a project (no git repository or box here)");
    if let Some(w) = word {
        message.push_str(&format!(", and {w:?} names no box"));
    }
    CliError::new(
        crate::errors::ExitCode::Usage,
        message,
        Some(
            "cd into a project that has a box, or name the box: `agentbox exec BOX -- CMD` \
             (or -b BOX); `agentbox list --all` shows every box"
                .into(),
        ),
    )
}
