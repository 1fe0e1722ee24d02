//! A container's files read and changed from the host without the host touching them:
//! every read is a command run in the container whose output the host takes as data
//! (NUL-separated path lists, bounded in size), every change a command run there whose
//! paths come on its standard input, NUL-separated, to `xargs -0` — never a shell line
//! built from them, and any bytes a name holds (the engine's argv must be UTF-8, a name
//! need not be). What a box's files say (names, links) is never followed on the host.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use agentbox_boxes::Result;
use agentbox_docker::exec::ExecSpec;
use agentbox_docker::Engine;

use crate::boxgit::{Capped, TEXT_LIMIT};
use crate::errors::{failed, remote};

/// What a command run for agentbox ended with.
pub(crate) struct Ran {
    pub status: i64,
    pub out: Vec<u8>,
    /// The start of its stderr (the box's text).
    pub err: String,
}

/// Run `argv` as root in `container` (running), from `/`; its stdout kept up to
/// [`TEXT_LIMIT`] bytes (more is an error: `what` says what was asked).
pub(crate) fn run(engine: &Engine, container: &str, argv: Vec<String>, what: &str) -> Result<Ran> {
    run_fed(engine, container, argv, None, what)
}

/// [`run`] with `stdin` fed to the command.
fn run_fed(
    engine: &Engine,
    container: &str,
    argv: Vec<String>,
    stdin: Option<Vec<u8>>,
    what: &str,
) -> Result<Ran> {
    let spec = ExecSpec {
        argv,
        env: vec![("LC_ALL".into(), "C".into())],
        workdir: Some("/".into()),
        user: Some("0".into()),
        ..Default::default()
    };
    let mut out = Capped::new(TEXT_LIMIT);
    let mut err = Capped::new(64 << 10);
    let status = engine
        .exec(
            container,
            &spec,
            stdin.map(|b| Box::new(std::io::Cursor::new(b)) as Box<dyn std::io::Read + Send>),
            &mut out,
            &mut err,
        )
        .map_err(remote)?;
    if out.over {
        return Err(failed(format!(
            "container {container}: {what} answered more than {} MiB",
            TEXT_LIMIT >> 20
        )));
    }
    Ok(Ran {
        status,
        out: out.kept,
        err: String::from_utf8_lossy(&err.kept).into_owned(),
    })
}

/// What an entry is (a symbolic link is [`Kind::Other`], whatever it points at).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    File,
    Other,
}

/// What is below a directory: each entry's path relative to it, and what it is.
pub(crate) type Listing = BTreeMap<PathBuf, Kind>;

/// Everything below `dir` in `container` on `dir`'s filesystem (nothing when it does not
/// exist), by the container's `find`.
pub(crate) fn listing(engine: &Engine, container: &str, dir: &str) -> Result<Listing> {
    let mut out = Listing::new();
    let probe = run(
        engine,
        container,
        vec!["test".into(), "-d".into(), dir.into()],
        "test -d",
    )?;
    if probe.status != 0 {
        return Ok(out);
    }
    let kinds: [(&[&str], Kind); 3] = [
        (&["-type", "d"], Kind::Dir),
        (&["-type", "f"], Kind::File),
        (&["!", "-type", "d", "!", "-type", "f"], Kind::Other),
    ];
    for (test, kind) in kinds {
        let mut argv: Vec<String> = vec!["find".into(), dir.into(), "-xdev".into()];
        argv.extend(test.iter().map(|t| (*t).to_owned()));
        argv.push("-print0".into());
        let ran = run(engine, container, argv, &format!("find {dir}"))?;
        if ran.status != 0 {
            return Err(failed(format!(
                "container {container}: listing {dir} failed with status {}: {}",
                ran.status,
                shown(&ran.err)
            )));
        }
        for p in ran.out.split(|b| *b == 0).filter(|p| !p.is_empty()) {
            let p = Path::new(std::ffi::OsStr::from_bytes(p));
            if let Ok(rel) = p.strip_prefix(dir) {
                if !rel.as_os_str().is_empty() {
                    out.insert(rel.to_owned(), kind);
                }
            }
        }
    }
    Ok(out)
}

/// Run `xargs -0 -n <per> <command…>` in `container` with `items` on its standard input
/// (each item one argument, `per` to one run of the command); a failure is an error naming
/// `what`. Nothing runs for no items. Its standard output.
pub(crate) fn xargs(
    engine: &Engine,
    container: &str,
    command: &[&str],
    per: usize,
    items: &[&[u8]],
    what: &str,
) -> Result<Vec<u8>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let mut stdin = Vec::new();
    for i in items {
        stdin.extend_from_slice(i);
        stdin.push(0);
    }
    let mut argv: Vec<String> = ["xargs", "-0", "-n", &per.to_string()]
        .map(str::to_owned)
        .to_vec();
    argv.extend(command.iter().map(|s| (*s).to_owned()));
    let ran = run_fed(engine, container, argv, Some(stdin), what)?;
    if ran.status != 0 {
        return Err(failed(format!(
            "container {container}: {what} failed with status {}: {}",
            ran.status,
            shown(&ran.err)
        )));
    }
    Ok(ran.out)
}

/// The start of a box's text, for an error message.
pub(crate) fn shown(text: &str) -> String {
    text.trim().chars().take(400).collect()
}
