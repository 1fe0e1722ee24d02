//! What a tool call answers: a result as structured content (the JSON the command line
//! prints with `--json`, an array put under a key: structured content is an object), or a
//! tool error carrying the command line's message, hint and exit code.

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;

use crate::errors::CliError;

/// The default of `exec`'s `max_output`, and its ceiling.
pub const DEFAULT_OUTPUT: usize = 32 << 10;
pub const MAX_OUTPUT: usize = 1 << 20;

/// A JSON result as structured content (an array under `key`, anything else but an object
/// under `result`).
pub fn structured(key: &str, v: serde_json::Value) -> CallToolResult {
    let v = match v {
        serde_json::Value::Object(_) => v,
        serde_json::Value::Array(_) => serde_json::json!({ key: v }),
        other => serde_json::json!({ "result": other }),
    };
    CallToolResult::structured(v)
}

/// A failed call as a tool error: the message and hint as the command line prints them
/// (escaped: they can quote box-controlled text) and, structured, as `--json` prints them.
pub fn error(e: &CliError) -> CallToolResult {
    let (_, text) = crate::errors::report(e, false);
    let mut r = CallToolResult::structured_error(
        serde_json::json!({"error": e.message, "hint": e.hint, "code": e.code}),
    );
    r.content = vec![ContentBlock::text(text)];
    r
}

/// `exec`'s result: the command's status, its output (bounded), and the node it made.
#[derive(Debug, Serialize)]
pub struct Executed {
    pub status: i32,
    pub output: String,
    /// How many bytes the command printed (stdout and stderr together).
    pub output_bytes: usize,
    /// Whether part of the output was left out (see `note`).
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The node its changes made (`None`: it changed nothing, or capture is off).
    pub node: Option<String>,
}

impl Executed {
    /// The collected run of a command, its output cut to `max` bytes: the start and the
    /// end are kept, the middle left out, with a note saying how to get all of it.
    pub fn new(ran: agentbox_boxes::provider::Collected, max: usize) -> Executed {
        let total = ran.output.len();
        let (output, note) = if total <= max {
            (ran.output, None)
        } else {
            let head = floor_boundary(&ran.output, max / 2);
            let tail = ceil_boundary(&ran.output, total - (max - head));
            let note = format!(
                "output truncated: {total} bytes, of which the first {head} and the last {} are shown. To get all of it, run the command with its output sent to a file in the box (argv [\"sh\", \"-c\", \"CMD > /tmp/out.log 2>&1\"]), then read that file with read_file (offset and limit), or raise max_output (up to {MAX_OUTPUT})",
                total - tail
            );
            let mut s = String::with_capacity(max + 64);
            s.push_str(&ran.output[..head]);
            s.push_str(&format!("\n[… {} bytes left out …]\n", tail - head));
            s.push_str(&ran.output[tail..]);
            (s, Some(note))
        };
        Executed {
            status: ran.status,
            truncated: note.is_some(),
            output,
            output_bytes: total,
            note,
            node: ran.node,
        }
    }
}

/// The largest char boundary of `s` at or below `i`.
fn floor_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The smallest char boundary of `s` at or above `i`.
fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(output: &str) -> agentbox_boxes::provider::Collected {
        agentbox_boxes::provider::Collected {
            status: 0,
            output: output.to_owned(),
            node: None,
        }
    }

    #[test]
    fn long_output_keeps_its_start_and_end_with_a_note() {
        let out = format!("{}{}", "a".repeat(100), "é".repeat(100));
        let e = Executed::new(ran(&out), 50);
        assert!(e.truncated);
        assert_eq!(e.output_bytes, 300);
        assert!(e.output.starts_with(&"a".repeat(25)));
        assert!(e.output.ends_with("éé"));
        assert!(e.note.as_deref().unwrap_or("").contains("read_file"));
        let short = Executed::new(ran("hello"), 50);
        assert!(!short.truncated && short.output == "hello" && short.note.is_none());
    }

    #[test]
    fn arrays_go_under_their_key_and_errors_carry_message_and_hint() {
        let r = structured("boxes", serde_json::json!([1, 2]));
        assert_eq!(
            r.structured_content,
            Some(serde_json::json!({"boxes": [1, 2]}))
        );
        let e = error(&CliError::new(
            crate::errors::ExitCode::NotFound,
            "no box named \"x\"",
            Some("`agentbox list` shows the boxes".into()),
        ));
        assert_eq!(e.is_error, Some(true));
        assert_eq!(
            e.structured_content,
            Some(
                serde_json::json!({"error": "no box named \"x\"", "hint": "`agentbox list` shows the boxes", "code": 3})
            )
        );
    }
}
