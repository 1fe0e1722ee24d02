//! A [`Kernel`] that records every call as an [`Op`] and applies it to an in-memory tree
//! of paths instead of the machine: the rootfs builder's plan, observable without root.
//!
//! One file (over 600 lines): the in-memory tree and the kernel checks applied to it are
//! one model of the [`Kernel`] trait; every recorded call needs both.
//!
//! The tree starts as `/` plus what a test says exists ([`Recording::dir`],
//! [`Recording::file`], [`Recording::symlink`]) and grows with what the recorded calls make.
//! It checks what the kernel would, so that a plan that only works on paper fails here too:
//! a mount or a bind needs an existing target (and a bind an existing source of the same
//! kind: a directory on a directory, anything else on a non-directory), a file needs its
//! parent directory, a symlink or whiteout needs a free name. Mounts do not change the tree
//! (a file system's content is not modelled): a test pretends what a mount would show.
//!
//! Every call is recorded, refused ones too (they reached the kernel); [`Recording::refused`]
//! lists those, and [`Recording::refusing`] makes chosen calls fail.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::io;
use std::path::{Component, Path, PathBuf};

use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};

use super::{Entry, Kernel, Kind, Stat};
use crate::idmap::BoxUserNs;

/// One recorded call of [`Kernel`]; paths as the caller passed them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    Mount {
        src: String,
        target: PathBuf,
        fstype: String,
        flags: MountFlags,
        data: String,
    },
    Bind {
        src: PathBuf,
        target: PathBuf,
    },
    Rbind {
        src: PathBuf,
        target: PathBuf,
    },
    Remount {
        target: PathBuf,
        flags: MountFlags,
    },
    Propagation {
        target: PathBuf,
        flags: MountPropagationFlags,
    },
    IdmappedMount {
        src: PathBuf,
        target: PathBuf,
    },
    Unmount {
        target: PathBuf,
        flags: UnmountFlags,
    },
    /// From here on, changes below this root follow no symlink (see [`Kernel::confine`]).
    Confine(PathBuf),
    MkdirP(PathBuf),
    CreateFile(PathBuf),
    WriteFile {
        path: PathBuf,
        content: Vec<u8>,
    },
    RemoveFile(PathBuf),
    Symlink {
        target: PathBuf,
        link: PathBuf,
    },
    Chown {
        path: PathBuf,
        uid: u32,
        gid: u32,
    },
    Chmod {
        path: PathBuf,
        mode: u32,
    },
    SetXattr {
        path: PathBuf,
        name: String,
        value: Vec<u8>,
    },
    Whiteout(PathBuf),
    ActOnFilesAsBoxRoot,
    SetHostname(String),
    LoopbackUp,
    Chdir(PathBuf),
    PivotRoot {
        new_root: PathBuf,
        put_old: PathBuf,
    },
}

impl Op {
    /// Whether the call changes the mount table (what must not happen after `pivot_root`
    /// but the detach of the old root, and what must not happen before a refusal).
    pub(crate) fn is_mount(&self) -> bool {
        matches!(
            self,
            Op::Mount { .. }
                | Op::Bind { .. }
                | Op::Rbind { .. }
                | Op::Remount { .. }
                | Op::Propagation { .. }
                | Op::IdmappedMount { .. }
                | Op::Unmount { .. }
                | Op::PivotRoot { .. }
        )
    }

    /// The path the call mounts on or changes, if any.
    pub(crate) fn target(&self) -> Option<&Path> {
        match self {
            Op::Mount { target, .. }
            | Op::Bind { target, .. }
            | Op::Rbind { target, .. }
            | Op::Remount { target, .. }
            | Op::Propagation { target, .. }
            | Op::IdmappedMount { target, .. }
            | Op::Unmount { target, .. } => Some(target),
            Op::MkdirP(p)
            | Op::CreateFile(p)
            | Op::RemoveFile(p)
            | Op::Whiteout(p)
            | Op::WriteFile { path: p, .. }
            | Op::Chown { path: p, .. }
            | Op::Chmod { path: p, .. }
            | Op::SetXattr { path: p, .. }
            | Op::Symlink { link: p, .. } => Some(p),
            Op::ActOnFilesAsBoxRoot
            | Op::Confine(_)
            | Op::SetHostname(_)
            | Op::LoopbackUp
            | Op::Chdir(_)
            | Op::PivotRoot { .. } => None,
        }
    }
}

