//! A command the engine could not start (no such program, a working directory that is not
//! there): the engine reports it as the command's output (`OCI runtime exec failed: …`)
//! and status 126, where a local box fails with [`BoxError::Command`] (status 127 for a
//! program not found, 2 for a missing working directory, else 126). [`Sniff`] holds back
//! output that begins as that report, so that it becomes the same error instead of text
//! on the caller's terminal; output that turns out to be anything else is passed on whole.

use std::io::Write;

use agentbox_boxes::BoxError;

/// How the engine's report of a command it could not start begins.
const REPORT: &[u8] = b"OCI runtime exec failed";

/// The status a local box gives a command whose working directory cannot be entered.
const BAD_CWD_STATUS: i32 = 2;

/// A writer that holds back output while it may be the engine's report.
pub struct Sniff<W: Write> {
    inner: W,
    held: Vec<u8>,
    /// Output went through: it is the command's, whatever follows.
    passed: bool,
}

impl<W: Write> Sniff<W> {
    pub fn new(inner: W) -> Sniff<W> {
        Sniff {
            inner,
            held: Vec::new(),
            passed: false,
        }
    }

    /// The command ended with `status`: the engine's report as an error, or `None` (what
    /// was held back is written out).
    pub fn finish(
        mut self,
        status: i64,
        argv0: &str,
        cwd: &str,
    ) -> std::io::Result<Option<BoxError>> {
        if !self.passed && status == 126 && self.held.starts_with(REPORT) {
            let text = String::from_utf8_lossy(&self.held).trim().to_owned();
            return Ok(Some(error(&text, argv0, cwd)));
        }
        self.inner.write_all(&self.held)?;
        self.inner.flush()?;
        Ok(None)
    }
}

impl<W: Write> Write for Sniff<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.passed {
            return self.inner.write(buf);
        }
        self.held.extend_from_slice(buf);
        let n = self.held.len().min(REPORT.len());
        if self.held[..n] != REPORT[..n] {
            self.passed = true;
            self.inner.write_all(&self.held)?;
            self.held.clear();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.passed {
            self.inner.flush()
        } else {
            Ok(())
        }
    }
}

/// The local provider's error for the engine's report `text`.
fn error(text: &str, argv0: &str, cwd: &str) -> BoxError {
    if text.contains("chdir to cwd") {
        return BoxError::Command {
            message: format!("the working directory {cwd} does not exist in the box"),
            status: BAD_CWD_STATUS,
        };
    }
    if text.contains("executable file not found") || text.contains("no such file or directory") {
        return BoxError::Command {
            message: format!("{argv0}: command not found in the box"),
            status: 127,
        };
    }
    BoxError::Command {
        message: format!("cannot run {argv0}: {text}"),
        status: 126,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pieces: &[&[u8]], status: i64) -> (Vec<u8>, Option<BoxError>) {
        let mut out = Vec::new();
        let mut s = Sniff::new(&mut out);
        for p in pieces {
            s.write_all(p).expect("write");
        }
        let e = s.finish(status, "prog", "/w").expect("finish");
        (out, e)
    }

    #[test]
    fn the_engines_report_becomes_the_local_error_and_other_output_passes_whole() {
        let report: &[&[u8]] = &[
            b"OCI runtime ",
            b"exec failed: exec failed: unable to start container process: exec: \"prog\": executable file not found in $PATH: unknown\r\n",
        ];
        let (out, e) = run(report, 126);
        assert!(out.is_empty());
        match e {
            Some(BoxError::Command { message, status }) => {
                assert_eq!(
                    (message.as_str(), status),
                    ("prog: command not found in the box", 127)
                );
            }
            other => panic!("{other:?}"),
        }
        let cwd: &[&[u8]] = &[b"OCI runtime exec failed: exec failed: unable to start container process: chdir to cwd (\"/w\") set in config.json failed: no such file or directory: unknown"];
        let (_, e) = run(cwd, 126);
        assert!(
            matches!(e, Some(BoxError::Command { status: 2, .. })),
            "{e:?}"
        );
        // The same words from a command that ran (another status) are its output.
        let (out, e) = run(report, 1);
        assert!(e.is_none());
        assert_eq!(out, report.concat());
        // Output that begins otherwise passes at once, in order.
        let (out, e) = run(&[b"OCI", b" other", b" text"], 126);
        assert!(e.is_none());
        assert_eq!(out, b"OCI other text");
        let (out, e) = run(&[], 0);
        assert!((out.is_empty(), e.is_none()) == (true, true));
    }
}
