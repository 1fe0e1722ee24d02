//! Writing a shipment's tars: plain (uncompressed) ustar/GNU archives, as the engine's
//! archive upload takes them. A `.git` is mostly packfiles, compressed already, so a
//! compression pass would cost time and win little.

use std::io::BufWriter;
use std::path::Path;

/// A tar being written to a file of the stage; every entry owned by `owner` (uid, gid: the
/// box user's, as the engine writes the owner of each entry it unpacks).
pub(crate) struct TarOut {
    builder: tar::Builder<BufWriter<fs_err::File>>,
    owner: (u64, u64),
}

impl TarOut {
    pub(crate) fn create(path: &Path, owner: (u64, u64)) -> std::io::Result<Self> {
        let file = fs_err::File::create(path)?;
        Ok(Self {
            builder: tar::Builder::new(BufWriter::new(file)),
            owner,
        })
    }

    fn header(&self, meta: &std::fs::Metadata) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_metadata_in_mode(meta, tar::HeaderMode::Complete);
        h.set_uid(self.owner.0);
        h.set_gid(self.owner.1);
        h
    }

    /// Add `src` (a file, a symbolic link exactly as it is, or a directory without its
    /// contents) as `name`.
    pub(crate) fn add(&mut self, src: &Path, name: &Path) -> std::io::Result<()> {
        let meta = fs_err::symlink_metadata(src)?;
        let mut h = self.header(&meta);
        if meta.file_type().is_symlink() {
            let target = fs_err::read_link(src)?;
            self.builder.append_link(&mut h, name, target)
        } else if meta.is_dir() {
            self.builder.append_data(&mut h, name, std::io::empty())
        } else {
            let file = fs_err::File::open(src)?;
            let exact = Exact {
                inner: std::io::Read::take(file, meta.len()),
                left: meta.len(),
                src,
            };
            self.builder.append_data(&mut h, name, exact)
        }
    }

    /// Add the directory `src` and everything below it, as `name`, parents before children.
    pub(crate) fn add_tree(&mut self, src: &Path, name: &Path) -> std::io::Result<()> {
        self.add(src, name)?;
        let mut entries: Vec<_> = fs_err::read_dir(src)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let (path, child) = (e.path(), name.join(e.file_name()));
            if e.file_type()?.is_dir() {
                self.add_tree(&path, &child)?;
            } else {
                self.add(&path, &child)?;
            }
        }
        Ok(())
    }

    /// Add directory entries for `name` and each of its parents not added yet (`made`
    /// remembers them), owned like every entry.
    pub(crate) fn add_dirs(
        &mut self,
        name: &Path,
        like: &Path,
        made: &mut std::collections::BTreeSet<std::path::PathBuf>,
    ) -> std::io::Result<()> {
        let mut missing: Vec<&Path> = name
            .ancestors()
            .filter(|a| !a.as_os_str().is_empty())
            .collect();
        missing.retain(|a| !made.contains(*a));
        for dir in missing.into_iter().rev() {
            self.add(like, dir)?;
            made.insert(dir.to_owned());
        }
        Ok(())
    }

    /// Finish the archive; its size in bytes.
    pub(crate) fn finish(self) -> std::io::Result<u64> {
        let mut out = self.builder.into_inner()?;
        use std::io::Write;
        out.flush()?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        Ok(file.metadata()?.len())
    }
}

/// A file read for an entry whose header says `left` bytes: never more (the rest of a file
/// that grew meanwhile is left out), and an error when it ends sooner (it shrank): the tar
/// crate copies what the reader gives, so either would otherwise corrupt the archive.
struct Exact<'a, R> {
    inner: std::io::Take<R>,
    left: u64,
    src: &'a Path,
}

impl<R: std::io::Read> std::io::Read for Exact<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.left > 0 && !buf.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("{} shrank while it was packed", self.src.display()),
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// The bytes of every file below `dir` (what a tar of it will roughly weigh).
pub(crate) fn tree_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for e in fs_err::read_dir(dir)? {
        let e = e?;
        let kind = e.file_type()?;
        if kind.is_dir() {
            total += tree_bytes(&e.path())?;
        } else if kind.is_file() {
            total += e.metadata()?.len();
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn an_entry_is_read_exactly_as_long_as_its_header_says() {
        let src = Path::new("f");
        let mut longer = Exact {
            inner: std::io::Read::take(&b"abcdef"[..], 4),
            left: 4,
            src,
        };
        let mut out = vec![];
        longer.read_to_end(&mut out).expect("read");
        assert_eq!(out, b"abcd");
        let mut shorter = Exact {
            inner: std::io::Read::take(&b"ab"[..], 4),
            left: 4,
            src,
        };
        let e = shorter.read_to_end(&mut vec![]).expect_err("shrank");
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
