//! Building a box base image from a Dockerfile, tagged by the fingerprint of what goes in.
//!
//! The build context is packed here, deterministically (entries sorted, owners 0, times 0,
//! `.dockerignore` applied), and its BLAKE3 hash is the fingerprint: the tag changes exactly
//! when a byte, a name or a mode of what the Dockerfile can see changes, and not when a
//! file is merely touched. A Dockerfile outside the context travels in the context as
//! [`OUTSIDE_DOCKERFILE`].
//!
//! `.dockerignore` as the docker CLI reads it: one pattern per line (`#` comments), paths
//! relative to the context root (a leading `/` or `./` changes nothing), `*`, `?` and `**`,
//! a pattern that matches a directory excluding what is below it, `!` re-including, the
//! last matching line winning. The Dockerfile and `.dockerignore` are always sent.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentbox_core::glob::PathPattern;
use bollard::query_parameters::BuildImageOptions;

use crate::engine::Engine;
use crate::upload::UploadWatch;
use crate::Result;

/// The name a Dockerfile from outside the context has in it.
pub const OUTSIDE_DOCKERFILE: &str = ".agentbox.Dockerfile";

/// A packed build context.
pub struct BuildContext {
    tar: Vec<u8>,
    /// The Dockerfile's path in the context.
    dockerfile: String,
    /// The first 16 hex digits of the context's BLAKE3 hash.
    pub fingerprint: String,
    /// Files and directories packed.
    pub entries: usize,
}

/// One `.dockerignore` line.
struct Rule {
    pattern: PathPattern,
    include: bool,
}

fn rules(context: &Path) -> Result<Vec<Rule>> {
    let text = match fs_err::read_to_string(context.join(".dockerignore")) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (include, p) = match l.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, l),
            };
            // Anchored at the root, as docker does: `./` keeps the matcher from taking a
            // lone `*.log` as "at any depth".
            let p = p.trim_start_matches('/').trim_start_matches("./");
            PathPattern::new(&format!("./{p}")).map(|pattern| Rule { pattern, include })
        })
        .collect())
}

/// Whether `rel` is left out: the last rule matching it or one of its directories.
fn excluded(rules: &[Rule], rel: &Path) -> bool {
    let comps: Vec<&[u8]> = rel
        .components()
        .map(|c| c.as_os_str().as_encoded_bytes())
        .collect();
    let mut out = false;
    for r in rules {
        if (1..=comps.len()).any(|n| r.pattern.matches(&comps[..n])) {
            out = !r.include;
        }
    }
    out
}

/// Pack `context` with `dockerfile` (inside it or not) into a build context.
pub fn pack(context: &Path, dockerfile: &Path) -> Result<BuildContext> {
    let rules = rules(context)?;
    let inside = dockerfile
        .strip_prefix(context)
        .ok()
        .filter(|r| !r.as_os_str().is_empty())
        .map(Path::to_path_buf);
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    let mut entries = 0usize;
    let walk = walkdir::WalkDir::new(context)
        .min_depth(1)
        .follow_links(false)
        .sort_by_file_name();
    let mut skip_below: Option<PathBuf> = None;
    for entry in walk {
        let entry = entry.map_err(|e| {
            let path = e.path().map(Path::to_path_buf).unwrap_or_default();
            std::io::Error::other(format!("{}: {e}", path.display()))
        })?;
        let rel = entry
            .path()
            .strip_prefix(context)
            .map_err(|e| std::io::Error::other(e.to_string()))?
            .to_path_buf();
        if skip_below.as_ref().is_some_and(|s| rel.starts_with(s)) {
            continue;
        }
        let always = inside.as_deref() == Some(rel.as_path()) || rel == Path::new(".dockerignore");
        if !always && excluded(&rules, &rel) {
            // A re-included path below an excluded directory is still looked for.
            if entry.file_type().is_dir() && !rules.iter().any(|r| r.include) {
                skip_below = Some(rel);
            }
            continue;
        }
        append(&mut b, entry.path(), &rel)?;
        entries += 1;
    }
    let dockerfile_name = match inside {
        Some(rel) => rel.to_string_lossy().into_owned(),
        None => {
            append(&mut b, dockerfile, Path::new(OUTSIDE_DOCKERFILE))?;
            entries += 1;
            OUTSIDE_DOCKERFILE.to_owned()
        }
    };
    let tar = b.into_inner()?;
    let fingerprint = blake3::hash(&tar).to_hex()[..16].to_owned();
    Ok(BuildContext {
        tar,
        dockerfile: dockerfile_name,
        fingerprint,
        entries,
    })
}

/// Append `path` as `rel` with everything that does not change what is built zeroed.
fn append(b: &mut tar::Builder<Vec<u8>>, path: &Path, rel: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let md = fs_err::symlink_metadata(path)?;
    let mut h = tar::Header::new_gnu();
    h.set_mode(md.permissions().mode() & 0o7777);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    let ft = md.file_type();
    if ft.is_dir() {
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        b.append_data(&mut h, rel, std::io::empty())?;
    } else if ft.is_symlink() {
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        let target = fs_err::read_link(path)?;
        b.append_link(&mut h, rel, target)?;
    } else if ft.is_file() {
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(md.len());
        b.append_data(&mut h, rel, fs_err::File::open(path)?)?;
    }
    // Sockets, fifos and devices have no place in a build context.
    Ok(())
}

