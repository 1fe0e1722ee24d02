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
pub mod flusher;
pub mod scan;
pub mod walk;

pub use copy::{copy_dir, copy_entry, copy_tree, CopyOpts, CopyStats};
pub use diff::{compare_exact, diff_trees, Change, ChangeKind};
pub use scan::{read_meta, read_meta_beneath, scan_chain, scan_tree, walk_chain};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
    /// Birth time (seconds, nanoseconds), where the filesystem records one: with the inode
    /// number it tells a directory made again under a reused inode from the old one.
    pub btime: Option<(i64, u32)>,
    pub dev: u64,
    pub ino: u64,
    pub nlink: u64,
    pub rdev: u64,
    /// Symlink target (symlinks only).
    pub target: Option<PathBuf>,
    /// Every extended attribute, name → value.
    pub xattrs: BTreeMap<String, Vec<u8>>,
}

impl Meta {
    /// Whether both record a birth time and the two differ: another inode under a reused
    /// number, which a change time from the same clock tick would not tell apart.
    pub fn born_apart(&self, other: &Meta) -> bool {
        matches!((self.btime, other.btime), (Some(a), Some(b)) if a != b)
    }

    /// Timestamps that give an entry this mtime and leave its atime as it is.
    pub fn mtime_only(&self) -> rustix::fs::Timestamps {
        rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec {
                tv_sec: 0,
                tv_nsec: rustix::fs::UTIME_OMIT,
            },
            last_modification: rustix::fs::Timespec {
                tv_sec: self.mtime_sec,
                tv_nsec: self.mtime_nsec,
            },
        }
    }
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

impl Kind {
    /// Lowercase name, as used in messages and serialised forms.
    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "dir",
            Kind::Symlink => "symlink",
            Kind::Fifo => "fifo",
            Kind::Socket => "socket",
            Kind::CharDev => "chardev",
            Kind::BlockDev => "blockdev",
        }
    }
}

impl Meta {
    /// An overlayfs whiteout: a character device with device number 0/0, the only form
    /// overlayfs makes and the only one a store's layers hold.
    ///
    /// A regular file with an `overlay.whiteout` attribute is *not* one. Overlayfs reads that
    /// form only in a directory marked for it (an image builder's form), and a box can set
    /// `user.*` attributes on its files: taking the attribute alone as a whiteout would let a
    /// box hide a file from `show`, `diff` and `export` while it stays in the tree.
    pub fn is_whiteout(&self) -> bool {
        self.kind == Kind::CharDev && self.rdev == 0
    }

    /// True for directories.
    pub fn is_dir(&self) -> bool {
        self.kind == Kind::Dir
    }
}

impl Tree {
    /// The entry at `rel` (the root is the empty path).
    pub fn get(&self, rel: &Path) -> Option<&Entry> {
        self.entries.get(rel)
    }

    /// The root entry, if the tree has one.
    pub fn root(&self) -> Option<&Entry> {
        self.entries.get(Path::new(""))
    }

    /// Number of entries, the root included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the tree has no entry at all (not even a root).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Wrap a `rustix` error into an IO error that names the operation and the path.
pub(crate) fn errno_at(op: &str, path: &Path, errno: rustix::io::Errno) -> crate::Error {
    let io = std::io::Error::from(errno);
    crate::Error::Io(std::io::Error::new(
        io.kind(),
        format!("{op} {}: {io}", path.display()),
    ))
}

/// Wrap a std IO error so that its message names the operation and the path.
pub(crate) fn io_at(op: &str, path: &Path, err: std::io::Error) -> crate::Error {
    crate::Error::Io(std::io::Error::new(
        err.kind(),
        format!("{op} {}: {err}", path.display()),
    ))
}
