//! Text as people read it: box-controlled text escaped (`text`, `output`, `path`,
//! `text_block`), short ids, counted nouns, times, sizes, a box's name, a working tree's place.

/// Characters of an id shown to humans (any unique prefix of 4+ is accepted back).
pub const SHORT: usize = 12;

/// The first [`SHORT`] characters of `id` (cut at a character's boundary: an id read from
/// an imported manifest may be any text). Box- or bundle-controlled ids still go through
/// [`text`] before they are printed.
pub fn short(id: &str) -> &str {
    let end = id.char_indices().nth(SHORT).map_or(id.len(), |(i, _)| i);
    &id[..end]
}

/// Box-controlled text (node messages, command labels, tags, file names) as printed for
/// humans: control characters — escape sequences that would drive the terminal (OSC 52
/// writes the clipboard), carriage returns that would overwrite a line — are shown escaped
/// (`\u{1b}`). `--json` carries the text exactly.
pub fn text(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// One line of what a box's command printed, as shown for humans: its colours and text
/// styles (SGR sequences, `ESC [ params m`) are dropped, and every other control character
/// is escaped as [`text`] escapes it — a cursor move, an OSC, a lone ESC never reaches the
/// terminal. `--json` carries the output exactly.
pub fn output(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if let Some(len) = sgr_len(rest) {
            rest = &rest[len..];
            continue;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    std::borrow::Cow::Owned(out)
}

/// The length in bytes of the SGR sequence `s` starts with: ESC, `[`, parameters (digits,
/// `;` and `:` only) and the final `m`; `None` for anything else.
fn sgr_len(s: &str) -> Option<usize> {
    let params = s.strip_prefix("\x1b[")?;
    let n = params
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b';' || *b == b':')
        .count();
    (params.as_bytes().get(n) == Some(&b'm')).then_some(2 + n + 1)
}

/// `n` with its noun, singular for exactly one (`1 layer`, `0 layers`, `2 processes`):
/// every counted noun in human output goes through here, so none reads "1 layers".
pub fn count<N>(n: N, one: &str, many: &str) -> String
where
    N: Copy + std::fmt::Display + PartialEq + From<u8>,
{
    format!("{n} {}", if n == N::from(1) { one } else { many })
}

/// A time as every human output shows it: local time, to the second (`--json` keeps RFC
/// 3339 in UTC), so `ps`, `image list` and `log` agree.
pub fn time(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.with_timezone(&chrono::Local)
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

/// A box as a listing names it: the name commands take, then its display name in
/// parentheses when it has one, so the name to type is always shown.
pub fn box_name(rec: &agentbox_boxes::records::record::BoxRecord) -> String {
    match rec
        .display_name
        .as_deref()
        .filter(|d| *d != rec.name.as_str())
    {
        Some(d) => format!("{} ({})", rec.name, text(d)),
        None => rec.name.to_string(),
    }
}

/// A box-controlled path, escaped as [`text`].
pub fn path(p: &std::path::Path) -> String {
    text(&p.to_string_lossy()).into_owned()
}

/// Human-readable byte count.
pub use agentbox_core::units::bytes;

/// Whether `path` is inside a repository's git directory (`.git` as a component).
pub fn in_git_dir(path: &std::path::Path) -> bool {
    path.components().any(|c| c.as_os_str() == ".git")
}

/// Box-controlled multi-line text (a file's contents, a diff): control characters other
/// than newlines and tabs escaped as [`text`] does.
pub fn text_block(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\n' | '\t' => c.to_string(),
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// Where an environment's working tree is visible: its directory, or "(box)" for a box,
/// whose tree is visible only inside it.
pub fn place(mountpoint: &Option<std::path::PathBuf>) -> String {
    match mountpoint {
        Some(m) => m.display().to_string(),
        None => "(box)".to_owned(),
    }
}

/// At most `width` characters of `s`, cut with `…`.
pub fn cut(s: &str, width: usize) -> String {
    match s.char_indices().nth(width.saturating_sub(1)) {
        Some((i, _)) if s.chars().count() > width => format!("{}…", &s[..i]),
        _ => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn colours_are_dropped_and_other_controls_escaped() {
        assert_eq!(output("plain"), "plain");
        assert_eq!(output("\x1b[2mdim\x1b[0m ok"), "dim ok");
        assert_eq!(output("\x1b[1;31mred\x1b[m"), "red");
        assert_eq!(output("\x1b[38:5:208mx"), "x");
        // Not colours: the ESC is escaped, so the terminal sees plain text.
        assert_eq!(output("\x1b[2Kclear"), "\\u{1b}[2Kclear");
        assert_eq!(output("\x1b]52;c;aGk=\x07"), "\\u{1b}]52;c;aGk=\\u{7}");
        assert_eq!(output("a\rb"), "a\\rb");
        assert_eq!(output("\x1b["), "\\u{1b}[");
        assert_eq!(output("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(output("é\x1b[0mü"), "éü");
    }

    proptest! {
        /// Whatever a box prints, what reaches the terminal holds no control character.
        #[test]
        fn no_control_reaches_the_terminal(s in "(\\PC|[\\x00-\\x1f\\x7f-\\u{9f}]|\\x1b\\[[0-9;:]{0,6}[mK]){0,40}") {
            let shown = output(&s);
            prop_assert!(!shown.chars().any(char::is_control), "{shown:?}");
        }

        /// Text without SGR sequences is shown exactly as `text` shows it.
        #[test]
        fn without_colours_it_is_text(s in "(\\PC|[\\x00-\\x1a\\x1c-\\x1f])*") {
            prop_assert_eq!(output(&s), text(&s));
        }
    }
}
