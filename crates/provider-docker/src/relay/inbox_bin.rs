//! The in-box `agentbox` of a Docker box: a statically linked build of the agentbox binary
//! (no libc needed in the image), copied into the container through the engine's archive
//! upload — never a bind mount of a host path, which the box could write.
//!
//! Which binary: `AGENTBOX_INBOX_BIN` when set; else the running binary when it is static;
//! else `agentbox-static` beside it. Whichever it is must be a static x86-64 ELF (no
//! `PT_INTERP`): a dynamically linked one would not start in an image without glibc.
//!
//! In the container it is [`IN_BOX`] (on the usual `PATH`), and [`STAMP`] holds the BLAKE3
//! hash of what was copied: a container whose stamp matches already has this binary (a box
//! made from one of its nodes' images carries it), so it is copied only when missing or
//! different. Both paths are the provider's own and never count as a change of the box
//! ([`is_own_path`]).

use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use agentbox_boxes::{BoxError, Result};
use agentbox_docker::download::Downloaded;
use agentbox_docker::Engine;

use crate::errors::remote;

/// Where the in-box `agentbox` is in a box's container.
pub const IN_BOX: &str = "/usr/local/bin/agentbox";
/// The directory the relay's socket and [`STAMP`] are in.
pub const RUN_DIR: &str = "/run/agentbox";
/// The BLAKE3 hash (hex) of the binary at [`IN_BOX`].
pub const STAMP: &str = "/run/agentbox/inbox-id";
/// Names the binary to copy into boxes.
pub const ENV: &str = "AGENTBOX_INBOX_BIN";
/// The name of a static build beside the running binary.
pub const SIBLING: &str = "agentbox-static";

/// How to make a static build, for the error that finds none.
const HOW_TO_BUILD: &str = "build one with `RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --target x86_64-unknown-linux-gnu -p agentbox` and set AGENTBOX_INBOX_BIN to target/x86_64-unknown-linux-gnu/release/agentbox (or copy it beside agentbox as agentbox-static)";

/// Whether `path` (absolute, in a container) is the in-box binary's or the relay's own.
pub fn is_own_path(path: &str) -> bool {
    path == IN_BOX || path == RUN_DIR || path.starts_with("/run/agentbox/")
}

/// The static binary found, and its hash.
#[derive(Debug, Clone)]
pub struct InBoxBinary {
    pub path: PathBuf,
    pub hash: String,
}

/// The binary to copy into boxes (see the module's documentation), looked for once per
/// process.
pub fn find() -> Result<&'static InBoxBinary> {
    static FOUND: OnceLock<std::result::Result<InBoxBinary, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| locate().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|why| BoxError::Remote {
            message: why.clone(),
            hint: Some(HOW_TO_BUILD.to_owned()),
            code: agentbox_core::exit::ExitCode::BadConfig.into(),
        })
}

fn locate() -> std::result::Result<InBoxBinary, String> {
    if let Some(given) = std::env::var_os(ENV) {
        let path = PathBuf::from(given);
        return match is_static_elf(&path) {
            Ok(true) => hashed(path),
            Ok(false) => Err(format!(
                "{ENV}={} is not a statically linked x86-64 program: the in-box agentbox must run in images without glibc",
                path.display()
            )),
            Err(e) => Err(format!("{ENV}={}: {e}", path.display())),
        };
    }
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the running agentbox: {e}"))?;
    if is_static_elf(&exe).unwrap_or(false) {
        return hashed(exe);
    }
    let sibling = exe.with_file_name(SIBLING);
    if is_static_elf(&sibling).unwrap_or(false) {
        return hashed(sibling);
    }
    Err(format!(
        "no statically linked agentbox for Docker boxes: {} is dynamically linked and there is no {} beside it",
        exe.display(),
        sibling.display()
    ))
}

fn hashed(path: PathBuf) -> std::result::Result<InBoxBinary, String> {
    let mut h = blake3::Hasher::new();
    let mut f = fs_err::File::open(&path).map_err(|e| e.to_string())?;
    std::io::copy(&mut f, &mut h).map_err(|e| format!("read {}: {e}", path.display()))?;
    Ok(InBoxBinary {
        path,
        hash: h.finalize().to_hex().to_string(),
    })
}

