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
