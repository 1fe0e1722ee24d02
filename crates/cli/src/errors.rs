//! Exit codes and one-line messages with a hint.
//!
//! Exit codes are stable; their classes are `agentbox_core::exit::ExitCode`:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | failure not covered below (IO, backend; a full disk: "no space left on device") |
//! | 2 | bad usage (arguments) |
//! | 3 | not found: environment, node, tag, store, config key, project |
//! | 4 | refused or conflicting: exists, ambiguous, HEAD/last node, invalid name |
//! | 5 | locked by another process |
//! | 6 | needs root |
//! | 7 | store inconsistent (`fsck` found problems) |
//! | 8 | bad input: malformed or unsafe bundle, or one past the import size limit |
//! | 9 | invalid configuration: malformed file, bad value, renamed key |

pub use agentbox_core::exit::ExitCode;
use agentbox_store::Error as StoreError;

/// Result of a command.
pub type CliResult<T = ()> = Result<T, CliError>;

/// An error of the command line, ready to print.
#[derive(Debug)]
pub struct CliError {
    pub code: i32,
    pub message: String,
    pub hint: Option<String>,
}

impl CliError {
    pub fn usage(message: impl Into<String>, hint: impl Into<String>) -> CliError {
        CliError {
            code: ExitCode::Usage.into(),
            message: message.into(),
            hint: Some(hint.into()),
        }
    }

    pub fn new(code: ExitCode, message: impl Into<String>, hint: Option<String>) -> CliError {
        CliError {
            code: code.into(),
            message: message.into(),
            hint,
        }
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> CliError {
        let message = e.to_string();
        let hint = e.hint();
        let code = e.exit_code();
        CliError {
            code,
            message,
            hint: hint.map(str::to_owned),
        }
    }
}

impl From<agentbox_core::Error> for CliError {
    fn from(e: agentbox_core::Error) -> CliError {
        StoreError::Core(e).into()
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> CliError {
        StoreError::Io(e).into()
    }
}

impl From<agentbox_boxes::BoxError> for CliError {
    /// The domain decides code and hint (see `BoxError::exit_code` and `BoxError::hint`).
    fn from(e: agentbox_boxes::BoxError) -> CliError {
        CliError {
            code: e.exit_code(),
            hint: e.hint(),
            message: e.to_string(),
        }
    }
}

impl From<agentbox_boxes::config::ConfigError> for CliError {
    fn from(e: agentbox_boxes::config::ConfigError) -> CliError {
        CliError {
            code: e.exit_code(),
            hint: e.hint(),
            message: e.to_string(),
        }
    }
}

/// How a failed command is reported: with `--json`, the error as JSON for stdout; and the
/// message with a hint for stderr, escaped (messages can quote box-controlled text — git's
/// stderr, file names, refs). A message of several lines (a process's first output lines)
/// keeps its line breaks, and its continuation lines are indented, so that no line of it
/// can pass for a line of agentbox's own (`agentbox: error: …`).
pub fn report(e: &CliError, json: bool) -> (Option<String>, String) {
    let data = json.then(|| {
        format!(
            "{}\n",
            serde_json::json!({"error": e.message, "hint": e.hint, "code": e.code})
        )
    });
    let mut text = format!("agentbox: error: {}\n", lines(&e.message, "  "));
    if let Some(h) = &e.hint {
        text.push_str(&format!("  hint: {}\n", lines(h, "    ")));
    }
    (data, text)
}

/// `s` for stderr: each line escaped as [`crate::render::text`], the lines after the first
/// indented by `indent`; a trailing line break is dropped (the caller ends the line).
fn lines(s: &str, indent: &str) -> String {
    s.trim_end_matches('\n')
        .split('\n')
        .map(crate::render::text)
        .collect::<Vec<_>>()
        .join(&format!("\n{indent}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_keeps_its_lines_indented_and_escapes_the_rest() {
        let e = CliError::new(
            ExitCode::Failure,
            "it failed; its output began:\n  one\x1b]52;c;x\x07\nagentbox: error: fake\n",
            Some("look\r".into()),
        );
        let (data, text) = report(&e, false);
        assert!(data.is_none());
        assert_eq!(
            text,
            "agentbox: error: it failed; its output began:\n    one\\u{1b}]52;c;x\\u{7}\n  agentbox: error: fake\n  hint: look\\r\n"
        );
    }
}
