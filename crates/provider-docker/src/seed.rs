//! A new box's `/workspace`, made on the host and sent to the engine as one tar.
//!
//! A project whose root (or first-level sub-directories) are git repositories: each is
//! shipped ([`agentbox_git::ship`]: a shallow `.git`, the carried-over work, the untracked
//! files) and the shipment's steps are carried out here, on the host, into a fresh
//! directory of the host's — the data is all host-made, nothing of a box is involved — so
//! that the box image needs no git. The rest of a project without a repository at its root
//! is copied as it is, without the sub-repositories' directories (as local seeding does).
//! A directory that is no repository, or `--no-git`, is a plain copy of everything.
//!
//! The tar's entries are `workspace/…`, owned by root (the box's user), with their modes
//! and modification times; special files (sockets, fifos, devices) are left out.

use std::path::{Path, PathBuf};

use agentbox_boxes::provider::NewBox;
use agentbox_boxes::records::record::{self, GitRecord, SeededRepo};
use agentbox_boxes::{BoxError, Result};
use agentbox_core::home::Home;
use agentbox_git::{BoxStep, Depth, HostRepo, ShipOpts, Shipment};
use agentbox_store::fsops::copy::{copy_tree, CopyOpts};
use agentbox_store::fsops::scan::scan_tree;

/// A workspace ready to send: the tar, and what seeding it made in host repositories.
pub struct Seeded {
    /// Holds the tar (and is removed with it).
    dir: tempfile::TempDir,
    pub tar: PathBuf,
    pub repos: Vec<SeededRepo>,
    /// Each host repository's shipment, to take back ([`Seeded::undo`]) when the box does
    /// not come to be.
    shipped: Vec<(HostRepo, Shipment)>,
}

impl Seeded {
    /// Take back the branches and pins made in host repositories (a box that failed).
    pub fn undo(&self) {
        for (repo, shipment) in &self.shipped {
            if shipment.undo(repo).is_err() {
                // The branch moved or is gone: the pins at least go.
                let _ = agentbox_git::unpin(&repo.root, &shipment.name);
            }
        }
    }
}

/// Make box `new.name`'s workspace tar in a fresh directory below `tmp`.
pub fn seed(home: &Home, new: &NewBox<'_>, tmp: &Path) -> Result<Seeded> {
    let dir = tempfile::Builder::new()
        .prefix("agentbox-docker-seed-")
        .tempdir_in(tmp)?;
    let tar = dir.path().join("workspace.tar");
    let Some(src) = new.source else {
        let ws = dir.path().join("workspace");
        fs_err::create_dir(&ws)?;
        pack(&ws, &tar)?;
        return Ok(Seeded {
            dir,
            tar,
            repos: Vec::new(),
            shipped: Vec::new(),
        });
    };
    let (root, subs) = if new.no_git {
        (None, Vec::new())
    } else {
        (
            agentbox_git::detect(src).map_err(BoxError::Seed)?,
            agentbox_git::sub_repos(src).map_err(BoxError::Seed)?,
        )
    };
    if root.is_none() && subs.is_empty() {
        // Straight from the project: nothing to assemble.
        pack(src, &tar)?;
        return Ok(Seeded {
            dir,
            tar,
            repos: Vec::new(),
            shipped: Vec::new(),
        });
    }
    // Every branch is chosen before anything is written, so that a name no repository
    // accepts fails before any host repository has been touched.
    let mut plan: Vec<(Option<String>, HostRepo, String)> = Vec::new();
    if let Some(repo) = root {
        let branch = agentbox_git::pick_branch(&repo, new.name).map_err(BoxError::Seed)?;
        plan.push((None, repo, branch));
    }
    for (sub, repo) in subs {
        let branch = agentbox_git::pick_branch(&repo, &format!("{}--{sub}", new.name))
            .map_err(BoxError::Seed)?;
        plan.push((Some(sub), repo, branch));
    }
    // The home's ledger names the repositories before any ref is written in them, so that
    // `prune` knows where to look after a crash.
    let roots: Vec<&Path> = plan.iter().map(|(_, r, _)| r.root.as_path()).collect();
    agentbox_boxes::records::registry::note_pins(home, new.name, &roots)?;
    let mut seeded = Seeded {
        dir,
        tar,
        repos: Vec::new(),
        shipped: Vec::new(),
    };
    let result = assemble(src, new, &plan, &mut seeded);
    if let Err(e) = result {
        seeded.undo();
        return Err(e);
    }
    Ok(seeded)
}

