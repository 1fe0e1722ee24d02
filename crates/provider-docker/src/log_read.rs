//! Reading part of a background process's log inside a running container, for `logs -f`:
//! the bytes from an offset on, read in the box (`tail -c +N | head -c MAX`), so that each
//! read moves only the new output. The engine's archive read
//! ([`agentbox_docker::Engine::read_range`]) sends the whole file up to the offset every
//! time, which for a log followed while it grows moves its length again on every read.
//!
//! The box's `tail` and `head` are the box's: what they print is only data, and at most
//! `max` bytes of it is kept (the command is dropped past that). An image without them
//! (it needs only a `sh`) is told apart by an exit status of its own ([`NO_TOOLS`]): the
//! caller then reads through the archive as before.

use agentbox_docker::exec::ExecSpec;
use agentbox_docker::Engine;

/// Exit status of [`SCRIPT`] when the log is not there.
const NO_LOG: i64 = 3;
/// Exit status of [`SCRIPT`] when the image has no `tail` or `head`.
const NO_TOOLS: i64 = 4;

/// `$1`: the log; `$2`: the first byte to read, counted from 1; `$3`: how many at most.
const SCRIPT: &str = r#"[ -f "$1" ] || exit 3; command -v tail >/dev/null 2>&1 && command -v head >/dev/null 2>&1 || exit 4; tail -c "+$2" "$1" | head -c "$3""#;

/// What a read in the box gave.
#[derive(Debug, PartialEq, Eq)]
pub enum InBox {
    /// Up to `max` bytes from the offset.
    Read(Vec<u8>),
    /// There is no log at that path.
    NoLog,
    /// The image cannot read it this way: read it another way.
    Cannot,
}

/// Up to `max` bytes of the file `path` in running container `container` from byte
/// `offset` (see the module's documentation).
pub fn read(
    engine: &Engine,
    container: &str,
    path: &str,
    offset: u64,
    max: usize,
) -> agentbox_docker::Result<InBox> {
    let spec = ExecSpec {
        argv: vec![
            "sh".into(),
            "-c".into(),
            SCRIPT.into(),
            "agentbox-log".into(),
            path.into(),
            (offset + 1).to_string(),
            max.to_string(),
        ],
        ..Default::default()
    };
    let mut out = Capped {
        data: Vec::new(),
        max,
        full: false,
    };
    // What the box's tools say on stderr is not the log: dropped as it comes.
    let mut err = std::io::sink();
    match engine.exec(container, &spec, None, &mut out, &mut err) {
        Ok(0) => Ok(InBox::Read(out.data)),
        Ok(NO_LOG) => Ok(InBox::NoLog),
        Ok(NO_TOOLS) => Ok(InBox::Cannot),
        // A tool that failed otherwise: the archive read says what is there.
        Ok(_) => Ok(InBox::Cannot),
        // Its output passed `max`: what came before is the read.
        Err(_) if out.full => Ok(InBox::Read(out.data)),
        Err(e) => Err(e),
    }
}

/// A sink keeping at most `max` bytes, failing once more comes (which ends the command's
/// read).
struct Capped {
    data: Vec<u8>,
    max: usize,
    full: bool,
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.max - self.data.len();
        if buf.len() > room {
            self.data.extend_from_slice(&buf[..room]);
            self.full = true;
            return Err(std::io::Error::other("more output than asked for"));
        }
        self.data.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_capped_sink_keeps_max_bytes_and_then_fails() {
        let mut c = Capped {
            data: Vec::new(),
            max: 5,
            full: false,
        };
        c.write_all(b"abc").expect("room");
        assert!(c.write_all(b"defg").is_err());
        assert!(c.full);
        assert_eq!(c.data, b"abcde");
    }
}
