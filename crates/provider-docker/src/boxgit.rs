//! Git on a Docker box's repositories, run inside its container with the box's own git.
//!
//! A box repository is box-controlled data (its configuration names programs, its refs
//! may be anything), so the host never runs git on it; here it could not anyway, as it
//! lives in the container's writable layer, possibly on another machine. Every read runs
//! in the container (an exec of the image's `git`), and only data comes out:
//!
//! * object ids, accepted only in full-hex form ([`agentbox_git::is_object_id`]);
//! * `git status -z` path lists, used as text, at most [`TEXT_LIMIT`] bytes;
//! * a git bundle of the box's branch, written by the box at a fresh name in its own
//!   `/tmp` ([`exchange_path`]) and downloaded through the engine's archive API: the host keeps the content of
//!   that one regular file (at most [`bundle_limit`] bytes) in a temporary file of its own
//!   choosing — no name the box gives is used on the host — and checks its heads (that
//!   branch only, at the tip the box reported) before its own git fetches from it,
//!   verifying every object ([`agentbox_git::take_bundle`]).
//!
//! The local provider also checks the box's refs and alternates from inside before a sync,
//! because its boxes read the host's object store and could name host files; a container
//! sees none of the host's files, so what its repository points at is the container's own.
//!
//! The other way ([`offer_commit`], for a pull): the host bundles the commit from its own
//! repository, uploads it into the container's `/tmp`, and the box fetches it there. No
//! host credential enters the box: the host fetched from the remote itself.

use std::io::Write;
use std::path::Path;

use agentbox_boxes::records::record::GitRecord;
use agentbox_boxes::{BoxError, Result};
use agentbox_docker::download::Downloaded;
use agentbox_docker::exec::ExecSpec;
use agentbox_docker::Engine;

use crate::errors::remote;

/// The most of a box git command's output the host reads for ids and path lists.
pub const TEXT_LIMIT: u64 = 64 << 20;

/// The largest git bundle a box may send the host in one sync (2 GiB): the host spools it
/// to its own disk before verifying it.
pub const BUNDLE_LIMIT: u64 = 2 << 30;

/// The directory, in the container, of the bundles exchanged with the box (`/tmp` is
/// outside every node: the box's ignore set leaves it out).
pub const EXCHANGE_DIR: &str = "/tmp";

/// How the name of an exchanged bundle begins.
pub const EXCHANGE_PREFIX: &str = ".agentbox-";

/// A fresh name in [`EXCHANGE_DIR`] for one exchange (`what`: `sync`, `pull`): two at once
/// (two syncs of one box) never share a file.
pub fn exchange_name(what: &str) -> String {
    format!(
        "{EXCHANGE_PREFIX}{what}-{}.bundle",
        agentbox_core::id::new_id()
    )
}

/// [`exchange_name`] with its directory.
pub fn exchange_path(name: &str) -> String {
    format!("{EXCHANGE_DIR}/{name}")
}

/// The ref, in the box's repository, that a pulled commit is fetched into.
const PULLED_REF: &str = "refs/agentbox/pulled";

/// The most of a box git command's stderr kept for an error message.
const STDERR_LIMIT: u64 = 64 << 10;

/// One box's container, where its git runs.
pub struct InBox<'a> {
    pub engine: &'a Engine,
    pub container: String,
    pub name: &'a str,
    /// A host directory private to agentbox where a bundle is kept while it is checked.
    pub spool: &'a Path,
}

/// How a box git command ended.
struct Ran {
    status: i64,
    out: Vec<u8>,
    /// Its stdout said more than the limit (what is in `out` is cut short).
    over: bool,
    err: String,
}

/// A writer keeping at most `limit` bytes and noting whether more came.
pub(crate) struct Capped {
    pub(crate) kept: Vec<u8>,
    limit: u64,
    pub(crate) over: bool,
}