/// Ship every repository of `plan` into the workspace below `seeded`'s directory, copy the
/// rest of a root that is no repository, and pack it all.
fn assemble(
    src: &Path,
    new: &NewBox<'_>,
    plan: &[(Option<String>, HostRepo, String)],
    seeded: &mut Seeded,
) -> Result<()> {
    let base = seeded.dir.path().to_owned();
    let ws = base.join("workspace");
    let subs: Vec<String> = plan.iter().filter_map(|(s, _, _)| s.clone()).collect();
    if plan.first().is_some_and(|(sub, _, _)| sub.is_some()) {
        // No repository at the root: its files as they are, the sub-repositories' apart.
        let mut tree = scan_tree(src)?;
        tree.entries.retain(|rel, _| {
            let first = rel.components().next();
            !first.is_some_and(|c| subs.iter().any(|s| c.as_os_str() == s.as_str()))
        });
        copy_tree(&tree, &ws, &CopyOpts::default())?;
    } else {
        fs_err::create_dir(&ws)?;
    }
    for (i, (sub, repo, branch)) in plan.iter().enumerate() {
        let mut seed = new.seed.clone();
        if sub.is_none() {
            seed.exclude = subs.clone();
        }
        let opts = ShipOpts {
            branch: branch.clone(),
            seed,
            depth: Depth::Adaptive,
            stage: base.join(format!("stage-{i}")),
            owner: (0, 0),
        };
        let shipment = agentbox_git::ship(repo, new.name, &opts).map_err(BoxError::Seed)?;
        let dst = match sub {
            None => ws.clone(),
            Some(s) => ws.join(s),
        };
        seeded.shipped.push((repo.clone(), shipment.clone()));
        fs_err::create_dir_all(&dst)?;
        carry_out(&shipment.steps(&dst.to_string_lossy()))?;
        fs_err::remove_dir_all(&opts.stage)?;
        seeded.repos.push(SeededRepo {
            record: GitRecord {
                sub: sub.clone(),
                repo: repo.root.clone(),
                objects: repo.objects.clone(),
                box_objects: record::box_objects(sub.as_deref()),
                branch: shipment.seeded.branch.clone(),
                base: shipment.seeded.base.clone(),
                source_branch: shipment.seeded.source_branch.clone(),
            },
            seeded: shipment.seeded.clone(),
        });
    }
    pack(&ws, &seeded.tar)
}

/// Carry out a shipment's steps on the host (the "box" being a host directory).
fn carry_out(steps: &[BoxStep]) -> Result<()> {
    let skipped = agentbox_git::run_steps(steps, |step| -> Result<()> {
        match step {
            BoxStep::Extract { tar, into } => {
                let mut archive = tar::Archive::new(fs_err::File::open(tar)?);
                archive.set_preserve_permissions(true);
                archive.set_preserve_mtime(true);
                archive.unpack(into).map_err(|e| {
                    BoxError::from(std::io::Error::new(
                        e.kind(),
                        format!("unpacking {} into {into}: {e}", tar.display()),
                    ))
                })
            }
            BoxStep::Run { argv } | BoxStep::Try { argv, .. } => {
                let (program, args) = argv
                    .split_first()
                    .ok_or_else(|| crate::errors::failed("an empty seeding step".into()))?;
                let out = std::process::Command::new(program)
                    .args(args)
                    .stdin(std::process::Stdio::null())
                    .output()?;
                if out.status.success() {
                    Ok(())
                } else {
                    Err(crate::errors::failed(format!(
                        "seeding the workspace: {} failed: {}",
                        agentbox_boxes::types::render_command(argv),
                        String::from_utf8_lossy(&out.stderr).trim()
                    )))
                }
            }
            BoxStep::Remove { path } => match fs_err::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
                _ => Ok(()),
            },
        }
    })?;
    // A full shipment has no step that may fail on its own.
    match skipped.into_iter().next() {
        Some(s) => Err(s.error),
        None => Ok(()),
    }
}

/// Pack directory `dir` into the tar file `tar` as `workspace/…` (see the module's
/// documentation).
pub fn pack(dir: &Path, tar: &Path) -> Result<()> {
    let mut b = tar::Builder::new(std::io::BufWriter::new(fs_err::File::create(tar)?));
    b.follow_symlinks(false);
    for entry in walkdir::WalkDir::new(dir)
        .follow_links(false)
        .sort_by_file_name()
    {
        let entry = entry.map_err(|e| {
            let path = e.path().map(Path::to_path_buf).unwrap_or_default();
            std::io::Error::other(format!("{}: {e}", path.display()))
        })?;
        let rel = entry
            .path()
            .strip_prefix(dir)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let name = Path::new("workspace").join(rel);
        let md = fs_err::symlink_metadata(entry.path())?;
        let ft = md.file_type();
        if !(ft.is_dir() || ft.is_file() || ft.is_symlink()) {
            continue;
        }
        let mut h = tar::Header::new_gnu();
        h.set_metadata_in_mode(&md, tar::HeaderMode::Complete);
        h.set_uid(0);
        h.set_gid(0);
        let _ = h.set_username("root");
        let _ = h.set_groupname("root");
        if ft.is_symlink() {
            h.set_size(0);
            b.append_link(&mut h, &name, fs_err::read_link(entry.path())?)?;
        } else if ft.is_dir() {
            h.set_size(0);
            b.append_data(&mut h, &name, std::io::empty())?;
        } else {
            b.append_data(&mut h, &name, fs_err::File::open(entry.path())?)?;
        }
    }
    b.into_inner()?.into_inner().map_err(|e| e.into_error())?;
    Ok(())
}
