//! A box seen from a front end that is not a terminal (the MCP server): a command run with
//! its output collected, and the box's files read, written and listed — each by a command
//! run inside the box, through the box's own provider.
//!
//! Invariant: nothing here touches a box's tree from the host. A path is the box's to
//! resolve (its symlinks, its mounts), by a process inside the box; the host only parses
//! what that process printed, strictly, as box-controlled text: content crosses as base64
//! and is decoded on the host, listings as NUL-separated records.

use base64::Engine;
use serde::Serialize;

use crate::facade::Boxes;
use crate::provider::Collected;
use crate::records::record::WORKSPACE;
use crate::{BoxError, Result};

/// The most bytes one [`Boxes::read_file`] returns.
pub const MAX_READ: u64 = 4 << 20;
/// The most bytes one [`Boxes::write_file`] writes.
pub const MAX_WRITE: usize = 8 << 20;
/// The most entries one [`Boxes::list_files`] returns.
pub const MAX_ENTRIES: usize = 10_000;
/// Raw bytes per command of a write: their base64 (64 KiB) stays under the kernel's limit on
/// one argument (128 KiB).
const WRITE_CHUNK: usize = 48 << 10;

/// Part of a file of a box.
#[derive(Debug, Clone, Serialize)]
pub struct FileRead {
    /// The path as given (relative ones are under `/workspace`).
    pub path: String,
    /// The file's size.
    pub size: u64,
    /// Where the part read starts.
    pub offset: u64,
    /// How many bytes were read.
    pub length: u64,
    /// `utf-8` when the part is text, else `base64`.
    pub encoding: &'static str,
    pub content: String,
    /// Whether the file goes on past the part read (read again from `offset + length`).
    pub more: bool,
}

/// A file written into a box.
#[derive(Debug, Clone, Serialize)]
pub struct FileWritten {
    pub path: String,
    pub bytes: usize,
    /// The node the write made (`None`: auto-capture is off, or nothing changed).
    pub node: Option<String>,
}

/// One entry of a directory of a box.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirEntry {
    /// Its name in the directory (box-controlled text).
    pub name: String,
    /// `file`, `directory`, `symlink` or `other`.
    pub kind: &'static str,
    pub size: u64,
    /// Its permission bits, in octal (`755`).
    pub mode: String,
    /// Its modification time, in seconds since the epoch.
    pub modified: i64,
}

/// A directory of a box.
#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    pub path: String,
    pub entries: Vec<DirEntry>,
    /// Whether entries past [`MAX_ENTRIES`] were left out.
    pub truncated: bool,
}

/// Exit statuses of the in-box scripts below: the path names nothing / something of the
/// wrong kind.
const MISSING: i32 = 3;
const WRONG_KIND: i32 = 4;

const READ_SCRIPT: &str = r#"f=$1
[ -e "$f" ] || { echo "no such file"; exit 3; }
[ -d "$f" ] && { echo "is a directory"; exit 4; }
[ -f "$f" ] || { echo "is not a regular file"; exit 4; }
size=$(wc -c < "$f") || exit 1
echo $size
tail -c +$(($2 + 1)) -- "$f" 2>/dev/null | head -c "$3" | base64 | tr -d '\n'
"#;

const WRITE_SCRIPT: &str = r#"f=$1
if [ "$2" = new ]; then
  [ -d "$f" ] && { echo "is a directory"; exit 4; }
  [ "$3" = parents ] && { mkdir -p -- "$(dirname -- "$f")" || exit 1; }
  printf '%s' "$4" | base64 -d > "$f" || exit 1
else
  printf '%s' "$4" | base64 -d >> "$f" || exit 1
fi
"#;

const LIST_SCRIPT: &str = r#"cd -- "$1" 2>/dev/null || { [ -e "$1" ] && { echo "is not a directory"; exit 4; }; echo "no such directory"; exit 3; }
for f in * .*; do
  case $f in .|..) continue;; esac
  [ -e "$f" ] || [ -L "$f" ] || continue
  printf '%s\0%s\0' "$(stat -c '%s %a %Y %F' -- "$f")" "$f"
done
"#;

impl Boxes {
    /// Run `argv` in box `name` (started when it is not running) in `workdir` (`None`:
    /// `/workspace`), with no input, its output (stdout and stderr together) collected; with
    /// `capture`, a change it makes becomes a node.
    pub fn run_collected(
        &self,
        name: &str,
        argv: Vec<String>,
        workdir: Option<&str>,
        capture: bool,
    ) -> Result<Collected> {
        self.ours(name)?;
        self.provider_of(name)?
            .collect(name, argv, workdir.unwrap_or(WORKSPACE), capture)
    }

