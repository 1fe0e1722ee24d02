//! Content differences of changed files, as unified diffs.

use std::path::Path;

use crate::fsops::diff::{Change, ChangeKind};

/// Files larger than this are not compared line by line.
const MAX_TEXT: u64 = 1 << 20;

/// The unified diff of `change` between the files `old` and `new` (either absent for an
/// added or removed file): `None` for a metadata-only change or a non-file; a one-line
/// note for binary or large files. `new` below `beneath` (a running box's working tree) is
/// read without following a symlink below it and without blocking on a FIFO: the box may
/// have swapped a directory for a link to a host path since the tree was listed, and the
/// host must then read nothing (it says "unreadable").
pub fn unified(
    change: &Change,
    old: Option<&Path>,
    new: Option<&Path>,
    beneath: Option<&Path>,
) -> Option<String> {
    if change.kind == ChangeKind::MetaChanged || (old.is_none() && new.is_none()) {
        return None;
    }
    let read = |p: Option<&Path>, beneath: Option<&Path>| -> Result<String, &'static str> {
        let Some(p) = p else {
            return Ok(String::new());
        };
        let file = crate::fsops::copy::open_regular(p, beneath).map_err(|_| "unreadable")?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len > MAX_TEXT {
            return Err("large");
        }
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(&file, MAX_TEXT + 1), &mut bytes)
            .map_err(|_| "unreadable")?;
        if bytes.len() as u64 > MAX_TEXT {
            return Err("large");
        }
        if bytes.contains(&0) {
            return Err("binary");
        }
        String::from_utf8(bytes).map_err(|_| "binary")
    };
    let name = |prefix: &str| quoted(prefix, &change.path.to_string_lossy());
    match (read(old, None), read(new, beneath)) {
        (Ok(a), Ok(b)) => {
            let diff = similar::TextDiff::from_lines(&a, &b);
            let text = diff
                .unified_diff()
                .context_radius(3)
                .header(
                    &if old.is_some() {
                        name("a/")
                    } else {
                        "/dev/null".into()
                    },
                    &if new.is_some() {
                        name("b/")
                    } else {
                        "/dev/null".into()
                    },
                )
                .to_string();
            Some(text)
        }
        (Err(why), _) | (_, Err(why)) => Some(format!("{why} file {} differs\n", name(""))),
    }
}

/// `prefix` + `path` as a patch header names it: as is, or, when the path holds a control
/// character (a newline above all), a double quote or a backslash, C-quoted in double quotes
/// as git does (`"b/a\nb"`). A path is box-controlled: unquoted, a newline in a file name
/// would start a line of the patch's own (a forged `+++` header or hunk) that no escaping of
/// the printed text can tell from a real one.
fn quoted(prefix: &str, path: &str) -> String {
    if !path
        .chars()
        .any(|c| c.is_control() || c == '"' || c == '\\')
    {
        return format!("{prefix}{path}");
    }
    let mut out = String::with_capacity(path.len() + prefix.len() + 2);
    out.push('"');
    out.push_str(prefix);
    for c in path.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("\\{b:03o}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn change(kind: ChangeKind) -> Change {
        Change {
            path: PathBuf::from("src/a.txt"),
            kind,
            old_size: None,
            new_size: None,
            detail: None,
        }
    }

    #[test]
    fn text_binary_and_added_files() {
        let d = tempfile::tempdir().expect("tempdir");
        let (a, b, bin) = (d.path().join("a"), d.path().join("b"), d.path().join("bin"));
        std::fs::write(&a, "one\ntwo\n").expect("write");
        std::fs::write(&b, "one\nthree\n").expect("write");
        std::fs::write(&bin, b"\0\x01").expect("write");
        let p = unified(&change(ChangeKind::Modified), Some(&a), Some(&b), None).expect("a diff");
        assert!(
            p.contains("--- a/src/a.txt") && p.contains("-two") && p.contains("+three"),
            "{p}"
        );
        let added = unified(&change(ChangeKind::Added), None, Some(&b), None).expect("a diff");
        assert!(
            added.contains("--- /dev/null") && added.contains("+one"),
            "{added}"
        );
        let binary =
            unified(&change(ChangeKind::Modified), Some(&a), Some(&bin), None).expect("a note");
        assert_eq!(binary, "binary file src/a.txt differs\n");
        assert_eq!(
            unified(&change(ChangeKind::MetaChanged), Some(&a), Some(&b), None),
            None
        );
    }

    /// A box-controlled file name with a newline cannot start a line of the patch: the
    /// headers and the note of a binary file quote it as git does.
    #[test]
    fn names_with_newlines_or_quotes_are_quoted() {
        let d = tempfile::tempdir().expect("tempdir");
        let (b, bin) = (d.path().join("b"), d.path().join("bin"));
        std::fs::write(&b, "one\n").expect("write");
        std::fs::write(&bin, b"\0").expect("write");
        let mut c = change(ChangeKind::Added);
        c.path = PathBuf::from("d/x\n+++ b/evil\t\"\\\u{1b}");
        let p = unified(&c, None, Some(&b), None).expect("a diff");
        assert_eq!(
            p.lines()
                .filter(|l| l.starts_with("+++"))
                .collect::<Vec<_>>(),
            ["+++ \"b/d/x\\n+++ b/evil\\t\\\"\\\\\\033\""],
            "{p}"
        );
        let note = unified(&c, None, Some(&bin), None).expect("a note");
        assert_eq!(note.lines().count(), 1, "{note}");
        assert_eq!(quoted("a/", "plain é"), "a/plain é");
    }

    /// A running box swaps a listed directory for a symlink to a host directory, or a
    /// listed file for a FIFO, before the host reads it: the host reads nothing (and does
    /// not wait for a writer).
    #[test]
    fn a_working_tree_swapped_under_the_read_reads_nothing() {
        let d = tempfile::tempdir().expect("tempdir");
        let (host, view) = (d.path().join("host"), d.path().join("view"));
        std::fs::create_dir_all(&host).expect("mkdir");
        std::fs::create_dir_all(&view).expect("mkdir");
        std::fs::write(host.join("a.txt"), "host secret\n").expect("write");
        std::os::unix::fs::symlink(&host, view.join("src")).expect("symlink");
        let old = d.path().join("old");
        std::fs::write(&old, "one\n").expect("write");
        let listed = view.join("src/a.txt");
        let p = unified(
            &change(ChangeKind::Modified),
            Some(&old),
            Some(&listed),
            Some(&view),
        )
        .expect("a note");
        assert_eq!(p, "unreadable file src/a.txt differs\n");
        std::fs::remove_file(view.join("src")).expect("rm");
        std::fs::create_dir(view.join("src")).expect("mkdir");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &listed,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .expect("mkfifo");
        let p = unified(
            &change(ChangeKind::Modified),
            Some(&old),
            Some(&listed),
            Some(&view),
        )
        .expect("a note");
        assert_eq!(p, "unreadable file src/a.txt differs\n");
    }
}
