//! Sessions: processes started in a box on a terminal the box's provider owns (not the
//! caller's), which outlive the command that started them, the terminal that watched them
//! and an ssh connection that dropped. A front end starts one, lists them and attaches to
//! one through the [`crate::facade::Boxes`] façade; the provider keeps each session's screen
//! (a terminal emulator's state plus a bounded scrollback) so that an attach redraws it as
//! it is now.
//!
//! This file holds what the façade, its providers and front ends share about sessions: the
//! spec of a new one, what a listing says about one, how an attach ends, the name rules,
//! the detach key and the errors.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use agentbox_sandbox::proto::WinSize;

use crate::types::Workdir;

/// Most sessions (running or exited, not yet removed) a box keeps at once: each one holds a
/// screen and a scrollback in its provider's memory.
pub const MAX_SESSIONS: usize = 64;

/// Lines of output a session keeps above its screen.
pub const SCROLLBACK_LINES: usize = 10_000;

/// The largest terminal a session takes: a bigger size asked for is cut to it, so that one
/// session's screen and scrollback stay bounded (at most [`SCROLLBACK_LINES`] rows of
/// [`MAX_COLS`] cells).
pub const MAX_ROWS: u16 = 500;
pub const MAX_COLS: u16 = 500;

/// The size a session starts with when the caller has no terminal.
pub const DEFAULT_SIZE: WinSize = WinSize { rows: 24, cols: 80 };

/// A size within the bounds a session accepts (at least 1×1, at most
/// [`MAX_ROWS`]×[`MAX_COLS`]).
pub fn clamp_size(size: WinSize) -> WinSize {
    WinSize {
        rows: size.rows.clamp(1, MAX_ROWS),
        cols: size.cols.clamp(1, MAX_COLS),
    }
}

/// What to start as a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSpec {
    /// Its name, unique in the box (`None`: the command's name, with `-2`, `-3` … when
    /// taken). See [`check_name`].
    pub name: Option<String>,
    pub argv: Vec<String>,
    /// `KEY=VALUE` pairs beyond the box's own environment.
    pub env: Vec<(String, String)>,
    /// Where it starts (`None`: the box's default).
    pub workdir: Option<Workdir>,
    /// The terminal's size until a client attaches (`None`: [`DEFAULT_SIZE`]).
    pub size: Option<WinSize>,
    /// Relaunch the command after a checkout of the box killed it.
    pub supervise: bool,
}

/// Whether a session's process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionState {
    Running,
    Exited,
}

impl SessionState {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Running => "running",
            SessionState::Exited => "exited",
        }
    }
}

/// A session as a listing shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Unique in its box (see [`check_name`]).
    pub name: String,
    pub argv: Vec<String>,
    pub state: SessionState,
    /// The id of its current (or last) process in the box's process table (what `ps`
    /// and `kill` take).
    pub id: u64,
    /// Its process's PID inside the box (`None` once it exited).
    pub pid: Option<i32>,
    /// When it was started (its first launch).
    pub started: DateTime<Utc>,
    /// When its process ended (`None`: running).
    pub ended: Option<DateTime<Utc>>,
    /// Its process's exit status (128 + N for signal N; `None`: running).
    pub status: Option<i32>,
    /// A checkout of the box killed it (and it was not supervised).
    pub killed_by_checkout: bool,
    /// Why its command could not be (re)started, when it could not.
    pub error: Option<String>,
    /// Terminals attached now.
    pub clients: usize,
    /// Relaunched after a checkout killed it.
    pub supervise: bool,
    /// How many times its command was started (1 + relaunches).
    pub launches: u32,
    /// The terminal's size now.
    pub size: WinSize,
}

/// How an attach asks to be served.
#[derive(Debug, Clone, PartialEq)]
pub struct AttachOpts {
    /// The keys that detach (`None`: the `session.detachKey` configuration of the box's
    /// project).
    pub detach_key: Option<DetachKey>,
    /// Replay the session's scrollback into the terminal before the screen.
    pub history: bool,
    /// Attach as a terminal (raw mode, the session follows its size): `Some(true)` always,
    /// `Some(false)` never, `None` when the caller's standard input and output are one.
    pub tty: Option<bool>,
}

/// How an attach ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "ended", rename_all = "snake_case")]
pub enum AttachOutcome {
    /// The caller detached (the key, the end of its input, its terminal hung up); the
    /// session goes on.
    Detached { session: String },
    /// The session's process ended: its status (128 + N for signal N).
    Exited {
        session: String,
        status: i32,
        killed_by_checkout: bool,
    },
}