    /// Up to `limit` bytes (at most [`MAX_READ`]) of file `path` of box `name` from byte
    /// `offset`, read inside the box.
    pub fn read_file(&self, name: &str, path: &str, offset: u64, limit: u64) -> Result<FileRead> {
        let limit = limit.min(MAX_READ);
        let ran = self.script(
            name,
            READ_SCRIPT,
            &[path, &offset.to_string(), &limit.to_string()],
            false,
        )?;
        let failed = |why: &str| file_error(name, path, 1, why);
        let (size, b64) = ran
            .output
            .split_once('\n')
            .ok_or_else(|| failed("the box printed no size"))?;
        let size: u64 = size
            .trim()
            .parse()
            .map_err(|_| failed("the box printed no size"))?;
        let data = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|_| failed("the box printed no base64"))?;
        let length = data.len() as u64;
        let (encoding, content) = match String::from_utf8(data) {
            Ok(text) => ("utf-8", text),
            Err(e) => (
                "base64",
                base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
            ),
        };
        Ok(FileRead {
            path: path.to_owned(),
            size,
            offset,
            length,
            encoding,
            content,
            more: offset.saturating_add(length) < size,
        })
    }

    /// Write `content` to file `path` of box `name` (replacing it; with `parents`, its
    /// missing parent directories are made), inside the box; a node records it when the
    /// box captures.
    pub fn write_file(
        &self,
        name: &str,
        path: &str,
        content: &[u8],
        parents: bool,
    ) -> Result<FileWritten> {
        if content.len() > MAX_WRITE {
            return Err(file_error(
                name,
                path,
                WRONG_KIND,
                &format!(
                    "{} bytes is over the limit of {MAX_WRITE} for one write",
                    content.len()
                ),
            ));
        }
        let chunks: Vec<&[u8]> = if content.is_empty() {
            vec![&[]]
        } else {
            content.chunks(WRITE_CHUNK).collect()
        };
        let mut node = None;
        for (i, chunk) in chunks.iter().enumerate() {
            let b64 = base64::engine::general_purpose::STANDARD.encode(chunk);
            let mode = if i == 0 { "new" } else { "append" };
            let parents = if parents { "parents" } else { "" };
            // Only the last command captures: its node holds the whole file.
            let ran = self.script(
                name,
                WRITE_SCRIPT,
                &[path, mode, parents, &b64],
                i + 1 == chunks.len(),
            )?;
            node = ran.node;
        }
        Ok(FileWritten {
            path: path.to_owned(),
            bytes: content.len(),
            node,
        })
    }

    /// The entries of directory `path` of box `name` (at most [`MAX_ENTRIES`]), listed
    /// inside the box, by name.
    pub fn list_files(&self, name: &str, path: &str) -> Result<Listing> {
        let ran = self.script(name, LIST_SCRIPT, &[path], false)?;
        let mut entries = parse_listing(&ran.output)
            .ok_or_else(|| file_error(name, path, 1, "the box printed no listing"))?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let truncated = entries.len() > MAX_ENTRIES;
        entries.truncate(MAX_ENTRIES);
        Ok(Listing {
            path: path.to_owned(),
            entries,
            truncated,
        })
    }

    /// Run `script` with `sh` in box `name` with `args` as its `$1…`; a failure is the
    /// error of the path (`args[0]`) it was about.
    fn script(&self, name: &str, script: &str, args: &[&str], capture: bool) -> Result<Collected> {
        let argv = ["sh", "-c", script, "sh"]
            .into_iter()
            .chain(args.iter().copied())
            .map(str::to_owned)
            .collect();
        let ran = self.run_collected(name, argv, None, capture)?;
        if ran.status != 0 {
            let why = ran.output.lines().last().unwrap_or("failed").to_owned();
            return Err(file_error(name, args[0], ran.status, &why));
        }
        Ok(ran)
    }
}

/// The error of path `path` of box `name`, from the in-box script's `status` and the last
/// line it printed (`why`).
fn file_error(name: &str, path: &str, status: i32, why: &str) -> BoxError {
    BoxError::BoxFile {
        name: name.to_owned(),
        path: path.to_owned(),
        why: why.chars().take(200).collect(),
        missing: status == MISSING,
        refused: status == WRONG_KIND,
    }
}

/// The entries the list script printed: `SIZE MODE MTIME KIND` and the name, each ended by
/// a NUL. `None` when the output is not that.
fn parse_listing(output: &str) -> Option<Vec<DirEntry>> {
    let mut fields = output.split('\0');
    let mut entries = Vec::new();
    while let Some(meta) = fields.next() {
        if meta.is_empty() {
            break;
        }
        let name = fields.next()?;
        let mut words = meta.splitn(4, ' ');
        let size = words.next()?.parse().ok()?;
        let mode = words.next()?.to_owned();
        let modified = words.next()?.parse().ok()?;
        let kind = match words.next()? {
            "regular file" | "regular empty file" => "file",
            "directory" => "directory",
            "symbolic link" => "symlink",
            _ => "other",
        };
        entries.push(DirEntry {
            name: name.to_owned(),
            kind,
            size,
            mode,
            modified,
        });
    }
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_parses_and_odd_names_stay_whole() {
        let out = "12 644 1700000000 regular file\0a b\nc\x005 755 1700000001 directory\0d\0";
        let e = parse_listing(out).expect("parses");
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].name.as_str(), e[0].kind, e[0].size, e[0].mode.as_str()),
            ("a b\nc", "file", 12, "644")
        );
        assert_eq!((e[1].name.as_str(), e[1].kind), ("d", "directory"));
        assert_eq!(parse_listing("").map(|e| e.len()), Some(0));
        assert!(parse_listing("garbage\0x\0").is_none());
    }
}
