//! Content differences of changed files, as unified diffs.

use std::path::Path;

use crate::fsops::diff::{Change, ChangeKind};

/// Files larger than this are not compared line by line.
const MAX_TEXT: u64 = 1 << 20;

/// The unified diff of `change` between the files `old` and `new` (either absent for an
/// added or removed file): `None` for a metadata-only change or a non-file; a one-line
/// note for binary or large files.
pub fn unified(change: &Change, old: Option<&Path>, new: Option<&Path>) -> Option<String> {
    if change.kind == ChangeKind::MetaChanged || (old.is_none() && new.is_none()) {
        return None;
    }
    let read = |p: Option<&Path>| -> Result<String, &'static str> {
        let Some(p) = p else {
            return Ok(String::new());
        };
        let len = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        if len > MAX_TEXT {
            return Err("large");
        }
        let bytes = std::fs::read(p).map_err(|_| "unreadable")?;
        if bytes.contains(&0) {
            return Err("binary");
        }
        String::from_utf8(bytes).map_err(|_| "binary")
    };
    let path = change.path.to_string_lossy();
    match (read(old), read(new)) {
        (Ok(a), Ok(b)) => {
            let diff = similar::TextDiff::from_lines(&a, &b);
            let text = diff
                .unified_diff()
                .context_radius(3)
                .header(
                    &if old.is_some() {
                        format!("a/{path}")
                    } else {
                        "/dev/null".into()
                    },
                    &if new.is_some() {
                        format!("b/{path}")
                    } else {
                        "/dev/null".into()
                    },
                )
                .to_string();
            Some(text)
        }
        (Err(why), _) | (_, Err(why)) => Some(format!("{why} file {path} differs\n")),
    }
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
        let p = unified(&change(ChangeKind::Modified), Some(&a), Some(&b)).expect("a diff");
        assert!(
            p.contains("--- a/src/a.txt") && p.contains("-two") && p.contains("+three"),
            "{p}"
        );
        let added = unified(&change(ChangeKind::Added), None, Some(&b)).expect("a diff");
        assert!(
            added.contains("--- /dev/null") && added.contains("+one"),
            "{added}"
        );
        let binary = unified(&change(ChangeKind::Modified), Some(&a), Some(&bin)).expect("a note");
        assert_eq!(binary, "binary file src/a.txt differs\n");
        assert_eq!(
            unified(&change(ChangeKind::MetaChanged), Some(&a), Some(&b)),
            None
        );
    }
}
