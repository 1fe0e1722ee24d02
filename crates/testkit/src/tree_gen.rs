//! Deterministic random directory trees for property tests of filesystem code.
//!
//! A [`TreeSpec`] describes a tree: nested and empty directories, files with pseudo-random
//! contents (some sparse: a large file with data only at its start and end), symlinks (dangling,
//! relative and absolute targets), in-tree hardlinks, fifos and sockets, modes with
//! setuid/setgid/sticky bits, `user.*` xattrs and mtimes with nanoseconds. When generated for
//! root it also has `trusted.*` xattrs, foreign owners and a character device.
//! [`materialize`] creates it on disk, setting every mtime last (directories after their
//! children), so the result is a fixed point for an exact copy.

use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::sample::Index;
use rustix::fs::{AtFlags, FileType, Mode, Timespec, Timestamps, CWD, UTIME_OMIT};

/// Modes drawn for regular files.
pub const FILE_MODES: [u32; 9] = [
    0o4755, 0o2750, 0o1777, 0o600, 0o777, 0o640, 0o644, 0o755, 0o400,
];
/// Modes drawn for directories (all keep the owner's rwx so a non-root run can clean up).
pub const DIR_MODES: [u32; 7] = [0o755, 0o700, 0o1777, 0o2750, 0o2775, 0o750, 0o3777];
/// Modes drawn for fifos, sockets and devices.
pub const SPECIAL_MODES: [u32; 3] = [0o644, 0o600, 0o666];
/// Owners drawn when running as root.
pub const OWNERS: [(u32, u32); 4] = [(1000, 1001), (0, 0), (1001, 1000), (65534, 65534)];
/// Symlink targets drawn (none needs to resolve).
pub const LINK_TARGETS: [&str; 6] = [
    "missing",
    "../up/and/away",
    "/nonexistent/absolute/target",
    "/etc",
    ".",
    "f0",
];

/// File contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// `len` pseudo-random bytes derived from `seed`.
    Random { seed: u64, len: usize },
    /// A file of `len` bytes with `head` random bytes at the start, `tail` at the end, and a
    /// hole in between.
    Sparse {
        seed: u64,
        len: u64,
        head: usize,
        tail: usize,
    },
}

/// What a node is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeKind {
    Dir,
    File(Content),
    Symlink(PathBuf),
    /// A hardlink to the regular file at this relative path (created earlier); the node's own
    /// mode, owner, xattrs and mtime are ignored (they are the file's).
    Hardlink(PathBuf),
    Fifo,
    Socket,
    CharDev {
        major: u32,
        minor: u32,
    },
}

/// One node of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// Relative to the tree root; parents always come earlier in [`TreeSpec::nodes`].
    pub path: PathBuf,
    pub kind: NodeKind,
    /// Permission bits incl. setuid/setgid/sticky (ignored for symlinks).
    pub mode: u32,
    /// `(uid, gid)` to set, or keep the creator's.
    pub owner: Option<(u32, u32)>,
    /// Xattrs to set (files and directories only).
    pub xattrs: Vec<(String, Vec<u8>)>,
    /// `(seconds, nanoseconds)`.
    pub mtime: (i64, i64),
}

/// A whole tree: the root's mode, xattrs and mtime plus its nodes, parents first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeSpec {
    pub root_mode: u32,
    pub root_xattrs: Vec<(String, Vec<u8>)>,
    pub root_mtime: (i64, i64),
    pub nodes: Vec<NodeSpec>,
}

/// True when running as root.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Pseudo-random bytes (splitmix64) — deterministic for a seed.
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Set the mtime of `path` (not following a symlink), leaving the atime alone.
pub fn set_mtime(path: &Path, sec: i64, nsec: i64) {
    let times = Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        last_modification: Timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        },
    };
    rustix::fs::utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW)
        .unwrap_or_else(|e| panic!("set mtime of {}: {e}", path.display()));
}

/// Set the full mode of `path` (setuid/setgid/sticky included, no umask).
pub fn set_mode(path: &Path, mode: u32) {
    rustix::fs::chmodat(CWD, path, Mode::from_raw_mode(mode), AtFlags::empty())
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

/// Write `contents` to a new file `path`, then set its full mode and mtime.
pub fn write_and_set_times(path: &Path, contents: &[u8], mode: u32, mtime: (i64, i64)) {
    fs_err::write(path, contents).expect("write test file");
    set_mode(path, mode);
    set_mtime(path, mtime.0, mtime.1);
}

/// Create a sparse file: `len` bytes, `head` at offset 0, `tail` ending at `len`.
pub fn write_sparse(path: &Path, len: u64, head: &[u8], tail: &[u8]) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.set_len(len).expect("set sparse file length");
    f.write_all_at(head, 0).expect("write sparse head");
    f.write_all_at(tail, len - tail.len() as u64)
        .expect("write sparse tail");
}