#[derive(Debug, Clone)]
enum Content {
    Dir,
    File(Vec<u8>),
    Symlink(PathBuf),
    /// A character device (the only other kind the builder makes: whiteouts).
    Device,
}

#[derive(Debug, Clone)]
struct Node {
    content: Content,
    uid: u32,
    gid: u32,
    /// Permission bits.
    perm: u32,
    /// Extended attributes.
    xattrs: BTreeMap<String, Vec<u8>>,
    /// The file system it is on (`st_dev`): the same for all, unless a test says otherwise.
    dev: u64,
}

impl Node {
    fn new(content: Content) -> Node {
        let perm = match content {
            Content::Dir => 0o755,
            Content::Symlink(_) => 0o777,
            Content::File(_) | Content::Device => 0o644,
        };
        Node {
            content,
            uid: 0,
            gid: 0,
            perm,
            xattrs: BTreeMap::new(),
            dev: 0,
        }
    }

    fn kind(&self) -> Kind {
        match self.content {
            Content::Dir => Kind::Dir,
            Content::File(_) => Kind::File,
            Content::Symlink(_) => Kind::Symlink,
            Content::Device => Kind::Other,
        }
    }

    fn stat(&self) -> Stat {
        let format = match self.content {
            Content::Dir => libc::S_IFDIR,
            Content::File(_) => libc::S_IFREG,
            Content::Symlink(_) => libc::S_IFLNK,
            Content::Device => libc::S_IFCHR,
        };
        Stat {
            kind: self.kind(),
            uid: self.uid,
            gid: self.gid,
            mode: format | self.perm,
            dev: self.dev,
        }
    }
}

fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

/// Absolute paths, each resolved component by component as the kernel does.
#[derive(Debug, Clone)]
struct Tree(BTreeMap<PathBuf, Node>);

impl Tree {
    /// Where `path` leads: every symlink on the way followed, the last one only with
    /// `follow`. The last component need not exist; the ones before it must be directories.
    fn resolve(&self, path: &Path, follow: bool) -> io::Result<PathBuf> {
        self.walk(path, follow, &mut 0)
    }