impl Engine {
    /// Build `ctx` as image `repo:tag` with `labels`, passing each line of the build's
    /// output to `progress`; returns the image's id.
    pub fn build_image(
        &self,
        ctx: &BuildContext,
        repo: &str,
        tag: &str,
        labels: &HashMap<String, String>,
        progress: &mut dyn FnMut(&str),
    ) -> Result<String> {
        let options = BuildImageOptions {
            dockerfile: ctx.dockerfile.clone(),
            t: Some(format!("{repo}:{tag}")),
            labels: Some(labels.clone()),
            rm: true,
            forcerm: true,
            ..Default::default()
        };
        let doing = format!("build image {repo}:{tag}");
        // The context is an upload (see crate::upload): its watch bounds it, not the
        // request timeout.
        let watch = UploadWatch::new(self);
        let body = bollard::body_try_stream(
            watch.track(crate::upload::chunks(bytes::Bytes::from(ctx.tar.clone()))),
        );
        let docker = self.docker.clone().with_timeout(Duration::MAX);
        self.block_on(self.follow_upload(
            &watch,
            docker.build_image(options, None, Some(body)),
            &doing,
            |step| {
                if let Some(text) = &step.stream {
                    for line in text.lines().filter(|l| !l.trim().is_empty()) {
                        progress(line);
                    }
                }
                step.error_detail.and_then(|d| d.message)
            },
        ))?;
        Ok(self.require_image(&format!("{repo}:{tag}"))?.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(ctx: &BuildContext) -> Vec<String> {
        let mut a = tar::Archive::new(ctx.tar.as_slice());
        a.entries()
            .expect("entries")
            .map(|e| {
                e.expect("entry")
                    .path()
                    .expect("path")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    }

    #[test]
    fn the_fingerprint_follows_content_names_and_modes_not_times() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tmp");
        let c = dir.path();
        fs_err::write(c.join("Dockerfile"), "FROM scratch\nCOPY a /a\n").expect("df");
        fs_err::write(c.join("a"), "one").expect("a");
        let first = pack(c, &c.join("Dockerfile")).expect("pack");
        // Touched: the same.
        let f = fs_err::File::options()
            .append(true)
            .open(c.join("a"))
            .expect("open");
        f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(60))
            .expect("touch");
        assert_eq!(
            pack(c, &c.join("Dockerfile")).expect("pack").fingerprint,
            first.fingerprint
        );
        // A byte, a mode, a new file: different.
        fs_err::write(c.join("a"), "two").expect("a");
        let content = pack(c, &c.join("Dockerfile")).expect("pack").fingerprint;
        assert_ne!(content, first.fingerprint);
        fs_err::set_permissions(c.join("a"), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let mode = pack(c, &c.join("Dockerfile")).expect("pack").fingerprint;
        assert_ne!(mode, content);
        fs_err::write(c.join("b"), "").expect("b");
        assert_ne!(
            pack(c, &c.join("Dockerfile")).expect("pack").fingerprint,
            mode
        );
    }

    #[test]
    fn dockerignore_is_applied_as_the_docker_cli_does() {
        let dir = tempfile::tempdir().expect("tmp");
        let c = dir.path();
        for f in [
            "Dockerfile",
            "keep.txt",
            "debug.log",
            "sub/debug.log",
            "node_modules/x/index.js",
            "secrets/key",
            "secrets/public.pem",
        ] {
            let p = c.join(f);
            fs_err::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            fs_err::write(&p, f).expect("write");
        }
        fs_err::write(
            c.join(".dockerignore"),
            "# comment\n*.log\nnode_modules\n/secrets\n!secrets/public.pem\nDockerfile\n",
        )
        .expect("ignore");
        let ctx = pack(c, &c.join("Dockerfile")).expect("pack");
        let got = names(&ctx);
        for want in [
            ".dockerignore",
            "Dockerfile",
            "keep.txt",
            "sub/debug.log",
            "secrets/public.pem",
        ] {
            assert!(
                got.iter().any(|g| g.trim_end_matches('/') == want),
                "{want} missing: {got:?}"
            );
        }
        for gone in ["debug.log", "node_modules/x/index.js", "secrets/key"] {
            assert!(!got.iter().any(|g| g == gone), "{gone} sent: {got:?}");
        }
    }

    #[test]
    fn a_dockerfile_outside_the_context_travels_in_it() {
        let dir = tempfile::tempdir().expect("tmp");
        let c = dir.path().join("ctx");
        fs_err::create_dir_all(&c).expect("mkdir");
        fs_err::write(c.join("a"), "a").expect("a");
        let df = dir.path().join("box.Dockerfile");
        fs_err::write(&df, "FROM scratch\n").expect("df");
        let ctx = pack(&c, &df).expect("pack");
        assert_eq!(ctx.dockerfile, OUTSIDE_DOCKERFILE);
        assert!(names(&ctx).iter().any(|n| n == OUTSIDE_DOCKERFILE));
    }
}
