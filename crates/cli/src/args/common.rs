//! Options several commands share: the box argument, plain positionals, the options of a
//! command started in a box, and the value parsers of `--env` and of sizes.

use clap::Args;

use crate::errors::{CliError, CliResult};

/// A box: its name, id, unique id prefix, display name or number in the current project;
/// left out, the current project's only box.
#[derive(Debug, Args)]
pub struct BoxArg {
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
}

#[derive(Debug, Args)]
pub struct Positional {
    pub args: Vec<String>,
}

/// Options of every command started in a box.
#[derive(Debug, Args)]
pub struct CommandOpts {
    /// Environment variable for this command (repeatable). KEY alone takes its value from
    /// this shell.
    #[arg(long = "env", value_name = "KEY[=VALUE]", value_parser = env_var)]
    pub vars: Vec<String>,
    /// Working directory inside the box (default: /workspace).
    #[arg(short = 'w', long)]
    pub workdir: Option<String>,
}

#[derive(Debug, Args)]
/// `[BOX] [--] CMD…` with the options of a command started in a box (`shell`, `spawn`).
pub struct BoxCommandArgs {
    /// BOX (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    #[command(flatten)]
    pub opts: CommandOpts,
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub argv: Vec<String>,
}

/// An `--env` value: `KEY=VALUE`, or `KEY` alone, which takes the value `KEY` has in this
/// process's environment (as `docker run -e KEY` does: the user named the variable). A `KEY`
/// this environment does not set is refused rather than dropped, so a typo is not silent.
pub(crate) fn env_var(s: &str) -> Result<String, String> {
    if let Some((key, _)) = s.split_once('=') {
        if key.is_empty() {
            return Err("the variable has no name (expected KEY=VALUE)".to_owned());
        }
        return Ok(s.to_owned());
    }
    if s.is_empty() {
        return Err("expected KEY=VALUE, or KEY to pass this shell's value".to_owned());
    }
    match std::env::var(s) {
        Ok(value) => Ok(format!("{s}={value}")),
        Err(_) => Err(format!(
            "{s} is not set in this shell (or not UTF-8); give its value: --env {s}=VALUE"
        )),
    }
}

/// Parse sizes like `20G`, `512M`, `1T`, `1048576`.
pub fn parse_size(s: &str) -> CliResult<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = s[i..].to_ascii_uppercase();
            let mult: u64 = match unit.trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                _ => {
                    return Err(CliError::usage(
                        format!("unknown size unit in {s:?}"),
                        "use e.g. 20G or 512M",
                    ))
                }
            };
            (&s[..i], mult)
        }
        None => (s, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| CliError::usage(format!("invalid size {s:?}"), "use e.g. 20G or 512M"))?;
    n.checked_mul(mult)
        .ok_or_else(|| CliError::usage(format!("size {s:?} is too large"), "use e.g. 20G"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn env_values_take_the_shell_s_value_or_are_refused() {
        assert_eq!(super::env_var("A=b=c"), Ok("A=b=c".to_owned()));
        assert_eq!(super::env_var("A="), Ok("A=".to_owned()));
        assert!(super::env_var("=x").is_err());
        let path = std::env::var("PATH").expect("PATH is set for tests");
        assert_eq!(super::env_var("PATH"), Ok(format!("PATH={path}")));
        let unset = super::env_var("AGENTBOX_TEST_SURELY_UNSET_VARIABLE").expect_err("unset");
        assert!(
            unset.contains("--env AGENTBOX_TEST_SURELY_UNSET_VARIABLE=VALUE"),
            "{unset}"
        );
    }
}
