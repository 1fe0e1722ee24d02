//! The history and what changed, as people read them: a node's line, the tree, a change list.

use std::collections::BTreeMap;
use std::fmt::Write;

use agentbox_store::fsops::diff::{Change, ChangeKind};
use agentbox_store::history::History;
use agentbox_store::Node;

use super::basic::{bytes, count, in_git_dir, path, short, text, time};

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

/// A size, or nothing for entries without content (directories, empty files).
fn size_or_blank(n: Option<u64>) -> String {
    n.filter(|n| *n > 0).map(bytes).unwrap_or_default()
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