    fn walk(&self, path: &Path, follow: bool, hops: &mut u32) -> io::Result<PathBuf> {
        let parts: Vec<Component> = path.components().collect();
        let mut at = PathBuf::from("/");
        for (i, c) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            match c {
                Component::RootDir => at = PathBuf::from("/"),
                Component::CurDir | Component::Prefix(_) => {}
                Component::ParentDir => {
                    at.pop();
                }
                Component::Normal(n) => {
                    let next = at.join(n);
                    match self.0.get(&next) {
                        Some(Node {
                            content: Content::Symlink(to),
                            ..
                        }) if follow || !last => {
                            *hops += 1;
                            if *hops > 40 {
                                return Err(errno(libc::ELOOP));
                            }
                            let to = at.join(to);
                            at = self.walk(&to, true, hops)?;
                        }
                        Some(_) => at = next,
                        None if last => at = next,
                        None => return Err(errno(libc::ENOENT)),
                    }
                }
            }
            if !last && !matches!(self.0.get(&at), Some(n) if matches!(n.content, Content::Dir)) {
                return Err(errno(libc::ENOTDIR));
            }
        }
        Ok(at)
    }

    fn node(&self, path: &Path, follow: bool) -> io::Result<&Node> {
        let at = self.resolve(path, follow)?;
        self.0.get(&at).ok_or_else(|| errno(libc::ENOENT))
    }

    fn node_mut(&mut self, path: &Path) -> io::Result<&mut Node> {
        let at = self.resolve(path, true)?;
        self.0.get_mut(&at).ok_or_else(|| errno(libc::ENOENT))
    }

    /// A new name for `path` (its last symlink not followed): where it would be made.
    fn free(&self, path: &Path) -> io::Result<PathBuf> {
        let at = self.resolve(path, false)?;
        if self.0.contains_key(&at) {
            return Err(errno(libc::EEXIST));
        }
        Ok(at)
    }

    fn mkdir_p(&mut self, path: &Path) -> io::Result<()> {
        let mut prefix = PathBuf::new();
        for c in path.components() {
            prefix.push(c);
            match self.node(&prefix, true) {
                Ok(n) if matches!(n.content, Content::Dir) => {}
                Ok(_) => return Err(errno(libc::EEXIST)),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    let at = self.resolve(&prefix, true)?;
                    self.0.insert(at, Node::new(Content::Dir));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Write a regular file (made, or truncated and rewritten), as `open(O_CREAT)` would.
    fn put_file(&mut self, path: &Path, content: &[u8]) -> io::Result<()> {
        let at = self.resolve(path, true)?;
        match self.0.get_mut(&at) {
            Some(Node {
                content: Content::Dir,
                ..
            }) => Err(errno(libc::EISDIR)),
            Some(n) => {
                n.content = Content::File(content.to_vec());
                Ok(())
            }
            None => {
                self.0
                    .insert(at, Node::new(Content::File(content.to_vec())));
                Ok(())
            }
        }
    }

    /// Whether a change at `path`, below the confined `root`, would follow a symlink: a
    /// component below `root` that is one (the last one too unless `own_name`: the call acts
    /// on the name itself), or one that is not a plain name.
    fn follows_symlink(&self, root: &Path, path: &Path, own_name: bool) -> bool {
        let Ok(rel) = path.strip_prefix(root) else {
            return false;
        };
        let mut at = self.resolve(root, true).unwrap_or_else(|_| root.to_owned());
        let n = rel.components().count();
        rel.components().enumerate().any(|(i, c)| {
            at.push(c);
            !matches!(c, Component::Normal(_))
                || (!(own_name && i + 1 == n)
                    && matches!(
                        self.0.get(&at),
                        Some(Node {
                            content: Content::Symlink(_),
                            ..
                        })
                    ))
        })
    }

    /// What a bind of `src` on `target` needs: both there, and of matching kinds.
    fn bindable(&self, src: &Path, target: &Path) -> io::Result<()> {
        let (s, t) = (
            self.node(src, true)?.kind(),
            self.node(target, true)?.kind(),
        );
        if (s == Kind::Dir) != (t == Kind::Dir) {
            return Err(errno(libc::ENOTDIR));
        }
        Ok(())
    }
}

/// See the module's doc.
pub(crate) struct Recording {
    ops: Vec<Op>,
    /// Indexes into `ops` of the calls that failed.
    refused: Vec<usize>,
    tree: Tree,
    refuse: Vec<Refusal>,
    /// The roots given to [`Kernel::confine`].
    confined: Vec<PathBuf>,
}

/// Which calls a test makes fail.
type Refusal = Box<dyn Fn(&Op) -> bool>;

impl Recording {
    /// A machine whose file system is only `/`.
    pub(crate) fn new() -> Recording {
        let mut tree = BTreeMap::new();
        tree.insert(PathBuf::from("/"), Node::new(Content::Dir));
        Recording {
            ops: Vec::new(),
            refused: Vec::new(),
            tree: Tree(tree),
            refuse: Vec::new(),
            confined: Vec::new(),
        }
    }

    /// Pretend directory `path` (and the ones above it) exists.
    pub(crate) fn dir(self, path: &str) -> Recording {
        self.dir_owned(path, 0, 0, 0o755)
    }

    /// Pretend directory `path` exists with this owner and permission bits.
    pub(crate) fn dir_owned(mut self, path: &str, uid: u32, gid: u32, perm: u32) -> Recording {
        self.tree
            .mkdir_p(Path::new(path))
            .expect("a test's directory fits its tree");
        let n = self
            .tree
            .node_mut(Path::new(path))
            .expect("the directory was just made");
        (n.uid, n.gid, n.perm) = (uid, gid, perm);
        self
    }

    /// Pretend regular file `path` exists with `content` (its directory too).
    pub(crate) fn file(mut self, path: &str, content: &str) -> Recording {
        let path = Path::new(path);
        if let Some(parent) = path.parent() {
            self.tree
                .mkdir_p(parent)
                .expect("a test's directory fits its tree");
        }
        self.tree
            .put_file(path, content.as_bytes())
            .expect("a test's file fits its tree");
        self
    }

    /// Pretend symlink `link` exists, pointing to `target` (its directory too).
    pub(crate) fn symlink(mut self, link: &str, target: &str) -> Recording {
        let link = Path::new(link);
        if let Some(parent) = link.parent() {
            self.tree
                .mkdir_p(parent)
                .expect("a test's directory fits its tree");
        }
        let at = self
            .tree
            .free(link)
            .expect("a test's symlink has a free name");
        self.tree
            .0
            .insert(at, Node::new(Content::Symlink(target.into())));
        self
    }

    /// Make every call for which `refuse` holds fail (`EPERM`).
    /// An extended attribute on an existing path (an overlay marker in a box's layer).
    pub(crate) fn xattr(mut self, path: &str, name: &str, value: &str) -> Recording {
        self.tree
            .node_mut(Path::new(path))
            .expect("a test's xattr is on an existing path")
            .xattrs
            .insert(name.to_owned(), value.as_bytes().to_vec());
        self
    }

    /// `path` (existing) on a file system of its own (`st_dev` `dev`), as a separate `/home`
    /// partition is.
    pub(crate) fn on_dev(mut self, path: &str, dev: u64) -> Recording {
        self.tree
            .node_mut(Path::new(path))
            .expect("a test's mount point exists")
            .dev = dev;
        self
    }

    /// A whiteout (a character device) at `path`, as a box's layer holds for what it
    /// deleted.
    pub(crate) fn whiteout_at(mut self, path: &str) -> Recording {
        if let Some(parent) = Path::new(path).parent() {
            self.tree
                .mkdir_p(parent)
                .expect("a test's directory fits its tree");
        }
        let at = self
            .tree
            .free(Path::new(path))
            .expect("a test's whiteout has a free name");
        self.tree.0.insert(at, Node::new(Content::Device));
        self
    }

    pub(crate) fn refusing(mut self, refuse: impl Fn(&Op) -> bool + 'static) -> Recording {
        self.refuse.push(Box::new(refuse));
        self
    }

    /// Every call made, in order.
    pub(crate) fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// The calls that failed.
    pub(crate) fn refused(&self) -> Vec<&Op> {
        self.refused.iter().map(|&i| &self.ops[i]).collect()
    }

    /// What regular file `path` holds now, if it is one.
    pub(crate) fn content(&self, path: &str) -> Option<&[u8]> {
        match &self.tree.node(Path::new(path), true).ok()?.content {
            Content::File(c) => Some(c),
            _ => None,
        }
    }

    /// The kind of what is at `path` now (symlinks not followed).
    pub(crate) fn kind(&self, path: &str) -> Option<Kind> {
        self.tree.node(Path::new(path), false).ok().map(Node::kind)
    }

    fn effect(
        &mut self,
        op: Op,
        apply: impl FnOnce(&mut Tree) -> io::Result<()>,
    ) -> io::Result<()> {
        let refused = self.refuse.iter().any(|r| r(&op));
        // As `openat2(RESOLVE_NO_SYMLINKS)` does for the real kernel.
        let own_name = matches!(op, Op::RemoveFile(_) | Op::Symlink { .. } | Op::Whiteout(_));
        let src = match &op {
            Op::Bind { src, .. } | Op::Rbind { src, .. } | Op::IdmappedMount { src, .. } => {
                Some(src.as_path())
            }
            _ => None,
        };
        let loops = self.confined.iter().any(|root| {
            op.target()
                .is_some_and(|t| self.tree.follows_symlink(root, t, own_name))
                || src.is_some_and(|s| self.tree.follows_symlink(root, s, false))
        });
        self.ops.push(op);
        let result = if loops {
            Err(errno(libc::ELOOP))
        } else if refused {
            Err(errno(libc::EPERM))
        } else {
            apply(&mut self.tree)
        };
        if result.is_err() {
            self.refused.push(self.ops.len() - 1);
        }
        result
    }
}

impl Kernel for Recording {
    fn stat(&self, path: &Path) -> io::Result<Stat> {
        self.tree.node(path, true).map(Node::stat)
    }

    fn lstat(&self, path: &Path) -> io::Result<Stat> {
        self.tree.node(path, false).map(Node::stat)
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        match &self.tree.node(path, false)?.content {
            Content::Symlink(to) => Ok(to.clone()),
            _ => Err(errno(libc::EINVAL)),
        }
    }

    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        match &self.tree.node(path, true)?.content {
            Content::File(c) => Ok(c.clone()),
            Content::Dir => Err(errno(libc::EISDIR)),
            _ => Err(errno(libc::EINVAL)),
        }
    }

    fn get_xattr(&self, path: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
        Ok(self.tree.node(path, false)?.xattrs.get(name).cloned())
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<Entry>> {
        let dir = self.tree.resolve(path, true)?;
        match self.tree.0.get(&dir) {
            Some(Node {
                content: Content::Dir,
                ..
            }) => {}
            Some(_) => return Err(errno(libc::ENOTDIR)),
            None => return Err(errno(libc::ENOENT)),
        }
        Ok(self
            .tree
            .0
            .iter()
            .filter(|(p, _)| p.parent() == Some(dir.as_path()))
            .filter_map(|(p, n)| {
                Some(Entry {
                    name: p.file_name()?.to_owned(),
                    kind: n.kind(),
                })
            })
            .collect())
    }

    fn mount(
        &mut self,
        src: &str,
        target: &Path,
        fstype: &str,
        flags: MountFlags,
        data: &CStr,
    ) -> io::Result<()> {
        let op = Op::Mount {
            src: src.to_owned(),
            target: target.to_owned(),
            fstype: fstype.to_owned(),
            flags,
            data: data.to_string_lossy().into_owned(),
        };
        self.effect(op, |t| t.node(target, true).map(drop))
    }

    fn bind(&mut self, src: &Path, target: &Path) -> io::Result<()> {
        let op = Op::Bind {
            src: src.to_owned(),
            target: target.to_owned(),
        };
        self.effect(op, |t| t.bindable(src, target))
    }

    fn rbind(&mut self, src: &Path, target: &Path) -> io::Result<()> {
        let op = Op::Rbind {
            src: src.to_owned(),
            target: target.to_owned(),
        };
        self.effect(op, |t| t.bindable(src, target))
    }

    fn remount(&mut self, target: &Path, flags: MountFlags) -> io::Result<()> {
        let op = Op::Remount {
            target: target.to_owned(),
            flags,
        };
        self.effect(op, |t| t.node(target, true).map(drop))
    }

    fn set_propagation(&mut self, target: &Path, flags: MountPropagationFlags) -> io::Result<()> {
        let op = Op::Propagation {
            target: target.to_owned(),
            flags,
        };
        self.effect(op, |t| t.node(target, true).map(drop))
    }

    fn idmapped_mount(&mut self, _ns: &BoxUserNs, src: &Path, target: &Path) -> Result<(), String> {
        let op = Op::IdmappedMount {
            src: src.to_owned(),
            target: target.to_owned(),
        };
        self.effect(op, |t| t.bindable(src, target))
            .map_err(|e| format!("idmapping {}: {e}", src.display()))
    }

    fn unmount(&mut self, target: &Path, flags: UnmountFlags) -> io::Result<()> {
        let op = Op::Unmount {
            target: target.to_owned(),
            flags,
        };
        self.effect(op, |_| Ok(()))
    }

    fn confine(&mut self, root: &Path) {
        self.confined.push(root.to_owned());
        self.ops.push(Op::Confine(root.to_owned()));
    }

    fn mkdir_p(&mut self, path: &Path) -> io::Result<()> {
        self.effect(Op::MkdirP(path.to_owned()), |t| t.mkdir_p(path))
    }

    fn create_file(&mut self, path: &Path) -> io::Result<()> {
        self.effect(Op::CreateFile(path.to_owned()), |t| t.put_file(path, b""))
    }

    fn write_file(&mut self, path: &Path, content: &[u8]) -> io::Result<()> {
        let op = Op::WriteFile {
            path: path.to_owned(),
            content: content.to_vec(),
        };
        self.effect(op, |t| t.put_file(path, content))
    }

    fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        self.effect(Op::RemoveFile(path.to_owned()), |t| {
            let at = t.resolve(path, false)?;
            match t.0.get(&at) {
                None => Err(errno(libc::ENOENT)),
                Some(Node {
                    content: Content::Dir,
                    ..
                }) => Err(errno(libc::EISDIR)),
                Some(_) => {
                    t.0.remove(&at);
                    Ok(())
                }
            }
        })
    }

    fn symlink(&mut self, target: &Path, link: &Path) -> io::Result<()> {
        let op = Op::Symlink {
            target: target.to_owned(),
            link: link.to_owned(),
        };
        self.effect(op, |t| {
            let at = t.free(link)?;
            t.0.insert(at, Node::new(Content::Symlink(target.to_owned())));
            Ok(())
        })
    }

    fn chown(&mut self, path: &Path, uid: u32, gid: u32) -> io::Result<()> {
        let op = Op::Chown {
            path: path.to_owned(),
            uid,
            gid,
        };
        self.effect(op, |t| {
            let n = t.node_mut(path)?;
            (n.uid, n.gid) = (uid, gid);
            Ok(())
        })
    }

    fn chmod(&mut self, path: &Path, mode: u32) -> io::Result<()> {
        let op = Op::Chmod {
            path: path.to_owned(),
            mode,
        };
        self.effect(op, |t| {
            t.node_mut(path)?.perm = mode;
            Ok(())
        })
    }

    fn set_xattr(&mut self, path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
        let op = Op::SetXattr {
            path: path.to_owned(),
            name: name.to_owned(),
            value: value.to_vec(),
        };
        self.effect(op, |t| {
            t.node_mut(path)?
                .xattrs
                .insert(name.to_owned(), value.to_vec());
            Ok(())
        })
    }

    fn whiteout(&mut self, path: &Path) -> io::Result<()> {
        self.effect(Op::Whiteout(path.to_owned()), |t| {
            let at = t.free(path)?;
            t.0.insert(at, Node::new(Content::Device));
            Ok(())
        })
    }

    fn act_on_files_as_box_root(&mut self, _ns: &BoxUserNs) -> Result<(), String> {
        self.effect(Op::ActOnFilesAsBoxRoot, |_| Ok(()))
            .map_err(|e| format!("acting as box root: {e}"))
    }

    fn set_hostname(&mut self, name: &str) -> io::Result<()> {
        self.effect(Op::SetHostname(name.to_owned()), |_| Ok(()))
    }

    fn loopback_up(&mut self) -> Result<(), String> {
        self.effect(Op::LoopbackUp, |_| Ok(()))
            .map_err(|e| format!("bringing up the loopback interface: {e}"))
    }

    fn chdir(&mut self, dir: &Path) -> io::Result<()> {
        self.effect(Op::Chdir(dir.to_owned()), |_| Ok(()))
    }

    fn pivot_root(&mut self, new_root: &Path, put_old: &Path) -> io::Result<()> {
        let op = Op::PivotRoot {
            new_root: new_root.to_owned(),
            put_old: put_old.to_owned(),
        };
        self.effect(op, |_| Ok(()))
    }
}