fn lchown(path: &Path, uid: u32, gid: u32) {
    rustix::fs::chownat(
        CWD,
        path,
        Some(rustix::fs::Uid::from_raw(uid)),
        Some(rustix::fs::Gid::from_raw(gid)),
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .unwrap_or_else(|e| panic!("chown {uid}:{gid} {}: {e}", path.display()));
}

fn set_xattrs(path: &Path, xattrs: &[(String, Vec<u8>)]) {
    for (name, value) in xattrs {
        xattr::set(path, name, value)
            .unwrap_or_else(|e| panic!("setxattr {name} on {}: {e}", path.display()));
    }
}

fn mknod(path: &Path, ft: FileType, dev: u64) {
    rustix::fs::mknodat(CWD, path, ft, Mode::from_raw_mode(0o600), dev)
        .unwrap_or_else(|e| panic!("mknod {}: {e}", path.display()));
}

/// Create the tree described by `spec` under `root` (created if missing). Panics on error.
pub fn materialize(spec: &TreeSpec, root: &Path) {
    fs_err::create_dir_all(root).expect("create tree root");
    // 1. Create everything; directories stay 0700 until the end.
    for node in &spec.nodes {
        let path = root.join(&node.path);
        match &node.kind {
            NodeKind::Dir => std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&path)
                .unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display())),
            NodeKind::File(Content::Random { seed, len }) => {
                fs_err::write(&path, random_bytes(*seed, *len)).expect("write file")
            }
            NodeKind::File(Content::Sparse {
                seed,
                len,
                head,
                tail,
            }) => {
                let bytes = random_bytes(*seed, head + tail);
                write_sparse(&path, *len, &bytes[..*head], &bytes[*head..]);
            }
            NodeKind::Symlink(target) => {
                fs_err::os::unix::fs::symlink(target, &path).expect("create symlink")
            }
            NodeKind::Hardlink(to) => {
                fs_err::hard_link(root.join(to), &path).expect("create hardlink")
            }
            NodeKind::Fifo => mknod(&path, FileType::Fifo, 0),
            NodeKind::Socket => mknod(&path, FileType::Socket, 0),
            NodeKind::CharDev { major, minor } => mknod(
                &path,
                FileType::CharacterDevice,
                rustix::fs::makedev(*major, *minor),
            ),
        }
    }
    // 2. Metadata of non-directories: owner, xattrs, mode (after chown, which clears
    //    setuid), mtime.
    for node in &spec.nodes {
        if matches!(node.kind, NodeKind::Dir | NodeKind::Hardlink(_)) {
            continue;
        }
        let path = root.join(&node.path);
        if let Some((uid, gid)) = node.owner {
            lchown(&path, uid, gid);
        }
        set_xattrs(&path, &node.xattrs);
        if !matches!(node.kind, NodeKind::Symlink(_)) {
            set_mode(&path, node.mode);
        }
        set_mtime(&path, node.mtime.0, node.mtime.1);
    }
    // 3. Directories, deepest (latest) first, then the root.
    for node in spec.nodes.iter().rev() {
        if node.kind != NodeKind::Dir {
            continue;
        }
        let path = root.join(&node.path);
        if let Some((uid, gid)) = node.owner {
            lchown(&path, uid, gid);
        }
        set_xattrs(&path, &node.xattrs);
        set_mode(&path, node.mode);
        set_mtime(&path, node.mtime.0, node.mtime.1);
    }
    set_xattrs(root, &spec.root_xattrs);
    set_mode(root, spec.root_mode);
    set_mtime(root, spec.root_mtime.0, spec.root_mtime.1);
}

#[derive(Debug, Clone)]
enum RawKind {
    Dir,
    File {
        seed: u64,
        len: usize,
    },
    Sparse {
        seed: u64,
        len: u64,
        head: usize,
        tail: usize,
    },
    Symlink(&'static str),
    Hardlink(Index),
    Fifo,
    Socket,
    CharDev,
}

#[derive(Debug, Clone)]
struct RawNode {
    parent: Index,
    kind: RawKind,
    mode: Index,
    owner: Option<(u32, u32)>,
    user_xattrs: Vec<Vec<u8>>,
    trusted_xattr: Option<Vec<u8>>,
    mtime: (i64, i64),
}

fn mtime() -> impl Strategy<Value = (i64, i64)> {
    (1_000_000_000i64..1_700_000_000, 0i64..1_000_000_000)
}

fn raw_kind(privileged: bool) -> BoxedStrategy<RawKind> {
    let file = (any::<u64>(), prop_oneof![0usize..512, 0usize..65_536])
        .prop_map(|(seed, len)| RawKind::File { seed, len });
    let sparse = (
        any::<u64>(),
        prop::sample::select(vec![1u64 << 20, 300_000]),
        1usize..8192,
        1usize..8192,
    )
        .prop_map(|(seed, len, head, tail)| RawKind::Sparse {
            seed,
            len,
            head,
            tail,
        });
    let symlink = prop::sample::select(LINK_TARGETS.to_vec()).prop_map(RawKind::Symlink);
    let hardlink = any::<Index>().prop_map(RawKind::Hardlink);
    let mut kinds: Vec<(u32, BoxedStrategy<RawKind>)> = vec![
        (3, Just(RawKind::Dir).boxed()),
        (5, file.boxed()),
        (1, sparse.boxed()),
        (2, symlink.boxed()),
        (2, hardlink.boxed()),
        (1, Just(RawKind::Fifo).boxed()),
        (1, Just(RawKind::Socket).boxed()),
    ];
    if privileged {
        // Device nodes need CAP_MKNOD.
        kinds.push((1, Just(RawKind::CharDev).boxed()));
    }
    prop::strategy::Union::new_weighted(kinds).boxed()
}

fn raw_node(privileged: bool) -> impl Strategy<Value = RawNode> {
    let owner = if privileged {
        prop::option::of(prop::sample::select(OWNERS.to_vec())).boxed()
    } else {
        Just(None).boxed()
    };
    let trusted = if privileged {
        prop::option::of(prop::collection::vec(any::<u8>(), 0..16)).boxed()
    } else {
        Just(None).boxed()
    };
    (
        any::<Index>(),
        raw_kind(privileged),
        any::<Index>(),
        owner,
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..24), 0..3),
        trusted,
        mtime(),
    )
        .prop_map(
            |(parent, kind, mode, owner, user_xattrs, trusted_xattr, mtime)| RawNode {
                parent,
                kind,
                mode,
                owner,
                user_xattrs,
                trusted_xattr,
                mtime,
            },
        )
}