impl AttachOutcome {
    /// The session attached to.
    pub fn session(&self) -> &str {
        match self {
            AttachOutcome::Detached { session } | AttachOutcome::Exited { session, .. } => session,
        }
    }
}

/// Check a session name given by the user: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting
/// with `-` or `.`. Names are printed and typed on command lines: nothing that needs
/// quoting or could drive a terminal.
pub fn check_name(name: &str) -> Result<(), SessionError> {
    let bad = |why: &str| {
        Err(SessionError::BadName {
            session: name.to_owned(),
            why: why.to_owned(),
        })
    };
    if name.is_empty() || name.len() > 64 {
        return bad("a session name has 1 to 64 characters");
    }
    if name.starts_with('-') || name.starts_with('.') {
        return bad("a session name does not start with '-' or '.'");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return bad("a session name has only letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

/// The name a session of `argv` gets when none is given: the command's file name (its
/// characters outside [`check_name`]'s set replaced by `-`), `session` when nothing is
/// left; `-2`, `-3` … when `taken` says it is taken.
pub fn default_name(argv: &[String], taken: impl Fn(&str) -> bool) -> String {
    let base = argv
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a))
        .unwrap_or("");
    let mut stem: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(56)
        .collect();
    stem = stem.trim_start_matches(['-', '.']).to_owned();
    if stem.is_empty() {
        stem = "session".to_owned();
    }
    if !taken(&stem) {
        return stem;
    }
    (2u32..)
        .map(|n| format!("{stem}-{n}"))
        .find(|n| !taken(n))
        .unwrap_or(stem)
}

/// The keys that detach an attached terminal from its session: one key, or a prefix key
/// and a second key (the default: Ctrl-\ then d). Ctrl-\ is a key agents' interfaces leave
/// alone (in raw mode it is no signal; Ctrl-B, tmux's prefix, is taken by Claude Code).
/// With a prefix, pressing it twice sends it once; the prefix then any other key sends
/// both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachKey {
    /// The bytes of the keys, in order (one or two; empty: detaching by key is off).
    pub keys: Vec<u8>,
}

/// The detach key's built-in value, as written in the configuration.
pub const DEFAULT_DETACH_KEY: &str = "ctrl-\\ d";

impl Default for DetachKey {
    fn default() -> DetachKey {
        DetachKey {
            keys: vec![0x1c, b'd'],
        }
    }
}

impl DetachKey {
    /// Parse `session.detachKey`: one or two keys separated by a space, each `ctrl-X`
    /// (also `C-X`, `^X`; X a letter or one of `@ [ \ ] ^ _`) or one printable ASCII
    /// character other than a space; or `none` (no key detaches).
    pub fn parse(text: &str) -> Result<DetachKey, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("none") {
            return Ok(DetachKey { keys: Vec::new() });
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.is_empty() || words.len() > 2 {
            return Err(format!(
                "{text:?} is not one or two keys (for example {DEFAULT_DETACH_KEY:?}, \"ctrl-]\" or \"none\")"
            ));
        }
        let keys = words
            .iter()
            .map(|w| parse_key(w))
            .collect::<Result<Vec<u8>, String>>()?;
        Ok(DetachKey { keys })
    }

