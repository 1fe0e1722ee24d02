//! Letting go of a descriptor whose last close is slow, without waiting for it.
//!
//! The last reference to a detached mount (see `open_tree(OPEN_TREE_CLONE)`) tears its
//! superblock down when it is closed: an overlay then syncs its upper filesystem and frees
//! every dentry and inode it cached, 10 ms and more for a tree of tens of thousands of
//! files that someone walked. Nothing the caller does next depends on that teardown, so a
//! detached grandchild process does it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Close `fd` in a detached grandchild, after this process has closed its own copy (so
/// the grandchild's close is the last one and pays for the teardown).
///
/// The grandchild keeps no other descriptor of this process (no lock, no pipe a reader
/// waits on), leaves the session, and is reparented to init (or the nearest subreaper),
/// which reaps it: a long-lived caller collects no zombies. When `fork` fails the
/// descriptor is closed here, synchronously; the result is the same, only slower.
pub fn close_in_background(fd: OwnedFd) -> io::Result<()> {
    let (go_r, go_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    // SAFETY: between `fork` and `_exit` the children make only async-signal-safe system
    // calls (fork, setsid, close_range, read, close, _exit) on descriptors they own, so the
    // state other threads of this process had at the fork cannot be observed.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see above.
        unsafe {
            if libc::fork() == 0 {
                libc::setsid();
                keep_only(fd.as_raw_fd(), go_r.as_raw_fd());
                let mut b = 0u8;
                // Returns at end of file: once the parent (the only other holder of the
                // write end, the intermediate child having exited) has closed `fd` too.
                libc::read(go_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
                libc::close(fd.as_raw_fd());
                libc::_exit(0);
            }
            libc::_exit(0);
        }
    }
    drop(fd);
    drop((go_r, go_w));
    // The intermediate child exits at once; reaping it keeps the grandchild an orphan.
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
    }
    Ok(())
}

/// Close every descriptor but `a` and `b` (no allocation: `close_range` calls only).
///
/// # Safety
/// Only for a freshly forked child that owns its descriptor table.
unsafe fn keep_only(a: RawFd, b: RawFd) {
    let (lo, hi) = (a.min(b) as libc::c_uint, a.max(b) as libc::c_uint);
    let close_range = |first: libc::c_uint, last: libc::c_uint| {
        if first <= last {
            // SAFETY: closes descriptors of this child only; errors leave them open,
            // which costs nothing but the teardown's delay to their readers.
            unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) };
        }
    };
    if lo > 0 {
        close_range(0, lo - 1);
    }
    close_range(lo + 1, hi.saturating_sub(1));
    close_range(hi + 1, libc::c_uint::MAX);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn the_descriptor_is_closed_by_someone_else_soon_after() {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
        close_in_background(w).expect("fork");
        // End of file only once every copy of the write end is closed: ours went in the
        // call, the grandchild's right after (a copy kept forever would hang here).
        let mut reader = std::fs::File::from(r);
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).expect("read to the end");
        assert!(
            rest.is_empty(),
            "nothing was written through the descriptor"
        );
    }
}
