//! Writing a filesystem's dirty data out in the background while a long write goes on.
//!
//! An import writes hundreds of MiB of small files and must then make them durable. Left to
//! the kernel, nothing reaches the device until the final `syncfs` (the dirty limits of a
//! machine with several GiB of memory are far above one tree), so that flush waits for every
//! byte at once, after the unpacking. A [`Flusher`] runs `syncfs` over and over on a thread of
//! its own while the unpacking goes on: the device works while the CPU decompresses, and the
//! final flush finds little left to write.
//!
//! Not on btrfs: there every `syncfs` is a transaction commit, which holds the writer up
//! more than the overlap gains (an import of the 32k-file reference tree on a btrfs loop
//! took 3.45–3.93 s with one, 3.33–3.45 s without), and its final flush was short anyway
//! (0.3–0.45 s of those).
//!
//! Other programs' dirty data on that filesystem is written out with it, as by any
//! `syncfs`: only sooner than the kernel would have.
//!
//! Only a way to start writes early: the caller's own final flush is still what makes the
//! data durable and reports any write error, so the background calls' errors are ignored.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Pause between two background flushes: long enough that the flushes do not take turns
/// with the writer for the journal, short enough that little piles up between them.
const PAUSE: Duration = Duration::from_millis(50);

/// A thread writing the filesystem of a directory out until dropped.
pub struct Flusher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    /// Start flushing the filesystem that holds `dir`. `None` on btrfs, and when the
    /// directory cannot be opened or no thread can be started (the write is then only
    /// slower).
    pub fn start(dir: &Path) -> Option<Flusher> {
        if agentbox_sys::btrfs::is_btrfs(dir).unwrap_or(false) {
            return None;
        }
        let fd: OwnedFd = std::fs::File::open(dir).ok()?.into();
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("flusher".into())
            .spawn(move || {
                let (lock, cv) = &*flag;
                loop {
                    let _ = rustix::fs::syncfs(&fd);
                    let guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
                    let (stopped, _) = cv
                        .wait_timeout_while(guard, PAUSE, |stopped| !*stopped)
                        .unwrap_or_else(PoisonError::into_inner);
                    if *stopped {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Flusher {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Flusher {
    /// Stops the thread and waits for it (at most for the flush it is in).
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(PoisonError::into_inner) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentbox_testkit::loopfs::LoopFs;
    use std::time::Instant;

    /// Sectors the kernel has written to block device `dev` (`/dev/loopN`) so far.
    fn sectors_written(dev: &str) -> u64 {
        let name = dev.trim_start_matches("/dev/");
        let stat = fs_err::read_to_string(format!("/sys/block/{name}/stat")).expect("block stat");
        stat.split_whitespace()
            .nth(6)
            .and_then(|f| f.parse().ok())
            .expect("field 7 of a block device's stat is the sectors written")
    }

    #[test]
    fn writes_dirty_data_out_before_anyone_flushes() {
        // Tier 2: a filesystem of its own, so that the device's counters are this test's.
        let Some(fs) = LoopFs::ext4(256 << 20) else {
            return;
        };
        let len: u64 = 32 << 20;
        fs_err::write(fs.path().join("f"), vec![7u8; len as usize]).expect("write");
        let before = sectors_written(fs.device());
        // The kernel alone would not write this out for 30 s (`dirty_expire_centisecs`), far
        // below its background threshold as it is; the flusher writes it at once.
        let flusher = Flusher::start(fs.path()).expect("a flusher starts on a directory");
        let deadline = Instant::now() + Duration::from_secs(10);
        while sectors_written(fs.device()) - before < len / 512 {
            assert!(
                Instant::now() < deadline,
                "the flusher wrote {} of {len} dirty bytes out in 10 s",
                (sectors_written(fs.device()) - before) * 512
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(flusher);
        assert!(Flusher::start(&fs.path().join("missing")).is_none());
    }
}
