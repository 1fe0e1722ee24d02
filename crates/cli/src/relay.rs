//! The in-box `agentbox` (see `agentbox_boxes::relay`): inside a box, a command line becomes
//! one typed request ([`request_for`], the policy on what a box may ask). The host's side,
//! which answers it, is `commands::relayed`.

use agentbox_boxes::relay::{RelayCall, RelayRequest};

use crate::args::{BoxArg, Cli, Command, PullArgs, PushArgs};
use crate::errors::{CliError, CliResult};

/// Options an in-box command may never give, in any spelling: they would choose what the
/// host acts on (another agentbox home — a fake store built in the box's layer — or another
/// box). A request has no field for them anyway; refusing them here says so.
const REFUSED: &[&str] = &["--home", "--box", "-b"];

/// `args` (the in-box command line, without the program) naming a refused option: `--home
/// X`, `--home=X`, `-bX`, an abbreviation clap would accept; anywhere before `--`.
fn refused_option(args: &[String]) -> Option<&String> {
    args.iter().take_while(|a| *a != "--").find(|a| {
        match a.strip_prefix("--") {
            Some(long) => {
                let name = long.split('=').next().unwrap_or(long);
                name.len() >= 2
                    && REFUSED
                        .iter()
                        .filter_map(|r| r.strip_prefix("--"))
                        .any(|r| r.starts_with(name))
            }
            // `-b`, `-bNAME`, and bundles such as `-xb`.
            None => a.len() > 1 && a.starts_with('-') && a[1..].contains('b'),
        }
    })
}

/// The commands [`request_for`] turns into a request, as the in-box hint names them. The
/// hint is made from this list, and a test checks it against what `request_for` accepts
/// (every command line of the CLI), so the two cannot drift apart.
pub const ALLOWED: &[&str] = &[
    "log",
    "show",
    "diff",
    "status",
    "commit",
    "checkout",
    "undo",
    "tag",
    "ps",
    "push",
    "pull",
    "checkpoint create",
];

/// The refusal of something a box may not ask.
pub fn not_here(what: String) -> CliError {
    CliError::new(
        crate::errors::ExitCode::Refused,
        what,
        Some(format!(
            "inside a box, agentbox can run: {} — on this box only",
            ALLOWED.join(", ")
        )),
    )
}

/// Refuse an in-box command line (`args`, without the program) that names an option a box
/// may not give (before it is parsed: an abbreviation is refused as the option itself).
pub fn check_options(args: &[String]) -> CliResult {
    match refused_option(args) {
        Some(a) => Err(CliError::usage(
            format!("{a:?} is not allowed inside a box"),
            "inside a box, agentbox acts on this box only, with the host's own settings",
        )),
        None => Ok(()),
    }
}

/// Refuse box `name` when it is not `own`, the box the caller runs in (the only one it may
/// name).
pub fn other_box(own: &str, name: Option<&str>) -> CliResult {
    match name {
        Some(n) if n != own => Err(not_here(format!(
            "this box is {own:?}; box {n:?} is not reachable from inside it"
        ))),
        _ => Ok(()),
    }
}

