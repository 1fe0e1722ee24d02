//! Compression of the tar stream: writing (none, gzip, multithreaded zstd) and reading with
//! detection by magic bytes.

use std::io::{self, Read, Write};

use super::format::Compression;

/// zstd magic bytes.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
/// gzip magic bytes.
pub const GZIP_MAGIC: [u8; 2] = [0x1F, 0x8B];
/// Default zstd level (the format allows 1..=3 for speed).
pub const DEFAULT_ZSTD_LEVEL: i32 = 1;

/// The compressed output of a bundle.
pub(crate) enum Sink<W: Write> {
    Plain(W),
    Gzip(flate2::write::GzEncoder<W>),
    Zstd(zstd::Encoder<'static, W>),
}

impl<W: Write> Sink<W> {
    pub(crate) fn new(w: W, compression: Compression, zstd_level: i32) -> io::Result<Sink<W>> {
        Ok(match compression {
            Compression::None => Sink::Plain(w),
            Compression::Gzip => Sink::Gzip(flate2::write::GzEncoder::new(
                w,
                flate2::Compression::default(),
            )),
            Compression::Zstd => {
                let mut enc = zstd::Encoder::new(w, zstd_level.clamp(1, 3))?;
                let threads = std::thread::available_parallelism()
                    .map(|n| n.get() as u32)
                    .unwrap_or(1);
                if threads > 1 {
                    enc.multithread(threads)?;
                }
                enc.include_checksum(true)?;
                Sink::Zstd(enc)
            }
        })
    }

    pub(crate) fn finish(self) -> io::Result<W> {
        match self {
            Sink::Plain(mut w) => {
                w.flush()?;
                Ok(w)
            }
            Sink::Gzip(g) => {
                let mut w = g.finish()?;
                w.flush()?;
                Ok(w)
            }
            Sink::Zstd(z) => {
                let mut w = z.finish()?;
                w.flush()?;
                Ok(w)
            }
        }
    }
}

impl<W: Write> Write for Sink<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Gzip(w) => w.write(buf),
            Sink::Zstd(w) => w.write(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.write_all(buf),
            Sink::Gzip(w) => w.write_all(buf),
            Sink::Zstd(w) => w.write_all(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Gzip(w) => w.flush(),
            Sink::Zstd(w) => w.flush(),
        }
    }
}

/// Read up to `n` bytes (fewer only at end of input).
fn peek(r: &mut dyn Read, n: usize) -> io::Result<Vec<u8>> {
    let mut head = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match r.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    head.truncate(got);
    Ok(head)
}

/// Detect the compression of `r` by its magic bytes and return the decompressed stream.
pub(crate) fn decompress<'a>(
    mut r: Box<dyn Read + 'a>,
) -> io::Result<(Compression, Box<dyn Read + 'a>)> {
    let head = peek(&mut r, 4)?;
    let chained: Box<dyn Read + 'a> = Box::new(io::Cursor::new(head.clone()).chain(r));
    if head.starts_with(&ZSTD_MAGIC) {
        let dec = zstd::Decoder::new(chained)?;
        Ok((Compression::Zstd, Box::new(dec)))
    } else if head.starts_with(&GZIP_MAGIC) {
        let dec = flate2::read::MultiGzDecoder::new(io::BufReader::new(chained));
        Ok((Compression::Gzip, Box::new(dec)))
    } else {
        Ok((Compression::None, chained))
    }
}

/// Check that `r` starts a tar archive (`ustar` at offset 257) and return it unconsumed.
pub(crate) fn expect_tar<'a>(mut r: Box<dyn Read + 'a>) -> io::Result<Box<dyn Read + 'a>> {
    let head = peek(&mut r, 512)?;
    if head.len() < 512 || &head[257..262] != b"ustar" {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            if head.len() < 512 {
                format!("only {} bytes: too short to be a tar archive", head.len())
            } else {
                "not a tar archive (no ustar magic at offset 257)".to_owned()
            },
        ));
    }
    Ok(Box::new(io::Cursor::new(head).chain(r)))
}

/// Size of the pieces the decompressing thread hands over, and how many may wait: the
/// reader stays at most this far behind (bounded memory, even for a decompression bomb,
/// whose size limit the consumer enforces).
const PIECE: usize = 1 << 20;
const PIECES_IN_FLIGHT: usize = 8;

/// [`decompress`] on a thread of its own: the returned reader yields the decompressed
/// stream while the caller works on what it already has (unpacking, hashing, writing), the
/// way `zstd -dc | tar -x` overlaps its two processes. A failure to set up or to read the
/// input arrives as a read error of the returned reader, its message starting with
/// "decompressing". The thread ends at the end of the input, at its first error, or as soon
/// as the reader is dropped.
pub(crate) fn decompress_in_thread(input: Box<dyn Read + Send>) -> io::Result<PipeReader> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<io::Result<Vec<u8>>>(PIECES_IN_FLIGHT);
    std::thread::Builder::new()
        .name("decompress".into())
        .spawn(move || {
            let mut dec = match decompress(input) {
                Ok((_, dec)) => dec,
                Err(e) => {
                    let _ = tx.send(Err(io::Error::new(e.kind(), format!("decompressing: {e}"))));
                    return;
                }
            };
            loop {
                let mut piece = vec![0u8; PIECE];
                let mut got = 0;
                let failed = loop {
                    match dec.read(&mut piece[got..]) {
                        Ok(0) => break None,
                        Ok(n) => {
                            got += n;
                            if got == piece.len() {
                                break None;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => break Some(e),
                    }
                };
                let end = got < piece.len();
                piece.truncate(got);
                if !piece.is_empty() && tx.send(Ok(piece)).is_err() {
                    return;
                }
                if let Some(e) = failed {
                    let _ = tx.send(Err(io::Error::new(e.kind(), format!("decompressing: {e}"))));
                    return;
                }
                if end {
                    return;
                }
            }
        })?;
    Ok(PipeReader {
        rx,
        piece: Vec::new(),
        pos: 0,
        done: false,
    })
}

/// The reading end of [`decompress_in_thread`].
pub(crate) struct PipeReader {
    rx: std::sync::mpsc::Receiver<io::Result<Vec<u8>>>,
    piece: Vec<u8>,
    pos: usize,
    done: bool,
}

impl Read for PipeReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.piece.len() {
            if self.done {
                return Ok(0);
            }
            match self.rx.recv() {
                Ok(Ok(piece)) => {
                    self.piece = piece;
                    self.pos = 0;
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                // The thread finished: end of the stream.
                Err(_) => {
                    self.done = true;
                    return Ok(0);
                }
            }
        }
        let n = buf.len().min(self.piece.len() - self.pos);
        buf[..n].copy_from_slice(&self.piece[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
