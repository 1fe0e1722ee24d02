//! Bytes a long transfer has moved so far (the bundle written by an export, the bundle read
//! by an import), counted where the data passes and read by whoever reports progress (the
//! CLI prints it on stderr). One counter per process: it only ever grows, and a reporter
//! shows the difference from when its operation started.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};

static MOVED: AtomicU64 = AtomicU64::new(0);

/// Count `n` more bytes moved.
pub fn add(n: u64) {
    MOVED.fetch_add(n, Ordering::Relaxed);
}

/// Bytes moved since the process started.
pub fn moved() -> u64 {
    MOVED.load(Ordering::Relaxed)
}

/// A writer that counts what passes through it (see [`add`]).
pub struct Counting<W>(pub W);

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.0.write(buf)?;
        add(n as u64);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read(buf)?;
        add(n as u64);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_passes_a_counting_writer_or_reader_is_counted() {
        let before = moved();
        let mut w = Counting(Vec::new());
        w.write_all(b"hello").expect("write");
        let mut r = Counting(&b"abc"[..]);
        let mut out = Vec::new();
        r.read_to_end(&mut out).expect("read");
        // Other tests of this process may count too: at least ours.
        assert!(moved() - before >= 8);
    }
}