/// The request the in-box command line (parsed as `cli`) makes of the host, for box `own`;
/// an error (exit 2 or 4) for anything a box may not ask.
pub fn request_for(cli: &Cli, own: &str) -> CliResult<RelayCall> {
    // A first positional argument naming the box itself is allowed (and dropped).
    let strip = |args: &[String]| -> Vec<String> {
        match args.first() {
            Some(first) if first == own => args[1..].to_vec(),
            _ => args.to_vec(),
        }
    };
    let at_most = |args: Vec<String>, n: usize, what: &str| -> CliResult<Vec<String>> {
        if args.len() > n {
            return Err(CliError::usage(
                format!(
                    "{what} takes at most {} inside a box: {args:?}",
                    crate::render::count(n, "argument", "arguments")
                ),
                "inside a box, commands act on this box; give only references",
            ));
        }
        Ok(args)
    };
    let other_box = |name: &Option<String>| other_box(own, name.as_deref());
    use RelayRequest as R;
    let request = match &cli.command {
        Command::Log(a) => {
            at_most(strip(&a.args), 0, "log")?;
            R::Log {
                ancestors: a.ancestors,
                leaves: a.leaves,
            }
        }
        Command::Show(a) => R::Show {
            reference: at_most(strip(&a.args), 1, "show")?.pop(),
        },
        Command::Diff(a) => {
            let mut refs = at_most(strip(&a.args), 2, "diff")?.into_iter();
            R::Diff {
                from: refs.next(),
                to: refs.next(),
                patch: a.patch,
            }
        }
        Command::Status(a) => {
            at_most(strip(&a.args), 0, "status")?;
            R::Status { usage: a.usage }
        }
        Command::Commit(a) => {
            at_most(strip(&a.args), 0, "commit")?;
            R::Commit {
                message: a.message.clone(),
                command: a.command.clone(),
            }
        }
        Command::Checkout(a) => R::Checkout {
            reference: at_most(strip(&a.args), 1, "checkout")?
                .pop()
                .ok_or_else(|| CliError::usage("checkout needs a reference", "agentbox checkout REF"))?,
            keep_processes: a.keep_processes,
        },
        Command::Undo(BoxArg { name }) => {
            other_box(name)?;
            R::Undo
        }
        Command::Tag(a) => match (&a.delete, strip(&a.args).as_slice()) {
            (Some(name), []) => R::Untag { name: name.clone() },
            (None, []) => R::Tags,
            (None, [name]) => R::Tag {
                name: name.clone(),
                reference: None,
            },
            (None, [name, reference]) => R::Tag {
                name: name.clone(),
                reference: Some(reference.clone()),
            },
            _ => {
                return Err(CliError::usage(
                    "tag takes NAME [REF] (or --delete NAME) inside a box",
                    "agentbox tag NAME [REF]",
                ))
            }
        },
        Command::Ps(BoxArg { name }) => {
            other_box(name)?;
            R::Ps
        }
        // Nothing of the box reaches the host's git command line: the host picks the remote
        // (the branch's, or `git.remote`) and the branch to pull.
        Command::Push(PushArgs { remote: Some(_), .. })
        | Command::Pull(PullArgs { remote: Some(_), .. }) => {
            return Err(CliError::usage(
                "--remote is not allowed inside a box",
                "the host pushes and pulls with the remote it configured (the branch's remote, or git.remote); run `agentbox push --remote …` on the host",
            ))
        }
        Command::Pull(PullArgs { branch: Some(_), .. }) => {
            return Err(CliError::usage(
                "--branch is not allowed inside a box",
                "inside a box, pull merges the upstream of the branch the box was made from; run `agentbox pull --branch …` on the host",
            ))
        }
        Command::Push(a) => {
            other_box(&a.name)?;
            R::Push {
                force: a.force,
                repos: a.repos.clone(),
            }
        }
        Command::Pull(a) => {
            other_box(&a.name)?;
            R::Pull {
                repos: a.repos.clone(),
            }
        }
        Command::Checkpoint(crate::args::CheckpointArgs {
            cmd:
                Some(crate::args::CheckpointCmd::Create {
                    name,
                    checkpoint,
                    set_default,
                    merged,
                    replace,
                }),
        }) => {
            other_box(name)?;
            R::Checkpoint {
                name: checkpoint.clone(),
                set_default: *set_default,
                merged: *merged,
                replace: *replace,
            }
        }
        _ => return Err(not_here("that command is not available inside a box".into())),
    };
    Ok(RelayCall {
        json: cli.json,
        request,
    })
}

#[cfg(test)]
mod tests {
    use super::refused_option;

    /// Every command line of the CLI (each subcommand, with the arguments an allowed one
    /// needs) that [`super::request_for`] accepts is named in [`super::ALLOWED`], and each
    /// name there is accepted: the in-box hint lists exactly what a box may run.
    #[test]
    fn the_in_box_hint_names_exactly_the_commands_a_box_may_run() {
        use clap::{CommandFactory, Parser};
        let cli = crate::args::Cli::command();
        let mut accepted = std::collections::BTreeSet::new();
        for sub in cli.get_subcommands() {
            let name = sub.get_name().to_owned();
            let mut lines: Vec<(String, Vec<String>)> = vec![(name.clone(), vec![name.clone()])];
            for sub2 in sub.get_subcommands() {
                let full = format!("{name} {}", sub2.get_name());
                lines.push((full, vec![name.clone(), sub2.get_name().to_owned()]));
            }
            for (label, words) in lines {
                for extra in [&[][..], &["HEAD"], &["x", "HEAD"], &["-m", "x"]] {
                    let argv = std::iter::once("agentbox".to_owned())
                        .chain(words.iter().cloned())
                        .chain(extra.iter().map(|s| s.to_string()));
                    let Ok(parsed) = crate::args::Cli::try_parse_from(argv) else {
                        continue;
                    };
                    if super::request_for(&parsed, "own").is_ok() {
                        accepted.insert(label.clone());
                    }
                }
            }
        }
        let listed: std::collections::BTreeSet<String> =
            super::ALLOWED.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            accepted, listed,
            "ALLOWED must list what request_for accepts"
        );
        let hint = super::not_here("x".into()).hint.unwrap_or_default();
        for name in super::ALLOWED {
            assert!(hint.contains(name), "{name} missing from the hint: {hint}");
        }
    }

    #[test]
    fn refused_options_in_every_spelling() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        for bad in [
            &["--home", "/x", "log"][..],
            &["log", "--home=/x"],
            &["--ho", "/x", "log"],
            &["-b", "x", "log"],
            &["-bx", "log"],
            &["--box=x", "log"],
        ] {
            assert!(refused_option(&v(bad)).is_some(), "{bad:?}");
        }
        for ok in [
            &["log"][..],
            &["commit", "-m", "x"],
            &["--json", "log"],
            &["exec", "--", "--home"],
        ] {
            assert!(refused_option(&v(ok)).is_none(), "{ok:?}");
        }
    }
}
