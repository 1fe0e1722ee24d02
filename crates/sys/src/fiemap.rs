//! File extent maps (`FS_IOC_FIEMAP`) and the true disk usage of trees built on them.
//!
//! [`disk_usage`] counts every physical byte once, however many files, reflink copies or
//! btrfs snapshots reference it: the figure `du` cannot give once data is shared.

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use rustix::ioctl::{opcode, Opcode};

use crate::raw::ioctl_ptr;

/// `FIEMAP_FLAG_SYNC`: flush the file's dirty data before mapping it.
pub const FIEMAP_FLAG_SYNC: u32 = 0x1;

/// Last extent of the file.
pub const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// Data location unknown.
pub const FIEMAP_EXTENT_UNKNOWN: u32 = 0x2;
/// Location still pending (delayed allocation); implies `UNKNOWN`.
pub const FIEMAP_EXTENT_DELALLOC: u32 = 0x4;
/// Data is compressed or otherwise encoded.
pub const FIEMAP_EXTENT_ENCODED: u32 = 0x8;
/// Data is encrypted.
pub const FIEMAP_EXTENT_DATA_ENCRYPTED: u32 = 0x80;
/// Extent offsets may not be block aligned.
pub const FIEMAP_EXTENT_NOT_ALIGNED: u32 = 0x100;
/// Data is stored inline with the metadata; implies `NOT_ALIGNED`.
pub const FIEMAP_EXTENT_DATA_INLINE: u32 = 0x200;
/// Data is packed into a block with other files' tails.
pub const FIEMAP_EXTENT_DATA_TAIL: u32 = 0x400;
/// Space allocated but not written (reads as zeros).
pub const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;
/// File does not natively support extents; the result is merged blocks.
pub const FIEMAP_EXTENT_MERGED: u32 = 0x1000;
/// The extent is shared with other files (reflinks, snapshots).
pub const FIEMAP_EXTENT_SHARED: u32 = 0x2000;

/// `struct fiemap` (header; the extents array follows it).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapHeader {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
}

/// `struct fiemap_extent`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapExtent {
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

const BATCH: usize = 256;

/// A `struct fiemap` followed by room for `BATCH` extents, as the kernel expects.
#[repr(C)]
struct FiemapBuf {
    header: FiemapHeader,
    extents: [FiemapExtent; BATCH],
}

const _: () = assert!(std::mem::size_of::<FiemapHeader>() == 32);
const _: () = assert!(std::mem::size_of::<FiemapExtent>() == 56);

/// `FS_IOC_FIEMAP` = `_IOWR('f', 11, struct fiemap)`: the size is the header's only.
const FS_IOC_FIEMAP: Opcode = opcode::read_write::<FiemapHeader>(b'f', 11);

/// One extent of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Offset in the file.
    pub logical: u64,
    /// Offset on the device (in btrfs: in the filesystem's logical address space, common to
    /// all its subvolumes). Meaningless with `UNKNOWN`/`DATA_INLINE`.
    pub physical: u64,
    pub length: u64,
    /// `FIEMAP_EXTENT_*` flags.
    pub flags: u32,
}

impl Extent {
    /// Whether `physical` identifies the extent's bytes on disk, so the extent can be
    /// recognised when another file shares it.
    pub fn has_location(&self) -> bool {
        self.flags
            & (FIEMAP_EXTENT_UNKNOWN
                | FIEMAP_EXTENT_DELALLOC
                | FIEMAP_EXTENT_DATA_INLINE
                | FIEMAP_EXTENT_NOT_ALIGNED
                | FIEMAP_EXTENT_DATA_TAIL)
            == 0
    }
}

