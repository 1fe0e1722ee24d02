//! Filesystem operations with full fidelity: scanning trees (plain or an overlay chain),
//! copying them exactly, and comparing them.
//!
//! Fidelity means: file types (regular, directory, symlink — dangling too —, fifo, socket,
//! char/block devices), contents, sparse holes, the full mode including setuid/setgid/sticky
//! (never filtered by the umask), owners, every xattr (including `trusted.*` and `user.*`),
//! mtimes of files and directories (directories set after their children), in-tree hardlinks
//! and empty directories.

pub mod copy;
pub mod diff;
pub mod scan;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Type of a filesystem entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

/// Metadata of one entry, as read with `lstat` plus xattrs and the link target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    /// Permission bits including setuid/setgid/sticky (`st_mode & 0o7777`).
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: i64,
    pub ctime_sec: i64,
    pub ctime_nsec: i64,
    pub dev: u64,
    pub ino: u64,
    pub nlink: u64,
    pub rdev: u64,
    /// Symlink target (symlinks only).
    pub target: Option<PathBuf>,
    /// Every extended attribute, name → value.
    pub xattrs: BTreeMap<String, Vec<u8>>,
}

/// One entry of a scanned tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path relative to the tree root; the root itself is the empty path.
    pub rel: PathBuf,
    /// Absolute path where this entry's content can be read (in an overlay chain: the layer
    /// that provides it).
    pub src: PathBuf,
    pub meta: Meta,
}

/// A scanned tree: every entry keyed by its relative path, the root included (empty path).
/// Iteration order (BTreeMap over paths) puts parents before children.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    pub entries: BTreeMap<PathBuf, Entry>,
}