impl Capped {
    pub(crate) fn new(limit: u64) -> Capped {
        Capped {
            kept: Vec::new(),
            limit,
            over: false,
        }
    }
}

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = usize::try_from(self.limit.saturating_sub(self.kept.len() as u64))
            .unwrap_or(usize::MAX);
        if buf.len() > room {
            self.over = true;
        }
        self.kept.extend_from_slice(&buf[..buf.len().min(room)]);
        // The rest is drained and dropped: the command must be able to end.
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl InBox<'_> {
    /// The error for box repository `git` that `why` refused or failed.
    fn repo_error(&self, git: &GitRecord, why: impl Into<String>) -> BoxError {
        BoxError::BoxRepo {
            name: self.name.to_owned(),
            repo: git.workspace(),
            why: why.into(),
        }
    }

    /// Run `git -C <repo> ARGS` in the container, its stdout kept up to `limit` bytes.
    fn git(&self, git: &GitRecord, args: &[&str], limit: u64) -> Result<Ran> {
        let mut argv = vec![
            "git".to_owned(),
            "-C".to_owned(),
            git.workspace().to_string_lossy().into_owned(),
        ];
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        let spec = ExecSpec {
            argv,
            env: vec![
                ("LC_ALL".into(), "C".into()),
                ("GIT_TERMINAL_PROMPT".into(), "0".into()),
            ],
            workdir: Some("/".into()),
            ..Default::default()
        };
        let mut out = Capped::new(limit);
        let mut err = Capped::new(STDERR_LIMIT);
        let status = self
            .engine
            .exec(&self.container, &spec, None, &mut out, &mut err)
            .map_err(remote)?;
        let err = String::from_utf8_lossy(&err.kept).into_owned();
        // The engine reports a program it cannot start as the command's output, status
        // 126 (see `start_failure`); a shell says 127.
        let text = format!("{err}{}", String::from_utf8_lossy(&out.kept));
        if status == 127 || (status == 126 && text.contains("not found")) {
            return Err(self.repo_error(
                git,
                "the box's image has no git (`git` is not on its PATH): agentbox reads and syncs a box's repositories with the box's own git; use an image with git installed",
            ));
        }
        Ok(Ran {
            status,
            out: out.kept,
            over: out.over,
            err,
        })
    }

    /// [`InBox::git`] whose output is text (ids, path lists): refused when it says more
    /// than [`TEXT_LIMIT`]; bytes that are not UTF-8 are replaced, never interpreted.
    fn git_text(&self, git: &GitRecord, args: &[&str]) -> Result<(Ran, String)> {
        let ran = self.git(git, args, TEXT_LIMIT)?;
        if ran.over {
            return Err(self.repo_error(
                git,
                format!(
                    "git {} answered more than {} MiB",
                    args.join(" "),
                    TEXT_LIMIT >> 20
                ),
            ));
        }
        let text = String::from_utf8_lossy(&ran.out).into_owned();
        Ok((ran, text))
    }

    fn failed(&self, git: &GitRecord, what: &str, ran: &Ran) -> BoxError {
        self.repo_error(
            git,
            format!(
                "{what} exited with status {}: {}",
                ran.status,
                ran.err.trim()
            ),
        )
    }

    /// The tip of box repository `git`'s box branch, read inside the box (`None`: the
    /// branch does not exist there — the agent deleted or renamed it).
    pub fn tip(&self, git: &GitRecord) -> Result<Option<String>> {
        let branch = format!("refs/heads/{}^{{commit}}", git.branch);
        let (ran, out) = self.git_text(git, &["rev-parse", "--verify", "--quiet", &branch])?;
        match ran.status {
            0 => {
                let tip = out.trim();
                if agentbox_git::is_object_id(tip) {
                    Ok(Some(tip.to_owned()))
                } else {
                    Err(self.repo_error(
                        git,
                        format!("the box answered {tip:?} for the tip of {}", git.branch),
                    ))
                }
            }
            1 => Ok(None),
            _ => Err(self.failed(git, "git rev-parse", &ran)),
        }
    }

    /// Box repository `git`'s uncommitted and untracked paths, as `git status` inside the
    /// box reports them.
    pub fn dirty(&self, git: &GitRecord) -> Result<Vec<String>> {
        let (ran, out) = self.git_text(
            git,
            &["--no-optional-locks", "status", "--porcelain=v1", "-z"],
        )?;
        if ran.status != 0 {
            return Err(self.failed(git, "git status", &ran));
        }
        Ok(agentbox_git::porcelain_paths(&out))
    }

    /// Bring box repository `git`'s branch into its host repository (see the module's
    /// documentation). Returns the tip the host's branch is now at (`None`: the box has no
    /// such branch; the host's branch is left as it was).
    pub fn sync(&self, git: &GitRecord) -> Result<Option<String>> {
        let host = &git.repo;
        let Some(tip) = self.tip(git)? else {
            return Ok(None);
        };
        if agentbox_git::has_commit(host, &tip) {
            agentbox_git::set_box_branch(host, self.name, &git.branch, &git.base, &tip)?;
            return Ok(Some(tip));
        }
        let in_box = exchange_path(&exchange_name("sync"));
        // What the host has of this branch already (its last synced tip, the base) stays
        // out of the bundle; one the box lacks (a branch the host moved) is passed over.
        let mut args = vec![
            "bundle".to_owned(),
            "create".to_owned(),
            "--quiet".to_owned(),
            in_box.clone(),
            "--ignore-missing".to_owned(),
            format!("refs/heads/{}", git.branch),
        ];
        let known = agentbox_git::branch_tip(host, &git.branch, &git.objects)
            .ok()
            .flatten();
        for have in known.iter().chain([&git.base]) {
            if agentbox_git::has_commit(host, have) {
                args.push(format!("^{have}"));
            }
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let made = self.git(git, &argv, TEXT_LIMIT);
        let taken = made.and_then(|ran| {
            if ran.status != 0 {
                return Err(self.failed(git, "git bundle create", &ran));
            }
            self.take(git, &in_box, &tip)
        });
        // The bundle goes whatever happened (it is in the box's `/tmp`, outside its nodes).
        self.remove_in_box(&in_box);
        taken.map(|()| Some(tip))
    }

    /// Download the sync bundle at `in_box` and have the host take branch `git.branch` at
    /// `tip` from it.
    fn take(&self, git: &GitRecord, in_box: &str, tip: &str) -> Result<()> {
        let bundle = tempfile::NamedTempFile::new_in(self.spool)?;
        let limit = bundle_limit();
        let got = self
            .engine
            .download_file(
                &self.container,
                in_box,
                self.spool,
                &mut bundle.as_file(),
                limit,
            )
            .map_err(remote)?;
        if got == Downloaded::TooLarge {
            return Err(self.repo_error(
                git,
                format!(
                    "refused to sync: the box's bundle of {} is larger than {} MiB (the most a box may send the host at once); push from inside the box, or sync smaller steps",
                    git.branch,
                    limit >> 20
                ),
            ));
        }
        Ok(agentbox_git::take_bundle(
            &git.repo,
            bundle.path(),
            self.name,
            &git.branch,
            &git.base,
            tip,
        )?)
    }

    /// Remove `path` in the container (best effort: a leftover in `/tmp` harms nothing).
    fn remove_in_box(&self, path: &str) {
        let spec = ExecSpec {
            argv: vec!["rm".into(), "-f".into(), path.into()],
            ..Default::default()
        };
        let _ = self.engine.exec(
            &self.container,
            &spec,
            None,
            &mut std::io::sink(),
            &mut std::io::sink(),
        );
    }

    /// Make host commit `sha`, fetched on the host into `reference`, reachable in box
    /// repository `git` (see the module's documentation); nothing when the box has it.
    pub fn offer_commit(&self, git: &GitRecord, reference: &str, sha: &str) -> Result<()> {
        if !agentbox_git::is_object_id(sha) {
            return Err(self.repo_error(git, format!("{sha:?} is not a commit id")));
        }
        let has = self.git(git, &["cat-file", "-e", &format!("{sha}^{{commit}}")], 0)?;
        if has.status == 0 {
            return Ok(());
        }
        let dir = tempfile::Builder::new()
            .prefix("agentbox-pull-")
            .tempdir_in(self.spool)?;
        let bundle = dir.path().join("pull.bundle");
        let host_tip = agentbox_git::branch_tip(&git.repo, &git.branch, &git.objects)
            .ok()
            .flatten();
        let mut known: Vec<&str> = vec![&git.base];
        known.extend(host_tip.as_deref());
        agentbox_git::bundle_for_box(&git.repo, reference, &known, &bundle)?;
        let tar = dir.path().join("pull.tar");
        let name = exchange_name("pull");
        {
            let mut b = tar::Builder::new(fs_err::File::create(&tar)?);
            let mut h = tar::Header::new_gnu();
            h.set_metadata_in_mode(&fs_err::metadata(&bundle)?, tar::HeaderMode::Deterministic);
            h.set_mode(0o644);
            b.append_data(&mut h, &name, fs_err::File::open(&bundle)?)?;
            b.into_inner()?.flush()?;
        }
        self.engine
            .upload_tar(&self.container, EXCHANGE_DIR, &tar)
            .map_err(remote)?;
        let in_box = exchange_path(&name);
        let fetched = self.git(
            git,
            &[
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                &in_box,
                &format!("+{reference}:{PULLED_REF}"),
            ],
            TEXT_LIMIT,
        );
        self.remove_in_box(&in_box);
        let fetched = fetched?;
        if fetched.status != 0 {
            return Err(self.failed(git, "git fetch of the host's bundle", &fetched));
        }
        Ok(())
    }
}

/// [`BUNDLE_LIMIT`], or `AGENTBOX_BUNDLE_LIMIT` (bytes) of this process's environment:
/// set by the host user who runs agentbox, never by a box.
pub fn bundle_limit() -> u64 {
    std::env::var("AGENTBOX_BUNDLE_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BUNDLE_LIMIT)
}

#[cfg(test)]
mod tests {
    use super::Capped;
    use std::io::Write;

    #[test]
    fn capped_output_keeps_the_limit_and_notes_more() {
        let mut c = Capped::new(4);
        c.write_all(b"abc").expect("write");
        assert!(!c.over);
        c.write_all(b"def").expect("write");
        assert_eq!((c.kept.as_slice(), c.over), (&b"abcd"[..], true));
    }
}