/// Write out `file`'s dirty data and wait until its extents are recorded in the running
/// transaction, without flushing the device's cache: a `FIEMAP_FLAG_SYNC` request for no
/// extents. On btrfs this waits for the file's ordered extents to complete (since Linux
/// 6.1), which writing out the pages alone (`sync_file_range`) does not: only then does a
/// transaction that commits later hold the file's data and size.
pub fn settle(file: &File) -> io::Result<()> {
    let mut header = FiemapHeader {
        fm_start: 0,
        fm_length: u64::MAX,
        fm_flags: FIEMAP_FLAG_SYNC,
        fm_mapped_extents: 0,
        fm_extent_count: 0,
        fm_reserved: 0,
    };
    // SAFETY: `header` is a `struct fiemap` with `fm_extent_count` = 0, so the kernel
    // writes no extents after it, only the header's `fm_mapped_extents`.
    unsafe { ioctl_ptr(file, FS_IOC_FIEMAP, &mut header) }?;
    Ok(())
}

/// Every extent of `file`, in file order. The file's dirty data is flushed first
/// (`FIEMAP_FLAG_SYNC`), so delayed allocations get their location.
pub fn extents(file: &File) -> io::Result<Vec<Extent>> {
    let mut out = Vec::new();
    let mut start = 0u64;
    loop {
        let mut buf = Box::new(FiemapBuf {
            header: FiemapHeader {
                fm_start: start,
                fm_length: u64::MAX - start,
                fm_flags: FIEMAP_FLAG_SYNC,
                fm_mapped_extents: 0,
                fm_extent_count: BATCH as u32,
                fm_reserved: 0,
            },
            extents: [FiemapExtent::default(); BATCH],
        });
        // SAFETY: `FiemapBuf` is a `struct fiemap` followed by `fm_extent_count` (= BATCH)
        // `struct fiemap_extent`s, all `#[repr(C)]` with the kernel's layout (sizes checked
        // above); the kernel writes at most `fm_extent_count` extents.
        unsafe { ioctl_ptr(file, FS_IOC_FIEMAP, &mut *buf) }?;
        let mapped = (buf.header.fm_mapped_extents as usize).min(BATCH);
        if mapped == 0 {
            return Ok(out);
        }
        let mut last = false;
        for fe in &buf.extents[..mapped] {
            out.push(Extent {
                logical: fe.fe_logical,
                physical: fe.fe_physical,
                length: fe.fe_length,
                flags: fe.fe_flags,
            });
            last |= fe.fe_flags & FIEMAP_EXTENT_LAST != 0;
        }
        let tail = &buf.extents[mapped - 1];
        let next = tail.fe_logical.saturating_add(tail.fe_length);
        if last || next <= start || next == u64::MAX {
            return Ok(out);
        }
        start = next;
    }
}

/// What a set of trees occupies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Sum of the apparent sizes (`st_size`) of the distinct regular files.
    pub logical_bytes: u64,
    /// Bytes actually allocated, every shared extent counted once: distinct data extents
    /// of regular files, plus inline/unlocated file data at its length per file, plus
    /// directories, symlinks and other inodes at `st_blocks * 512`.
    pub physical_bytes: u64,
    /// Distinct inodes (of every type) counted.
    pub files: u64,
}

/// Which filesystem a physical address belongs to. btrfs gives every subvolume its own
/// `st_dev`, but addresses are common to the whole filesystem, so btrfs is keyed by its UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum FsKey {
    Dev(u64),
    Btrfs([u8; 16]),
}

