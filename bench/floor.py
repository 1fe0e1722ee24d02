#!/usr/bin/env python3
"""Floors of a commit, measured inside one process (no interpreter start-up in the figure).

  floor.py snapshot SRC DST     btrfs: one read-only snapshot ioctl of subvolume SRC at DST
                                (BTRFS_IOC_SNAP_CREATE_V2; creating a snapshot commits the
                                transaction, so it is durable when the ioctl returns)
  floor.py copy SRC LIST DST    layers: copy exactly the files named in LIST (paths relative
                                to SRC, one a line) to the same paths under DST (parents
                                created), then one syncfs of DST's filesystem: the changed
                                bytes written plus one journal commit

Prints the elapsed milliseconds of that work alone.
"""
import ctypes
import fcntl
import os
import struct
import sys
import time

BTRFS_IOC_SNAP_CREATE_V2 = 0x50009417  # _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2)
BTRFS_SUBVOL_RDONLY = 1 << 1


def snapshot(src, dst):
    parent, name = os.path.split(os.path.abspath(dst))
    s = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
    d = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    # struct btrfs_ioctl_vol_args_v2: s64 fd, u64 transid, u64 flags, u64 unused[4], name[4040]
    args = bytearray(struct.pack("=qQQ32x", s, 0, BTRFS_SUBVOL_RDONLY) + name.encode().ljust(4040, b"\0"))
    t0 = time.perf_counter()
    fcntl.ioctl(d, BTRFS_IOC_SNAP_CREATE_V2, args)
    return (time.perf_counter() - t0) * 1000


def copy(src, listing, dst):
    rels = [l.rstrip("\n") for l in open(listing) if l.strip()]
    libc = ctypes.CDLL(None, use_errno=True)
    t0 = time.perf_counter()
    for rel in rels:
        out = os.path.join(dst, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(os.path.join(src, rel), "rb") as f, open(out, "wb") as g:
            g.write(f.read())
    fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY)
    if libc.syncfs(fd) != 0:
        raise OSError(ctypes.get_errno(), "syncfs")
    return (time.perf_counter() - t0) * 1000


if __name__ == "__main__":
    what, *args = sys.argv[1:]
    ms = snapshot(*args) if what == "snapshot" else copy(*args)
    print(f"{ms:.3f}")