    /// How people read it (`Ctrl-\ d`).
    pub fn describe(&self) -> String {
        if self.keys.is_empty() {
            return "none".to_owned();
        }
        self.keys
            .iter()
            .map(|&b| match b {
                0..=0x1f => format!("Ctrl-{}", char::from(b + 0x40).to_ascii_lowercase()),
                _ => char::from(b).to_string(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn parse_key(word: &str) -> Result<u8, String> {
    let lower = word.to_ascii_lowercase();
    let ctrl = ["ctrl-", "ctrl+", "c-", "^"]
        .iter()
        .find_map(|p| lower.strip_prefix(p).filter(|rest| !rest.is_empty()));
    match ctrl {
        Some(rest) => match rest.as_bytes() {
            [c @ b'a'..=b'z'] => Ok(c - b'a' + 1),
            [c @ (b'@' | b'[' | b'\\' | b']' | b'^' | b'_')] => Ok(c - 0x40),
            _ => Err(format!(
                "{word:?}: Ctrl goes with a letter or one of @ [ \\ ] ^ _"
            )),
        },
        None => match word.as_bytes() {
            [c @ 0x21..=0x7e] => Ok(*c),
            _ => Err(format!(
                "{word:?} is not a key: write ctrl-X or one printable character"
            )),
        },
    }
}

/// What goes wrong with sessions.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("box {name:?} has no session {session:?}")]
    NoSuchSession { name: String, session: String },
    #[error("box {name:?} has no session to attach to")]
    NoSessions { name: String },
    #[error("box {name:?} has several sessions: {}", candidates.join(", "))]
    WhichSession {
        name: String,
        candidates: Vec<String>,
    },
    #[error("box {name:?} already has a session named {session:?}")]
    Exists { name: String, session: String },
    #[error("invalid session name {session:?}: {why}")]
    BadName { session: String, why: String },
    #[error("box {name:?} has {MAX_SESSIONS} sessions already")]
    TooMany { name: String },
    #[error("the {provider:?} provider has no sessions")]
    Unsupported { provider: String },
}

impl SessionError {
    /// The stable exit-code class (see [`agentbox_core::exit::ExitCode`]).
    pub fn exit_code(&self) -> i32 {
        use agentbox_core::exit::ExitCode;
        match self {
            SessionError::NoSuchSession { .. } | SessionError::NoSessions { .. } => {
                ExitCode::NotFound.into()
            }
            SessionError::WhichSession { .. } | SessionError::BadName { .. } => {
                ExitCode::Usage.into()
            }
            SessionError::Exists { .. } | SessionError::TooMany { .. } => ExitCode::Refused.into(),
            SessionError::Unsupported { .. } => ExitCode::Failure.into(),
        }
    }

    /// What the user can do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            SessionError::NoSuchSession { name, .. } => {
                Some(format!("`agentbox sessions {name}` lists its sessions"))
            }
            SessionError::NoSessions { name } => Some(format!(
                "start one: agentbox session start {name} -- CMD"
            )),
            SessionError::WhichSession { name, candidates } => Some(format!(
                "name one: agentbox attach {name} {}",
                candidates.first().map(String::as_str).unwrap_or("SESSION")
            )),
            SessionError::Exists { .. } => Some(
                "choose another --name (an exited session keeps its name until `agentbox sessions --prune`)"
                    .into(),
            ),
            SessionError::TooMany { name } => Some(format!(
                "`agentbox sessions {name} --prune` removes the exited ones"
            )),
            SessionError::BadName { .. } | SessionError::Unsupported { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for ok in ["claude", "a", "x.y_z-2", "A1"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(65);
        for bad in [
            "",
            "-x",
            ".x",
            "a b",
            "a/b",
            "\u{1b}[2J",
            "é",
            long.as_str(),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn default_names_come_from_the_command_and_are_numbered() {
        let argv = |s: &str| vec![s.to_owned()];
        assert_eq!(default_name(&argv("/usr/bin/claude"), |_| false), "claude");
        assert_eq!(default_name(&argv("sh"), |n| n == "sh"), "sh-2");
        assert_eq!(
            default_name(&argv("sh"), |n| n == "sh" || n == "sh-2"),
            "sh-3"
        );
        assert_eq!(default_name(&argv("a b\u{1b}"), |_| false), "a-b-");
        assert_eq!(default_name(&argv("--"), |_| false), "session");
        assert_eq!(default_name(&[], |_| false), "session");
        let made = default_name(&argv(&"x".repeat(200)), |_| false);
        assert!(check_name(&made).is_ok());
    }

    #[test]
    fn detach_keys_parse_and_describe() {
        assert_eq!(
            DetachKey::parse(DEFAULT_DETACH_KEY),
            Ok(DetachKey::default())
        );
        assert_eq!(DetachKey::default().describe(), "Ctrl-\\ d");
        assert_eq!(DetachKey::parse("ctrl-]").map(|k| k.keys), Ok(vec![0x1d]));
        assert_eq!(DetachKey::parse("C-a d").map(|k| k.keys), Ok(vec![1, b'd']));
        assert_eq!(DetachKey::parse("^B x").map(|k| k.keys), Ok(vec![2, b'x']));
        assert_eq!(DetachKey::parse("none").map(|k| k.keys), Ok(vec![]));
        for bad in ["", "a b c", "ctrl-1", "ctrl-", "ab", "é"] {
            assert!(DetachKey::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes_are_bounded() {
        assert_eq!(
            clamp_size(WinSize {
                rows: 0,
                cols: 9999
            }),
            WinSize {
                rows: 1,
                cols: MAX_COLS
            }
        );
    }
}
