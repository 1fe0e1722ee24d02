//! Writing a file's data out to the device without a cache flush per file.
//!
//! A commit makes many small files durable at once. `fsync` per file costs one device cache
//! flush each; `syncfs` writes out every dirty page of the filesystem, including other
//! programs' unrelated writes. Instead: [`start`] the writeback of each file, [`wait`] for
//! each, then one `fsync` of the metadata that names them flushes the device cache once.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

fn sync_file_range(file: impl AsFd, flags: libc::c_uint) -> io::Result<()> {
    let fd = file.as_fd().as_raw_fd();
    // SAFETY: `sync_file_range` only reads its integer arguments; `fd` is borrowed from a
    // live descriptor for the duration of the call. Offset 0 with length 0 means "to the end".
    let r = unsafe { libc::sync_file_range(fd, 0, 0, flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Start writing out the file's dirty pages; does not wait.
pub fn start(file: impl AsFd) -> io::Result<()> {
    sync_file_range(file, libc::SYNC_FILE_RANGE_WRITE)
}

/// Write out the file's dirty pages and wait until they reached the device (its volatile
/// cache included only after a later flush, e.g. the journal commit of an `fsync`).
pub fn wait(file: impl AsFd) -> io::Result<()> {
    sync_file_range(
        file,
        libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER,
    )
}
