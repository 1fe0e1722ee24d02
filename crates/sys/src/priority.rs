//! Lowering the calling thread's CPU and I/O priority, for background work that must not
//! slow what the user waits for.

use std::io;

/// `IOPRIO_CLASS_IDLE` (`linux/ioprio.h`): I/O only when no other process wants the disk.
const IOPRIO_CLASS_IDLE: libc::c_long = 3;
/// `IOPRIO_CLASS_SHIFT`.
const IOPRIO_CLASS_SHIFT: libc::c_long = 13;
/// `IOPRIO_WHO_PROCESS`: with id 0, the calling thread.
const IOPRIO_WHO_PROCESS: libc::c_long = 1;

/// Give the calling thread (only it) the lowest CPU priority (nice 19) and the idle I/O
/// class. Either may fail (a seccomp filter, an old kernel): the first error is returned
/// after both were tried.
pub fn lower_this_thread() -> io::Result<()> {
    // SAFETY: `gettid` takes no argument and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    let tid = libc::id_t::try_from(tid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: `setpriority` only reads its integer arguments; on Linux a thread id names
    // that one thread.
    let nice = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 19) };
    let nice = if nice == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    };
    // SAFETY: `ioprio_set` only reads its integer arguments (who 0: the calling thread).
    let io = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0 as libc::c_long,
            IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
        )
    };
    let io = if io == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    };
    nice.and(io)
}
