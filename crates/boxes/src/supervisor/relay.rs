//! The in-box `agentbox`: its requests, the policy on their arguments, and running the host
//! side for them.

use super::*;

/// Run `agentbox ARGS` on the host for a command inside the box, with its stdio. The CLI
/// sees [`INBOX_ENV`] and refuses anything but this box's own history commands.
/// The supervisor's environment variables the host side of an in-box command keeps.
pub(super) const RELAYED_ENV: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "SSH_AUTH_SOCK",
    "GIT_SSH_COMMAND",
    "GIT_CONFIG_GLOBAL",
    "XDG_CONFIG_HOME",
    "LANG",
];

/// Options an in-box command may never give: they choose what the host side acts on
/// (another agentbox home — a fake store built in the box's layer — or another box).
pub(super) const RELAY_REFUSED: &[&str] = &["--home", "--box", "-b"];

/// The in-box relay's argument policy: refuses [`RELAY_REFUSED`] in any spelling
/// (`--home X`, `--home=X`, `-bX`, an abbreviation clap would accept), anywhere in the
/// command line — clap takes global options after the subcommand too.
pub(super) fn relay_policy(args: &[String]) -> std::result::Result<(), String> {
    for a in args.iter().take_while(|a| *a != "--") {
        let refused = match a.strip_prefix("--") {
            // `--home`, `--home=X`, and any prefix clap might expand (`--ho`).
            Some(long) => {
                let name = long.split('=').next().unwrap_or(long);
                name.len() >= 2
                    && RELAY_REFUSED
                        .iter()
                        .filter_map(|r| r.strip_prefix("--"))
                        .any(|r| r.starts_with(name))
            }
            // `-b`, `-bNAME`, and bundles such as `-xb`.
            None => a.len() > 1 && a.starts_with('-') && a[1..].contains('b'),
        };
        if refused {
            return Err(format!("{a:?} is not allowed inside a box"));
        }
    }
    Ok(())
}

pub(super) fn cli_for_box(
    shared: &Shared,
    conn: &OwnedFd,
    args: Vec<String>,
    fds: Vec<OwnedFd>,
) -> Result<()> {
    let [stdin, stdout, stderr]: [OwnedFd; 3] = fds.try_into().map_err(|_| {
        BoxError::Supervisor("agentbox in a box must pass its stdin, stdout and stderr".into())
    })?;
    if let Err(e) = relay_policy(&args) {
        // Told on the caller's own stderr, with the usage exit status, before anything runs.
        let mut err = fs_err::File::from_parts(std::fs::File::from(stderr), "stderr");
        let _ = std::io::Write::write_all(
            &mut err,
            format!(
                "agentbox: error: {}\n  hint: inside a box, agentbox acts on this box only, with the host's own settings\n",
                e.to_string().escape_debug()
            )
            .as_bytes(),
        );
        reply(
            conn,
            &Reply::Exited {
                status: 2,
                node: None,
                killed_by_checkout: false,
                capture_error: None,
                killed_because: None,
            },
            &[],
        );
        return Ok(());
    }
    let mut cmd = std::process::Command::new(&shared.exe);
    cmd.args(args)
        .env_clear()
        .env("AGENTBOX_HOME", shared.home.root())
        .env(INBOX_ENV, &shared.name)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin");
    // `push` and `pull` run git on the host with the user's configuration and credentials
    // (global git config, credential helpers, ssh agent): this command runs on the host and
    // only its output reaches the box, so they never enter it.
    for var in RELAYED_ENV {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    let status = cmd.stdin(stdin).stdout(stdout).stderr(stderr).status()?;
    use std::os::unix::process::ExitStatusExt;
    let status = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    reply(
        conn,
        &Reply::Exited {
            status,
            node: None,
            killed_by_checkout: false,
            capture_error: None,
            killed_because: None,
        },
        &[],
    );
    Ok(())
}
