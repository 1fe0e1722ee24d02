//! Files in and out of a box (`agentbox cp`, `agentbox download`): a tar stream between the
//! host and a `tar` run inside the box (through [`crate::provider::Provider::piped`]), so
//! that the box's paths and links are resolved inside the box, by the box, and the host
//! side never opens a box path.
//!
//! * Out of a box ([`unpack`]): the archive is box-controlled; only regular files and
//!   directories are made, below the destination, never through a symlink; links and
//!   devices are skipped and reported. A symlink swapped in the box while it is read
//!   changes only what the box's own `tar` reads.
//! * Into a box ([`pack`]): the host's files, sent as they are (symlinks as symlinks), and
//!   unpacked by the box's `tar` as the box's user; the change is captured as a node.

pub mod pack;
pub mod unpack;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::facade::Boxes;
use crate::records::record::WORKSPACE;
use crate::{BoxError, Result};

/// The default size cap of a copy (of its files' data).
pub const DEFAULT_MAX_BYTES: u64 = 8 << 30;

/// What a copy did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Copied {
    pub files: u64,
    pub dirs: u64,
    /// Bytes of file data.
    pub bytes: u64,
    /// Entries not made on the host: symlinks, hard links, devices (box-controlled names).
    pub skipped: Vec<Skipped>,
    /// The node a copy into a box made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The box changed files while its `tar` read them (GNU tar's exit status 1): what was
    /// copied is what the box had at each file's reading, not one moment's tree.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub changed_while_read: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub path: String,
    /// `symlink`, `hard link`, `device`, `fifo` or `other`.
    pub kind: String,
}

/// A copy's options.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Names (globs) left out, at any depth.
    pub exclude: Vec<String>,
    /// The most bytes of file data copied; past it the copy stops with an error.
    pub max_bytes: u64,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            exclude: Vec::new(),
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// What `download` takes of `/workspace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// What git does not ignore, and the repository (`.git`); everything when the
    /// workspace is no repository.
    Tracked,
    /// That, and ignored env files (`.env*`).
    TrackedAndEnv,
    /// Everything.
    All,
}

/// A box path made absolute (relative ones are under `/workspace`), with its parent and
/// last component.
fn box_path(path: &str) -> (String, String, String) {
    let abs = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{WORKSPACE}/{path}")
    };
    let trimmed = abs.trim_end_matches('/');
    let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
    match trimmed.rsplit_once('/') {
        Some((parent, base)) if !base.is_empty() => (
            trimmed.to_owned(),
            if parent.is_empty() {
                "/".to_owned()
            } else {
                parent.to_owned()
            },
            base.to_owned(),
        ),
        _ => (trimmed.to_owned(), "/".to_owned(), ".".to_owned()),
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(std::io::Error::from)?)
}

fn dev_null() -> Result<OwnedFd> {
    Ok(OwnedFd::from(
        fs_err::File::open("/dev/null")?.into_parts().0,
    ))
}

/// The error of a box's `tar` that failed: its last line of standard error.
fn box_failed(path: &str, ran: &crate::provider::Collected) -> BoxError {
    let why = ran
        .output
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or("tar failed in the box");
    BoxError::Copy {
        path: path.to_owned(),
        why: why.chars().take(300).collect(),
        refused: false,
    }
}

impl Boxes {
    /// Run `argv` in box `name` with its output read by `read` on this thread (the box's
    /// command waited for on another); both results.
    fn stream_out<T>(
        &self,
        name: &str,
        argv: Vec<String>,
        read: impl FnOnce(std::fs::File) -> Result<T>,
    ) -> Result<(crate::provider::Collected, Result<T>)> {
        let provider = self.provider_of(name)?;
        let (r, w) = pipe()?;
        let null = dev_null()?;
        std::thread::scope(|s| {
            let box_side = s.spawn(move || provider.piped(name, argv, "/", false, null, w));
            // Dropped when done (or failed): a box still writing then ends on a broken pipe.
            let read = read(std::fs::File::from(r));
            let ran = box_side
                .join()
                .map_err(|_| BoxError::Io(std::io::Error::other("the box's side panicked")))?;
            Ok((ran?, read))
        })
    }

