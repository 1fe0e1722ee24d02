//! Crash-safe writes of small metadata files.
//!
//! Invariant: a reader sees either the old content or the new content of a file, never a mix
//! or a truncated file, even if the machine loses power in between. The recipe is: write a
//! temporary file in the same directory, fsync it, rename it over the target, fsync the
//! directory. Temporary files are named `.<name>.tmp-<pid>-<rand>` so `reconcile` passes can
//! recognise and remove leftovers.

use std::io::Write;
use std::path::Path;

use serde::{de::DeserializeOwned, Serialize};

use crate::{Error, Result};

/// Prefix of every temporary file this module creates.
pub const TMP_MARKER: &str = ".tmp-";

/// Atomically replace `path` with `bytes`, durably (the file and its directory are synced).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, bytes, Durability::Synced)
}

/// Atomically replace `path` with `bytes` without syncing: readers see old or new, never a
/// mix, but durability is left to a later [`syncfs`] that covers many writes at once.
pub fn write_atomic_unsynced(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, bytes, Durability::None)
}

/// Flush every dirty page and metadata change of the filesystem holding `path`: one call
/// makes a whole batch of writes (a layer's files, its record, its node) durable.
pub fn syncfs(path: &Path) -> Result<()> {
    let dir = fs_err::File::open(path)?;
    rustix::fs::syncfs(&dir)
        .map_err(std::io::Error::from)
        .map_err(io_error("syncfs", path))
}

/// How [`write_atomic_with`] makes the new file's data durable before it is renamed into
/// place (and whether the rename is made durable after).
enum Durability<'a> {
    /// Not at all.
    None,
    /// `fsync` of the file, and of its directory after the rename.
    Synced,
    /// `settle` the file (e.g. write its data out and wait, with no cache flush), and `fsync`
    /// the directory after the rename: where the filesystem's journal commits in order, that
    /// one journal commit makes both durable.
    Settled(&'a dyn Fn(&std::fs::File) -> std::io::Result<()>),
    /// `settle` the file, rename it, then `fsync` the file: where an `fsync` of an inode
    /// logs its new name (and the name it replaced) with it, as btrfs's log tree does, that
    /// one flush makes the data and the rename durable. The data is settled before the
    /// rename so that no transaction committed in between can hold the new name over a
    /// file without its data.
    SettledThenRenamedSynced(&'a dyn Fn(&std::fs::File) -> std::io::Result<()>),
}

fn write_atomic_with(path: &Path, bytes: &[u8], durability: Durability<'_>) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}{TMP_MARKER}{}-{}",
        std::process::id(),
        &crate::id::new_id()[..8]
    ));
    let result = (|| -> Result<()> {
        let mut f = fs_err::File::create(&tmp)?;
        f.write_all(bytes)?;
        match &durability {
            Durability::None => {}
            Durability::Synced => f.sync_all()?,
            Durability::Settled(settle) | Durability::SettledThenRenamedSynced(settle) => {
                settle(f.file()).map_err(io_error("writing out", &tmp))?
            }
        }
        fs_err::rename(&tmp, path)?;
        match durability {
            Durability::None => {}
            Durability::Synced | Durability::Settled(_) => sync_dir(dir)?,
            // `f` still names the inode, now at `path`.
            Durability::SettledThenRenamedSynced(_) => {
                f.file().sync_all().map_err(io_error("fsync", path))?
            }
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// An IO error of `doing` on `path`, naming both.
fn io_error<'a>(doing: &'a str, path: &'a Path) -> impl Fn(std::io::Error) -> Error + 'a {
    move |e| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("{doing} {}: {e}", path.display()),
        ))
    }
}

fn json_bytes<T: Serialize>(path: &Path, value: &T) -> Result<Vec<u8>> {
    json_bytes_as(path, value, serde_json::to_vec_pretty)
}

/// `value` serialized by `to` (pretty or compact), with a final newline.
fn json_bytes_as<T: Serialize>(
    path: &Path,
    value: &T,
    to: fn(&T) -> serde_json::Result<Vec<u8>>,
) -> Result<Vec<u8>> {
    let mut bytes = to(value).map_err(|source| Error::Json {
        path: path.to_owned(),
        source,
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// [`write_json`] with the temporary file's data made durable by `settle` rather than an
/// `fsync` of its own; the directory's `fsync` after the rename is the one flush. Correct
/// only where the caller knows the journal commits `settle`d data before the rename (see
/// `agentbox_store`'s use for ext4 and xfs).
pub fn write_json_settled<T: Serialize>(
    path: &Path,
    value: &T,
    settle: &dyn Fn(&std::fs::File) -> std::io::Result<()>,
) -> Result<()> {
    write_atomic_with(path, &json_bytes(path, value)?, Durability::Settled(settle))
}

/// [`write_json`] with one flush where an `fsync` of a renamed inode makes its new name
/// durable (btrfs): the temporary file's data is written out by `settle` (on btrfs until its
/// extent is recorded), it is renamed over `path`, and the one `fsync` is of the file. Correct only where the caller knows the
/// filesystem logs a synced inode's names (see `agentbox_store`'s use for btrfs).
pub fn write_json_renamed_then_synced<T: Serialize>(
    path: &Path,
    value: &T,
    settle: &dyn Fn(&std::fs::File) -> std::io::Result<()>,
) -> Result<()> {
    write_atomic_with(
        path,
        &json_bytes(path, value)?,
        Durability::SettledThenRenamedSynced(settle),
    )
}

/// Atomically write `value` as pretty JSON.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    write_atomic(path, &json_bytes(path, value)?)
}

/// Like [`write_json`] but without syncing (see [`write_atomic_unsynced`]).
pub fn write_json_unsynced<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    write_atomic_unsynced(path, &json_bytes(path, value)?)
}

/// Like [`write_json_unsynced`] but without whitespace: for bookkeeping only programs read,
/// whose size grows with a tree (a third of the pretty form's bytes to write and parse).
pub fn write_json_compact_unsynced<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    write_atomic_unsynced(path, &json_bytes_as(path, value, serde_json::to_vec)?)
}

/// Read a JSON file written by [`write_json`].
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = fs_err::read(path)?;
    serde_json::from_slice(&bytes).map_err(|source| Error::Json {
        path: path.to_owned(),
        source,
    })
}

/// Read a JSON file, `None` when it does not exist.
pub fn read_json_opt<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    match std::fs::metadata(path) {
        Ok(_) => read_json(path).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Io(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", path.display()),
        ))),
    }
}

/// fsync a directory so a rename or unlink inside it is durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    fs_err::File::open(dir)?.sync_all()?;
    Ok(())
}

/// True when `name` is a temporary file left by an interrupted [`write_atomic`].
pub fn is_tmp_name(name: &str) -> bool {
    name.starts_with('.') && name.contains(TMP_MARKER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_and_replace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("a.json");
        write_json(&p, &vec![1, 2, 3]).expect("write");
        write_json(&p, &vec![4]).expect("replace");
        let v: Vec<i32> = read_json(&p).expect("read");
        assert_eq!(v, vec![4]);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("readdir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
        assert!(read_json_opt::<Vec<i32>>(&dir.path().join("missing"))
            .expect("missing is fine")
            .is_none());
        assert!(is_tmp_name(".a.json.tmp-12-abcd"));
    }
}
