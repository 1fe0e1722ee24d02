//! What a box does with a shipment: a list of steps the provider carries out in the box in
//! order — unpacking a tar into a directory, running an exact argv (never a shell string:
//! paths, names and ids are arguments of their own), removing a file.

use std::path::{Path, PathBuf};

use super::{Form, Shipment, CARRIED};

/// Where a [`crate::ship_delta`] bundle lies in the box's repository while it is fetched.
pub const DELTA_BUNDLE: &str = ".git/agentbox-delta.bundle";

/// The ref the delta's base arrives under in the box, until the branch moves onto it.
const TARGET: &str = "refs/agentbox/target";

/// One step of a box's seeding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoxStep {
    /// Unpack the tar `tar` (a file on the host) into the box's directory `into`
    /// (overwriting what is there; parents made as needed).
    Extract { tar: PathBuf, into: String },
    /// Run `argv` in the box; its failure fails the seeding.
    Run { argv: Vec<String> },
    /// Run `argv` in the box; its failure is reported (as a conflict: `what` was not done,
    /// the box's own files kept) and the seeding goes on.
    Try { argv: Vec<String>, what: String },
    /// Remove the file `path` in the box (gone already is fine).
    Remove { path: String },
}

/// A [`BoxStep::Try`] that failed: what was not done, and why (the command's message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped<E> {
    pub what: String,
    pub error: E,
}

/// Carry out `steps` in order with `exec` (the provider's way of doing one step in the box):
/// the first failure of a step other than [`BoxStep::Try`] ends it; the failed `Try` steps
/// are returned.
pub fn run_steps<E>(
    steps: &[BoxStep],
    mut exec: impl FnMut(&BoxStep) -> Result<(), E>,
) -> Result<Vec<Skipped<E>>, E> {
    let mut skipped = Vec::new();
    for step in steps {
        match (exec(step), step) {
            (Ok(()), _) => {}
            (Err(error), BoxStep::Try { what, .. }) => skipped.push(Skipped {
                what: what.clone(),
                error,
            }),
            (Err(e), _) => return Err(e),
        }
    }
    Ok(skipped)
}

/// `git -C <workspace> ARGS`.
fn git_in(workspace: &str, args: &[&str]) -> Vec<String> {
    ["git", "-C", workspace]
        .iter()
        .chain(args)
        .map(|s| (*s).to_owned())
        .collect()
}

impl Shipment {
    /// The steps that make the box's directory `workspace` the box's repository.
    ///
    /// A full shipment, into an empty `workspace`: unpack the `.git` (its `HEAD` is the box's
    /// branch, at the base already); check the carried-over work's tree out (or the base's),
    /// then make the index the host's, as [`crate::seed`] does — `read-tree` rather than
    /// `checkout -B` + `stash apply --index`: the same result, which cannot conflict on its
    /// own base, with every file written once; drop the carried-over ref; unpack the
    /// untracked files.
    ///
    /// A delta, into the `workspace` of a box booted from a checkpoint that has `from_tip`:
    /// unpack and fetch the bundle, move onto the box's branch at the base (`checkout -f
    /// -B`: the checkpoint's tracked changes dropped, its ignored files kept), set the
    /// remotes, branch and upstream [`Shipment::config`] names, apply the carried-over work
    /// with `stash apply --index` — a [`BoxStep::Try`]: when it would overwrite a file of the
    /// box's it changes nothing and is reported — and unpack the untracked files (which
    /// replace the box's files of the same names: the provider leaves those out first with
    /// [`Shipment::leave_out`], so the box's stay).
    pub fn steps(&self, workspace: &str) -> Vec<BoxStep> {
        let mut steps = Vec::new();
        let base = self.seeded.base.as_str();
        match &self.form {
            Form::Full { .. } => {
                steps.push(BoxStep::Extract {
                    tar: self.git_tar.clone(),
                    into: workspace.to_owned(),
                });
                let tree = self.stash.as_deref().unwrap_or(base);
                steps.push(BoxStep::Run {
                    argv: git_in(workspace, &["read-tree", "--reset", "-u", tree]),
                });
                if let Some(stash) = &self.stash {
                    steps.push(BoxStep::Run {
                        argv: git_in(workspace, &["read-tree", "-m", &format!("{stash}^2")]),
                    });
                    steps.push(BoxStep::Run {
                        argv: git_in(workspace, &["update-ref", "-d", CARRIED]),
                    });
                }
            }
            Form::Delta { bundle, .. } => {
                if *bundle || self.lfs_objects > 0 {
                    steps.push(BoxStep::Extract {
                        tar: self.git_tar.clone(),
                        into: workspace.to_owned(),
                    });
                }
                if *bundle {
                    let mut specs = vec![];
                    if self.delta_has_base() {
                        specs.push(format!("+{}:{TARGET}", self.temp_ref("base")));
                    }
                    if self.stash.is_some() {
                        specs.push(format!("+{}:{CARRIED}", self.temp_ref("carried")));
                    }
                    let mut args = vec![
                        "fetch",
                        "--quiet",
                        "--no-tags",
                        "--update-head-ok",
                        "--",
                        DELTA_BUNDLE,
                    ];
                    args.extend(specs.iter().map(String::as_str));
                    steps.push(BoxStep::Run {
                        argv: git_in(workspace, &args),
                    });
                    steps.push(BoxStep::Remove {
                        path: Path::new(workspace)
                            .join(DELTA_BUNDLE)
                            .to_string_lossy()
                            .into_owned(),
                    });
                }
                steps.push(BoxStep::Run {
                    argv: git_in(
                        workspace,
                        &["checkout", "-q", "-f", "-B", &self.seeded.branch, base],
                    ),
                });
                // The new box's remotes, branch and upstream (the checkpoint's repository
                // names its own box's).
                for (key, value) in &self.config {
                    steps.push(BoxStep::Run {
                        argv: git_in(workspace, &["config", "--replace-all", key, value]),
                    });
                }
                if let Some(stash) = &self.stash {
                    steps.push(BoxStep::Try {
                        argv: git_in(workspace, &["stash", "apply", "-q", "--index", stash]),
                        what: "the host's uncommitted changes".into(),
                    });
                }
                if self.delta_has_base() {
                    steps.push(BoxStep::Run {
                        argv: git_in(workspace, &["update-ref", "--no-deref", "-d", TARGET]),
                    });
                }
                if self.stash.is_some() {
                    steps.push(BoxStep::Run {
                        argv: git_in(workspace, &["update-ref", "--no-deref", "-d", CARRIED]),
                    });
                }
            }
        }
        if !self.files.is_empty() {
            steps.push(BoxStep::Extract {
                tar: self.files_tar.clone(),
                into: workspace.to_owned(),
            });
        }
        steps
    }

    /// The name the bundle gives ref `what` (the host's temporary ref).
    fn temp_ref(&self, what: &str) -> String {
        format!("{}/{}/{what}", super::TEMP, self.name)
    }

    /// Whether a delta's bundle carries the base (it does not when the base is the box's
    /// `from_tip` itself).
    fn delta_has_base(&self) -> bool {
        matches!(&self.form, Form::Delta { from_tip, bundle: true } if *from_tip != self.seeded.base)
    }
}
