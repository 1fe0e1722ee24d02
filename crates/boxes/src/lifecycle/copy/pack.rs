//! Packing host files for a box: the caller's own files (the host side is trusted), walked
//! without following symlinks (a symlink is sent as one, for the box to make inside
//! itself), names matching an exclude pattern left out, the total bounded before anything
//! is sent.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::Copied;
use crate::{BoxError, Result};

/// Whether `name` matches glob `pattern` (`*`: any run of characters, `?`: one).
pub fn matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn host_error(path: &Path, e: impl std::fmt::Display) -> BoxError {
    BoxError::Copy {
        path: path.display().to_string(),
        why: e.to_string(),
        refused: false,
    }
}

/// What of `src` goes (as `(path on the host, name in the archive)`), and its tally.
pub fn plan(
    srcs: &[(PathBuf, String)],
    exclude: &[String],
    max_bytes: u64,
) -> Result<(Vec<(PathBuf, String)>, Copied)> {
    let mut out = Vec::new();
    let mut tally = Copied::default();
    let mut stack: Vec<(PathBuf, String)> = srcs.iter().rev().cloned().collect();
    while let Some((path, name)) = stack.pop() {
        let meta = fs_err::symlink_metadata(&path).map_err(|e| host_error(&path, e))?;
        if meta.is_dir() {
            tally.dirs += 1;
            let mut children: Vec<_> = fs_err::read_dir(&path)
                .map_err(|e| host_error(&path, e))?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name())
                .collect();
            children.sort();
            for c in children.into_iter().rev() {
                let Some(cs) = c.to_str() else {
                    return Err(host_error(&path.join(&c), "a name that is not UTF-8"));
                };
                if exclude.iter().any(|p| matches(p, cs)) {
                    continue;
                }
                stack.push((path.join(&c), format!("{name}/{cs}")));
            }
        } else if meta.is_file() {
            tally.files += 1;
            tally.bytes += meta.len();
            if tally.bytes > max_bytes {
                return Err(BoxError::Copy {
                    path: path.display().to_string(),
                    why: format!("over the size cap of {max_bytes} bytes (--max-size)"),
                    refused: true,
                });
            }
        }
        out.push((path, name));
    }
    Ok((out, tally))
}

/// Write the planned entries as a tar archive to `to` (modes and times kept, symlinks as
/// symlinks, owners left to the box).
pub fn pack(entries: &[(PathBuf, String)], to: impl Write) -> Result<()> {
    let mut b = tar::Builder::new(to);
    b.follow_symlinks(false);
    b.mode(tar::HeaderMode::Complete);
    for (path, name) in entries {
        let meta = fs_err::symlink_metadata(path).map_err(|e| host_error(path, e))?;
        if meta.is_dir() {
            b.append_dir(name, path).map_err(|e| host_error(path, e))?;
        } else if meta.is_file() || meta.file_type().is_symlink() {
            b.append_path_with_name(path, name)
                .map_err(|e| host_error(path, e))?;
        }
        // Devices, FIFOs and sockets of the host are not sent.
    }
    b.finish().map_err(|e| host_error(Path::new("-"), e))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs_match_names() {
        assert!(matches("*.log", "a.log"));
        assert!(matches("node_modules", "node_modules"));
        assert!(matches("a?c", "abc"));
        assert!(!matches("*.log", "a.txt"));
        assert!(matches("*", ""));
        assert!(!matches("a*b", "acd"));
    }
}