    /// Copy `srcs` (paths in box `name`; relative ones under /workspace) to `dst` on the
    /// host: into `dst` when it is a directory, else as `dst` (one source only).
    pub fn copy_out(
        &self,
        name: &str,
        srcs: &[String],
        dst: &Path,
        opts: &CopyOptions,
    ) -> Result<Copied> {
        self.ours(name)?;
        let into = dst.is_dir();
        if !into && srcs.len() != 1 {
            return Err(BoxError::Copy {
                path: dst.display().to_string(),
                why: "is not a directory, and several sources go into one".into(),
                refused: true,
            });
        }
        let mut total = Copied::default();
        for src in srcs {
            let (abs, parent, base) = box_path(src);
            let (dir, target) = if into {
                (dst.to_owned(), base.clone())
            } else {
                let file =
                    dst.file_name()
                        .and_then(|n| n.to_str())
                        .ok_or_else(|| BoxError::Copy {
                            path: dst.display().to_string(),
                            why: "names no file".into(),
                            refused: true,
                        })?;
                let dir = match dst.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
                    _ => PathBuf::from("."),
                };
                (dir, file.to_owned())
            };
            let mut argv: Vec<String> = vec!["tar".into(), "-c".into(), "-f".into(), "-".into()];
            argv.extend(opts.exclude.iter().map(|e| format!("--exclude={e}")));
            argv.extend(["-C".into(), parent, "--".into(), base.clone()]);
            let to = unpack::Target {
                dir: &dir,
                root: Some((&base, &target)),
            };
            let (ran, read) = self.stream_out(name, argv, |f| {
                unpack::unpack(
                    std::io::BufReader::with_capacity(1 << 20, f),
                    &to,
                    opts.max_bytes - total.bytes,
                )
            })?;
            let done = read?;
            // 1: files changed while they were read (GNU tar); the archive is whole.
            match ran.status {
                0 => {}
                1 => total.changed_while_read = true,
                _ => return Err(box_failed(&abs, &ran)),
            }
            total.files += done.files;
            total.dirs += done.dirs;
            total.bytes += done.bytes;
            total.skipped.extend(done.skipped);
        }
        Ok(total)
    }

    /// Bring box `name`'s `/workspace` to directory `to` on the host (made when missing):
    /// what `take` says of it.
    pub fn download(
        &self,
        name: &str,
        to: &Path,
        take: Take,
        opts: &CopyOptions,
    ) -> Result<Copied> {
        self.ours(name)?;
        fs_err::create_dir_all(to)?;
        // Inside the box: the list of what git keeps (and the repository), else everything.
        const SCRIPT: &str = r#"cd /workspace || exit 3
if [ "$1" = all ] || ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then exec tar -c -f - .; fi
{ git ls-files -z -c -o --exclude-standard
  [ "$1" = env ] && git ls-files -z -o -i --exclude-standard -- '.env*' '*/.env*'
  [ -d .git ] && find .git -print0
} | tar -c -f - --null --no-recursion -T -
"#;
        let mode = match take {
            Take::All => "all",
            Take::TrackedAndEnv => "env",
            Take::Tracked => "tracked",
        };
        let argv = ["sh", "-c", SCRIPT, "sh", mode].map(str::to_owned).to_vec();
        let target = unpack::Target {
            dir: to,
            root: None,
        };
        let (ran, read) = self.stream_out(name, argv, |f| {
            unpack::unpack(
                std::io::BufReader::with_capacity(1 << 20, f),
                &target,
                opts.max_bytes,
            )
        })?;
        let mut done = read?;
        match ran.status {
            0 => {}
            1 => done.changed_while_read = true,
            _ => return Err(box_failed(WORKSPACE, &ran)),
        }
        Ok(done)
    }

    /// Copy host paths `srcs` into box `name` at `dst` (relative: under /workspace): into
    /// `dst` when it is a directory in the box, else as `dst` (one source only). The change
    /// is captured as a node.
    pub fn copy_in(
        &self,
        name: &str,
        srcs: &[PathBuf],
        dst: &str,
        opts: &CopyOptions,
    ) -> Result<Copied> {
        self.ours(name)?;
        let (abs, parent, base) = box_path(dst);
        let kind = self.run_collected(
            name,
            ["sh", "-c", "if [ -d \"$1\" ]; then echo dir; elif [ -e \"$1\" ]; then echo file; else echo none; fi", "sh", &abs]
                .map(str::to_owned)
                .to_vec(),
            None,
            false,
        )?;
        let into = kind.output.trim() == "dir";
        if !into && srcs.len() != 1 {
            return Err(BoxError::Copy {
                path: abs,
                why: "is not a directory in the box, and several sources go into one".into(),
                refused: true,
            });
        }
        let mut named = Vec::new();
        for src in srcs {
            let file = src
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_owned)
                .or_else(|| {
                    // `.` or `dir/.`: the directory's own name.
                    std::path::absolute(src).ok().and_then(|p| {
                        p.components()
                            .next_back()
                            .and_then(|c| c.as_os_str().to_str().map(str::to_owned))
                    })
                })
                .ok_or_else(|| BoxError::Copy {
                    path: src.display().to_string(),
                    why: "names no file".into(),
                    refused: true,
                })?;
            named.push((src.clone(), if into { file } else { base.clone() }));
        }
        let (entries, mut tally) = pack::plan(&named, &opts.exclude, opts.max_bytes)?;
        let dir = if into { abs.clone() } else { parent };
        let argv = ["tar", "-x", "-f", "-", "--no-same-owner", "-C", &dir]
            .map(str::to_owned)
            .to_vec();
        let provider = self.provider_of(name)?;
        let (r, w) = pipe()?;
        let out = dev_null()?;
        let (ran, sent) = std::thread::scope(|s| {
            let host_side = s.spawn(move || {
                pack::pack(
                    &entries,
                    std::io::BufWriter::with_capacity(1 << 20, std::fs::File::from(w)),
                )
            });
            let ran = provider.piped(name, argv, "/", true, r, out);
            let sent = host_side
                .join()
                .map_err(|_| BoxError::Io(std::io::Error::other("the host's side panicked")))
                .and_then(|r| r);
            (ran, sent)
        });
        let ran = ran?;
        if ran.status != 0 {
            return Err(box_failed(&abs, &ran));
        }
        sent?;
        tally.node = ran.node;
        Ok(tally)
    }
}

#[cfg(test)]
mod tests {
    use super::box_path;

    #[test]
    fn box_paths_are_absolute_with_parent_and_name() {
        let p = |s: &str| {
            let (a, b, c) = box_path(s);
            (a, b, c)
        };
        assert_eq!(
            p("a.txt"),
            (
                "/workspace/a.txt".into(),
                "/workspace".into(),
                "a.txt".into()
            )
        );
        assert_eq!(
            p("/workspace/"),
            ("/workspace".into(), "/".into(), "workspace".into())
        );
        assert_eq!(p("/etc/x"), ("/etc/x".into(), "/etc".into(), "x".into()));
    }
}