/// The true disk usage of the trees at `paths`: each inode counted once (by device and
/// inode number; hard links too), each physical extent counted once across everything
/// walked (snapshots and reflink copies share extents). Symlinks are not followed.
///
/// Files whose extents cannot be read (no FIEMAP support, permission denied) count at
/// `st_blocks * 512`; a directory that cannot be listed (permission denied: an overlay's
/// mode-000 work directory, for a normal user) counts as itself, without its entries. On
/// compressed btrfs data, extents count at their uncompressed length.
pub fn disk_usage(paths: &[&Path]) -> io::Result<Usage> {
    let mut usage = Usage::default();
    let mut inodes: HashSet<(u64, u64)> = HashSet::new();
    let mut fs_keys: HashMap<u64, FsKey> = HashMap::new();
    let mut ranges: HashMap<FsKey, Vec<(u64, u64)>> = HashMap::new();
    let mut located: HashSet<(FsKey, u64, i64, i64, u64)> = HashSet::new();
    for root in paths {
        for entry in walkdir::WalkDir::new(root).follow_links(false) {
            // The directory itself was counted when it was reached; its entries are out of
            // reach.
            if let Err(e) = &entry {
                if e.depth() > 0
                    && e.io_error().map(io::Error::kind) == Some(io::ErrorKind::PermissionDenied)
                {
                    continue;
                }
            }
            let entry = entry.map_err(|e| {
                let path = e
                    .path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                let kind = e.io_error().map_or(io::ErrorKind::Other, io::Error::kind);
                io::Error::new(kind, format!("{path}: {e}"))
            })?;
            let path = entry.path();
            let md = entry.metadata().map_err(|e| {
                let kind = e.io_error().map_or(io::ErrorKind::Other, io::Error::kind);
                io::Error::new(kind, format!("{}: {e}", path.display()))
            })?;
            if !inodes.insert((md.dev(), md.ino())) {
                continue;
            }
            usage.files += 1;
            let blocks_bytes = md.blocks().saturating_mul(512);
            if !md.file_type().is_file() {
                usage.physical_bytes += blocks_bytes;
                continue;
            }
            usage.logical_bytes += md.size();
            let file = match std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(path)
            {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    usage.physical_bytes += blocks_bytes;
                    continue;
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{}: open: {e}", path.display()),
                    ))
                }
            };
            let exts = match extents(&file) {
                Ok(x) => x,
                Err(e)
                    if e.raw_os_error() == Some(rustix::io::Errno::OPNOTSUPP.raw_os_error())
                        || e.raw_os_error() == Some(rustix::io::Errno::NOTTY.raw_os_error()) =>
                {
                    usage.physical_bytes += blocks_bytes;
                    continue;
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{}: FIEMAP: {e}", path.display()),
                    ))
                }
            };
            let key = match fs_keys.entry(md.dev()) {
                MapEntry::Occupied(o) => *o.get(),
                MapEntry::Vacant(v) => {
                    let key = if crate::btrfs::fd_is_btrfs(&file).unwrap_or(false) {
                        match crate::btrfs::filesystem_uuid(&file) {
                            Ok(uuid) => FsKey::Btrfs(uuid),
                            Err(_) => FsKey::Dev(md.dev()),
                        }
                    } else {
                        FsKey::Dev(md.dev())
                    };
                    *v.insert(key)
                }
            };
            let list = ranges.entry(key).or_default();
            for ext in exts {
                if ext.has_location() {
                    list.push((ext.physical, ext.physical.saturating_add(ext.length)));
                } else if located.insert((key, md.ino(), md.ctime(), md.ctime_nsec(), ext.logical))
                {
                    // Data without a disk location (inline in btrfs metadata) has no
                    // physical address to deduplicate by. A btrfs snapshot keeps an unchanged
                    // file's inode number and ctime, and then shares its metadata (and so its
                    // inline data): count such data once per file version.
                    usage.physical_bytes += ext.length;
                }
            }
        }
    }
    for list in ranges.values_mut() {
        usage.physical_bytes += union_length(list);
    }
    Ok(usage)
}

/// Total length covered by the half-open ranges `[start, end)`, overlaps counted once.
fn union_length(ranges: &mut [(u64, u64)]) -> u64 {
    ranges.sort_unstable();
    let mut total = 0u64;
    let mut current: Option<(u64, u64)> = None;
    for &(start, end) in ranges.iter() {
        match current {
            Some((cs, ce)) if start <= ce => current = Some((cs, ce.max(end))),
            Some((cs, ce)) => {
                total += ce - cs;
                current = Some((start, end));
            }
            None => current = Some((start, end)),
        }
    }
    if let Some((cs, ce)) = current {
        total += ce - cs;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcode_matches_linux_headers() {
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        assert_eq!(FS_IOC_FIEMAP as u64, 0xc020_660b);
    }

    #[test]
    fn union_counts_overlaps_once() {
        let mut r = vec![(0, 10), (5, 15), (20, 30), (20, 30), (30, 31)];
        assert_eq!(union_length(&mut r), 26);
        assert_eq!(union_length(&mut []), 0);
    }
}