/// Whether `path` is an x86-64 ELF executable without a program interpreter (statically
/// linked, static-pie included).
pub fn is_static_elf(path: &Path) -> std::io::Result<bool> {
    const PT_INTERP: u32 = 3;
    let mut f = fs_err::File::open(path)?;
    let mut head = [0u8; 64];
    if f.read_exact(&mut head).is_err() {
        return Ok(false);
    }
    // ELF, 64-bit, little-endian, x86-64.
    if &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 || head[18..20] != [62, 0] {
        return Ok(false);
    }
    let u16_at = |o: usize| u16::from_le_bytes([head[o], head[o + 1]]);
    let phoff = u64::from_le_bytes(head[32..40].try_into().unwrap_or([0; 8]));
    let (phentsize, phnum) = (u64::from(u16_at(54)), u64::from(u16_at(56)));
    if phentsize < 4 {
        return Ok(false);
    }
    for i in 0..phnum {
        f.seek(std::io::SeekFrom::Start(phoff + i * phentsize))?;
        let mut ty = [0u8; 4];
        f.read_exact(&mut ty)?;
        if u32::from_le_bytes(ty) == PT_INTERP {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Copy the in-box binary into container `container` unless its stamp says it has it
/// (`spool`: a host directory for the engine's tar).
pub fn ensure(engine: &Engine, container: &str, spool: &Path) -> Result<()> {
    ensure_with(engine, container, find()?, spool).map(|_| ())
}

/// [`ensure`] with `bin`; whether it was copied.
pub fn ensure_with(
    engine: &Engine,
    container: &str,
    bin: &InBoxBinary,
    spool: &Path,
) -> Result<bool> {
    let mut stamp = Vec::new();
    let had = engine
        .download_file(container, STAMP, spool, &mut stamp, 256)
        .map_err(remote);
    if matches!(had, Ok(Downloaded::Whole(_))) && stamp == bin.hash.as_bytes() {
        return Ok(false);
    }
    copy(engine, container, bin, spool)?;
    Ok(true)
}

/// `path` as the binary to copy (its hash taken), when it is a static x86-64 program.
pub fn at(path: &Path) -> Result<InBoxBinary> {
    let refused = |why: String| BoxError::Remote {
        message: why,
        hint: Some(HOW_TO_BUILD.to_owned()),
        code: agentbox_core::exit::ExitCode::BadConfig.into(),
    };
    match is_static_elf(path) {
        Ok(true) => hashed(path.to_path_buf()).map_err(refused),
        Ok(false) => Err(refused(format!(
            "{} is not a statically linked x86-64 program",
            path.display()
        ))),
        Err(e) => Err(refused(format!("{}: {e}", path.display()))),
    }
}

/// Copy `bin` into container `container` with its stamp.
pub fn copy(engine: &Engine, container: &str, bin: &InBoxBinary, spool: &Path) -> Result<()> {
    let tar = tempfile::NamedTempFile::new_in(spool)?;
    {
        let mut b = tar::Builder::new(tar.as_file());
        let mut f = fs_err::File::open(&bin.path)?;
        let len = f.metadata()?.len();
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o755);
        h.set_uid(0);
        h.set_gid(0);
        h.set_size(len);
        b.append_data(&mut h, IN_BOX.trim_start_matches('/'), &mut f)?;
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(bin.hash.len() as u64);
        b.append_data(&mut h, STAMP.trim_start_matches('/'), bin.hash.as_bytes())?;
        b.finish()?;
    }
    engine
        .upload_tar(container, "/", tar.path())
        .map_err(remote)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_and_dynamic_programs_are_told_apart() {
        // busybox is static on the machines the tests run on; sh is not.
        let busybox = Path::new("/bin/busybox");
        if busybox.exists() {
            assert!(is_static_elf(busybox).expect("read"));
        }
        let dynamic = std::env::current_exe().expect("exe");
        assert!(
            !is_static_elf(&dynamic).expect("read"),
            "a test binary is dynamic"
        );
        let text = tempfile::NamedTempFile::new().expect("tmp");
        fs_err::write(text.path(), "#!/bin/sh\n").expect("write");
        assert!(!is_static_elf(text.path()).expect("read"));
    }

    #[test]
    fn own_paths() {
        assert!(is_own_path(IN_BOX));
        assert!(is_own_path("/run/agentbox/ctl/sock"));
        assert!(is_own_path(STAMP));
        assert!(!is_own_path("/run/agentboxes"));
        assert!(!is_own_path("/workspace/run/agentbox"));
    }
}