fn xattr_list(user: &[Vec<u8>], trusted: &Option<Vec<u8>>) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = user
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("user.k{i}"), v.clone()))
        .collect();
    if let Some(v) = trusted {
        out.push(("trusted.t0".to_string(), v.clone()));
    }
    out
}

fn build(raws: Vec<RawNode>, root_mode: Index, root_mtime: (i64, i64)) -> TreeSpec {
    let mut dirs: Vec<PathBuf> = vec![PathBuf::new()];
    let mut files: Vec<PathBuf> = Vec::new();
    let mut nodes = Vec::with_capacity(raws.len());
    for (i, raw) in raws.into_iter().enumerate() {
        let parent = raw.parent.get(&dirs).clone();
        let kind = match raw.kind {
            RawKind::Dir => NodeKind::Dir,
            RawKind::File { seed, len } => NodeKind::File(Content::Random { seed, len }),
            RawKind::Sparse {
                seed,
                len,
                head,
                tail,
            } => NodeKind::File(Content::Sparse {
                seed,
                len,
                head,
                tail,
            }),
            RawKind::Symlink(t) => NodeKind::Symlink(PathBuf::from(t)),
            RawKind::Hardlink(idx) if !files.is_empty() => {
                NodeKind::Hardlink(idx.get(&files).clone())
            }
            RawKind::Hardlink(idx) => NodeKind::File(Content::Random {
                seed: idx.index(1 << 20) as u64,
                len: 100,
            }),
            RawKind::Fifo => NodeKind::Fifo,
            RawKind::Socket => NodeKind::Socket,
            RawKind::CharDev => NodeKind::CharDev { major: 1, minor: 3 },
        };
        let (prefix, mode, xattrs) = match &kind {
            NodeKind::Dir => (
                "d",
                *raw.mode.get(&DIR_MODES),
                xattr_list(&raw.user_xattrs, &raw.trusted_xattr),
            ),
            NodeKind::File(_) => (
                "f",
                *raw.mode.get(&FILE_MODES),
                xattr_list(&raw.user_xattrs, &raw.trusted_xattr),
            ),
            NodeKind::Symlink(_) => ("s", 0o777, Vec::new()),
            NodeKind::Hardlink(_) => ("h", 0, Vec::new()),
            NodeKind::Fifo => ("p", *raw.mode.get(&SPECIAL_MODES), Vec::new()),
            NodeKind::Socket => ("k", *raw.mode.get(&SPECIAL_MODES), Vec::new()),
            NodeKind::CharDev { .. } => ("c", *raw.mode.get(&SPECIAL_MODES), Vec::new()),
        };
        let path = parent.join(format!("{prefix}{i}"));
        match &kind {
            NodeKind::Dir => dirs.push(path.clone()),
            NodeKind::File(_) => files.push(path.clone()),
            _ => {}
        }
        nodes.push(NodeSpec {
            path,
            kind,
            mode,
            owner: raw.owner,
            xattrs,
            mtime: raw.mtime,
        });
    }
    TreeSpec {
        root_mode: *root_mode.get(&DIR_MODES),
        root_xattrs: vec![("user.root".to_string(), b"r".to_vec())],
        root_mtime,
        nodes,
    }
}

/// Random trees of up to 30 nodes; root-only features (owners, `trusted.*`, a device) are
/// included when running as root.
pub fn tree_spec() -> impl Strategy<Value = TreeSpec> {
    tree_spec_with(is_root())
}

/// Random trees of up to 30 nodes; `privileged` adds owners, `trusted.*` xattrs and a
/// character device (creating them needs root).
pub fn tree_spec_with(privileged: bool) -> impl Strategy<Value = TreeSpec> {
    (
        prop::collection::vec(raw_node(privileged), 0..30),
        any::<Index>(),
        mtime(),
    )
        .prop_map(|(raws, mode, mtime)| build(raws, mode, mtime))
}
