//! Human output: the history tree, change lists, sizes.

use std::collections::BTreeMap;
use std::fmt::Write;

use agentbox_store::fsops::diff::{Change, ChangeKind};
use agentbox_store::history::History;
use agentbox_store::Node;

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

/// One line describing a node: id, time, message, decorations.
pub fn node_line(n: &Node, head: &str, tags: &BTreeMap<String, Vec<String>>) -> String {
    let mut deco: Vec<String> = Vec::new();
    if n.id == head {
        deco.push("HEAD".into());
    }
    if let Some(t) = tags.get(n.id.as_str()) {
        deco.extend(t.iter().map(|t| format!("tag: {t}")));
    }
    // A node made for a command is labelled with it: show it once, as a command.
    let own_command = n.command.as_deref() == Some(n.message.as_str());
    let mut line = format!(
        "{}  {}  {}{}",
        short(&n.id),
        time(&n.created),
        if own_command { "$ " } else { "" },
        text(&n.message)
    );
    if let Some(c) = n.command.as_deref().filter(|_| !own_command) {
        let _ = write!(line, "  [$ {}]", text(c));
    }
    if !deco.is_empty() {
        let _ = write!(line, "  ({})", text(&deco.join(", ")));
    }
    line
}

/// Tags grouped by node id.
pub fn tags_by_node(tags: &BTreeMap<String, String>) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, id) in tags {
        out.entry(id.clone()).or_default().push(name.clone());
    }
    out
}

/// The whole history as a tree, oldest first. A linear run stays in one column; at a
/// branch point each child's line of descent is drawn indented with `├─`/`└─`. `@` marks
/// HEAD, `o` other nodes.
pub fn tree(h: &History) -> String {
    let tags = tags_by_node(&h.tags);
    let children = h.children();
    let by_id: BTreeMap<&str, &Node> = h.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let sorted_kids = |id: &str| -> Vec<&Node> {
        let mut kids: Vec<&Node> = children
            .get(id)
            .map(|k| {
                k.iter()
                    .filter_map(|k| by_id.get(k.as_str()).copied())
                    .collect()
            })
            .unwrap_or_default();
        kids.sort_by(|a, b| a.created.cmp(&b.created).then(a.seq.cmp(&b.seq)));
        kids
    };
    let mut out = String::new();
    // Pre-order walk with an explicit stack: (node, prefix of its line, prefix below it).
    let mut stack: Vec<(&Node, String, String)> = h
        .nodes
        .iter()
        .filter(|n| n.parent.as_deref().is_none_or(|p| !by_id.contains_key(p)))
        .rev()
        .map(|n| (n, String::new(), String::new()))
        .collect();
    while let Some((n, first, rest)) = stack.pop() {
        let mark = if n.id == h.head { "@" } else { "o" };
        let _ = writeln!(out, "{first}{mark} {}", node_line(n, &h.head, &tags));
        let kids = sorted_kids(&n.id);
        if kids.len() == 1 {
            stack.push((kids[0], rest.clone(), rest));
            continue;
        }
        for (i, k) in kids.iter().enumerate().rev() {
            let last = i + 1 == kids.len();
            let (f, r) = if last {
                ("└─", "  ")
            } else {
                ("├─", "│ ")
            };
            stack.push((k, format!("{rest}{f}"), format!("{rest}{r}")));
        }
    }
    out
}

/// Human-readable byte count.
pub use agentbox_core::units::bytes;

/// A size, or nothing for entries without content (directories, empty files).
fn size_or_blank(n: Option<u64>) -> String {
    n.filter(|n| *n > 0).map(bytes).unwrap_or_default()
}

/// A change list like `git diff --stat`: one line per path.
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

/// The changes, one line each; a repository's git directory is summarised in one line
/// (its objects and refs are not what a person reviews).
pub fn changes(list: &[Change]) -> String {
    let mut out = String::new();
    let mut git_dirs: BTreeMap<std::path::PathBuf, usize> = BTreeMap::new();
    for c in list.iter().filter(|c| in_git_dir(&c.path)) {
        let mut dir = std::path::PathBuf::new();
        for part in c.path.components() {
            dir.push(part);
            if part.as_os_str() == ".git" {
                break;
            }
        }
        *git_dirs.entry(dir).or_default() += 1;
    }
    for (dir, n) in &git_dirs {
        let _ = writeln!(
            out,
            "~ {}  ({} inside the git directory)",
            path(dir),
            count(*n, "change", "changes")
        );
    }
    for c in list.iter().filter(|c| !in_git_dir(&c.path)) {
        let (sign, what) = match c.kind {
            ChangeKind::Added => ("+", size_or_blank(c.new_size)),
            ChangeKind::Removed => ("-", size_or_blank(c.old_size)),
            ChangeKind::Modified => (
                "M",
                format!(
                    "{} -> {}",
                    bytes(c.old_size.unwrap_or(0)),
                    bytes(c.new_size.unwrap_or(0))
                ),
            ),
            ChangeKind::MetaChanged => ("m", c.detail.clone().unwrap_or_default()),
        };
        let line = format!("{sign} {}  {what}", path(&c.path));
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let count = |k: ChangeKind| list.iter().filter(|c| c.kind == k).count();
    let _ = writeln!(
        out,
        "{} added, {} removed, {} modified, {} metadata changed",
        count(ChangeKind::Added),
        count(ChangeKind::Removed),
        count(ChangeKind::Modified),
        count(ChangeKind::MetaChanged)
    );
    out
}

/// Where an environment's working tree is visible: its directory, or "(box)" for a box,
/// whose tree is visible only inside it.
pub fn place(mountpoint: &Option<std::path::PathBuf>) -> String {
    match mountpoint {
        Some(m) => m.display().to_string(),
        None => "(box)".to_owned(),
    }
}

/// The table of `agentbox ps`: running processes, then recent exits with their status and
/// the first lines of their output under them.
pub fn procs(procs: &[agentbox_boxes::types::ProcInfo]) -> String {
    let mut s = format!(
        "{:<5} {:<7} {:<6} {:<20} {:<18} COMMAND\n",
        "ID", "PID", "KIND", "STARTED", "STATE"
    );
    for p in procs {
        let state = match &p.exit {
            None => "running".to_owned(),
            Some(e) if e.killed_by_checkout => "killed by checkout".to_owned(),
            Some(e) => format!("exited {}", e.status),
        };
        s.push_str(&format!(
            "{:<5} {:<7} {:<6} {:<20} {:<18} {}\n",
            p.id,
            p.pid,
            format!("{:?}", p.kind).to_lowercase(),
            time(&p.started),
            state,
            text(&agentbox_boxes::types::render_command(&p.argv))
        ));
        for line in p.exit.iter().flat_map(|e| &e.output) {
            // A box's output is the box's text: its colours dropped, the rest escaped.
            s.push_str(&format!("      | {}\n", output(line)));
        }
    }
    s
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
