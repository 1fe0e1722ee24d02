//! Box records and the per-box directory.
//!
//! On disk (`<home>/boxes/<name>/`):
//! * `box.json` — the [`BoxRecord`] (written atomically; the box exists once it is there);
//! * `sock` — the supervisor's socket (present while it runs);
//! * `supervisor.json` — the running supervisor's PID, for `stop` and recovery;
//! * `supervisor.log` — what the supervisor and the box's PID 1 printed;
//! * `pasta.log` — what a private network's `pasta` printed;
//! * `logs/<id>.log` — output of spawned processes;
//! * `tournament.log` — a tournament candidate's commands and what they printed;
//! * `scratch/` — empty; PID 1 mounts its private tmpfs there (in its own namespace).
//!
//! The box's filesystem history is the store environment of the same name.

use std::path::{Path, PathBuf};

use agentbox_core::atomic::{read_json_opt, write_json};
use agentbox_core::home::Home;
use agentbox_sandbox::net::Publish;
use agentbox_sandbox::proto::Network;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::cgroup::Limits;
use crate::records::ignore::IgnoreSet;
use crate::{BoxError, Result};

/// Where the project copy lives inside a box, and where commands start.
pub const WORKSPACE: &str = "/workspace";

/// Where every box sees the agentbox binary (bound read-only from the host), which the host
/// runs inside the box for work on box-controlled data.
pub const BOX_BINARY: &str = "/run/agentbox/bin/agentbox";
/// The same binary as git's remote helper for `agentbox::REMOTE` URLs, on the box's `PATH`.
pub const REMOTE_HELPER: &str = "/run/agentbox/bin/git-remote-agentbox";
/// Where every box sees the shared libraries of the agentbox binary and its loader (as
/// `ld.so`), bound read-only from the host: a box on an image may have other libraries,
/// or none.
pub const BOX_LIB_DIR: &str = "/run/agentbox/lib";

/// The host files the agentbox binary needs to run inside any box: its program loader and
/// shared libraries, with the names they get in [`BOX_LIB_DIR`] (`None`: the binary is
/// not dynamically linked, or `ldd` cannot tell). Read once per process.
pub fn box_binary_libs() -> Option<&'static [(PathBuf, String)]> {
    static LIBS: std::sync::OnceLock<Option<Vec<(PathBuf, String)>>> = std::sync::OnceLock::new();
    LIBS.get_or_init(|| {
        let exe = std::env::current_exe().ok()?;
        let out = std::process::Command::new("ldd").arg(&exe).output().ok()?;
        if !out.status.success() {
            return None;
        }
        let mut libs = Vec::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let line = line.trim();
            // `name => /path (0x…)`, or the loader as `/path (0x…)`; the vDSO has no file.
            let path = match line.split_once(" => ") {
                Some((_, rest)) => rest.split_whitespace().next(),
                None => line
                    .split_whitespace()
                    .next()
                    .filter(|p| p.starts_with('/')),
            };
            let Some(path) = path.filter(|p| p.starts_with('/')) else {
                continue;
            };
            let path = PathBuf::from(path);
            let is_loader = !line.contains(" => ");
            let name = if is_loader {
                "ld.so".to_owned()
            } else {
                path.file_name()?.to_string_lossy().into_owned()
            };
            libs.push((path, name));
        }
        libs.iter().any(|(_, n)| n == "ld.so").then_some(libs)
    })
    .as_deref()
}

/// How the host runs the agentbox binary inside a box: through the bound loader and
/// libraries when there are any (so it runs on any base), else directly.
pub fn box_binary_argv() -> Vec<String> {
    match box_binary_libs() {
        Some(_) => vec![
            format!("{BOX_LIB_DIR}/ld.so"),
            "--library-path".to_owned(),
            BOX_LIB_DIR.to_owned(),
            BOX_BINARY.to_owned(),
        ],
        None => vec![BOX_BINARY.to_owned()],
    }
}
/// The in-box socket's file name.
pub const INBOX_SOCKET: &str = "sock";

/// Environment variables passed from the caller into a box by default.
pub const ENV_ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "TERM",
    "LANG",
    "USER",
    "LOGNAME",
    "SHELL",
    "TZ",
    "COLORTERM",
];

/// A box's record (`box.json`). Written once at creation; afterwards only through
/// [`crate::records::registry::update`] (a locked read-modify-write), never by the supervisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxRecord {
    /// Random id ([`agentbox_core::id::new_id`]); never reused. Records written before
    /// ids existed get a stable one derived from name and creation time when read.
    #[serde(default)]
    pub id: agentbox_core::id::BoxId,
    /// Unique in the home; names the store environment, the branch and the directory.
    pub name: agentbox_core::name::BoxName,
    /// A cosmetic label (`agentbox rename`); resolves the box too, after name and id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// What runs the box (`local`: namespaces on this machine).
    #[serde(default = "local_provider")]
    pub provider: String,
    /// The project root the box was made from (canonical), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<PathBuf>,
    /// Number of the box within its project (or among boxes without a project): monotonic,
    /// never reused (see [`crate::records::registry::allocate_index`]). 0 for boxes made before
    /// numbering existed.
    #[serde(default)]
    pub index: u64,
    /// The agent (`claude`, `codex`, `opencode`) last started in the box.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_agent: Option<String>,
    /// Agents whose configuration the box keeps its own copy of, in its home
    /// (`--isolate-config`; the others use the home's shared copy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub isolated_config: Vec<String>,
    pub created: DateTime<Utc>,
    /// The directory the box's workspace was copied from, if any (hidden inside the box).
    pub source: Option<PathBuf>,
    pub network: Network,
    /// Host TCP ports forwarded into the box (a private network only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub publish: Vec<Publish>,
    /// The host repositories the box's workspace was seeded from (see `agentbox_git` and
    /// [`crate::lifecycle::seeding`]): the project root's first when it is one, then first-level
    /// sub-repositories by name. Written as `"repos": [GitRecord, …]`; a record of an older
    /// version holding one `"git": GitRecord` reads as a list of one.
    #[serde(
        default,
        alias = "git",
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub repos: Vec<GitRecord>,
    /// Made by a normal user: runs in a user namespace (see `BoxSpec::rootless`).
    #[serde(default)]
    pub rootless: bool,
    /// The base image; `None` for the host's own `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Auto-capture: a node after every command that changed something.
    pub capture: bool,
    /// Extra environment variables set in every command (`KEY=VALUE`).
    #[serde(default)]
    pub env: Vec<String>,
    /// Paths (relative to the box root) whose changes alone never make a node.
    #[serde(default)]
    pub ignore: Vec<String>,
    /// `box.hostPaths`: host paths shown in (`/PATH`) or hidden from (`!/PATH`) the box,
    /// besides the default (see [`crate::hostview`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_paths: Vec<String>,
    /// `box.homeTools`: paths below the host user's home shown in the box besides the
    /// default toolchains and caches (`PATH`), or defaults left out (`!PATH`) (see
    /// [`crate::hostview`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub home_tools: Vec<String>,
    /// Resource limits (memory, processes, CPU) of the box's cgroup.
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub limits: Limits,
    /// Retention after automatic nodes: the newest this many nodes stay (default
    /// [`DEFAULT_KEEP`](crate::config::keys::DEFAULT_KEEP)); older ones are thinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<u64>,
    /// The checkpoint the box was made from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// The checkpoints the box's tree descends from, nearest first: a box made from
    /// checkpoint X has X followed by X's lineage. Capturing the box does not deepen it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lineage: Vec<String>,
    /// Paths (from `/workspace`) where the host's carried-over work met what the checkpoint
    /// held, and the checkpoint's version was kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resync_conflicts: Vec<String>,
    /// Every start of the box starts its credential broker too, with the credentials of
    /// the command that started it (see [`crate::agents::broker`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub broker: bool,
    /// Where a provider that runs boxes elsewhere runs this one, as the user named it
    /// (the Docker provider: `--docker-host`, a URL or a `docker.hosts` name; `None`: its
    /// default, resolved when the box is used). Never set for a local box.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
}

/// One repository of a box: where it comes from on the host, and where the box has it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GitRecord {
    /// The first-level sub-directory this repository is (`/workspace/<sub>` in the box);
    /// `None` for the project root (`/workspace`).
    #[serde(default)]
    pub sub: Option<String>,
    /// The host repository's working tree.
    pub repo: PathBuf,
    /// The host's object directory (the common one, for a linked worktree), shared
    /// read-only with the box at [`GitRecord::box_objects`].
    pub objects: PathBuf,
    /// Where the box sees `objects` (its repository's `objects/info/alternates` names it).
    #[serde(default = "root_objects")]
    pub box_objects: PathBuf,
    /// The box's branch (also a branch of the host repository).
    pub branch: String,
    /// The commit the box started from (pinned in the host as `refs/agentbox/<box>/base`).
    pub base: String,
    /// The host's branch the box was made from (`None`: a detached HEAD); `agentbox pull`
    /// merges its upstream by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_branch: Option<String>,
}

impl GitRecord {
    /// The repository's working tree inside the box.
    pub fn workspace(&self) -> PathBuf {
        match &self.sub {
            None => PathBuf::from(WORKSPACE),
            Some(s) => Path::new(WORKSPACE).join(s),
        }
    }

    /// How the repository is named to the user: `.` for the project root, else its
    /// sub-directory.
    pub fn label(&self) -> &str {
        self.sub.as_deref().unwrap_or(".")
    }

    pub fn host(&self) -> agentbox_git::HostRepo {
        agentbox_git::HostRepo {
            root: self.repo.clone(),
            objects: self.objects.clone(),
        }
    }
}

/// Where a box sees the project root repository's objects (read-only).
pub const GIT_OBJECTS: &str = "/run/agentbox/git/objects";

/// Where a box sees the objects of a repository: [`GIT_OBJECTS`] for the project root,
/// `/run/agentbox/git/sub/<sub>/objects` for the sub-repository `<sub>`.
pub fn box_objects(sub: Option<&str>) -> PathBuf {
    match sub {
        None => PathBuf::from(GIT_OBJECTS),
        Some(s) => Path::new("/run/agentbox/git/sub").join(s).join("objects"),
    }
}

fn root_objects() -> PathBuf {
    PathBuf::from(GIT_OBJECTS)
}

/// `repos` as written now (a list), or as an older version wrote it (one record).
fn one_or_many<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<GitRecord>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        Many(Vec<GitRecord>),
        One(Option<GitRecord>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::Many(v) => v,
        OneOrMany::One(o) => o.into_iter().collect(),
    })
}

/// Paths of one box's directory.
#[derive(Debug, Clone)]
pub struct BoxDirs {
    pub dir: PathBuf,
}

impl BoxDirs {
    pub fn new(home: &Home, name: &str) -> BoxDirs {
        BoxDirs {
            dir: boxes_dir(home).join(name),
        }
    }
    pub fn record(&self) -> PathBuf {
        self.dir.join("box.json")
    }
    pub fn socket(&self) -> PathBuf {
        self.dir.join("sock")
    }
    pub fn supervisor(&self) -> PathBuf {
        self.dir.join("supervisor.json")
    }
    pub fn supervisor_log(&self) -> PathBuf {
        self.dir.join("supervisor.log")
    }
    /// What the private network's `pasta` said (rewritten at each start of the box).
    pub fn pasta_log(&self) -> PathBuf {
        self.dir.join("pasta.log")
    }
    pub fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }
    pub fn log(&self, id: u64) -> PathBuf {
        self.logs().join(format!("{id}.log"))
    }
    /// Directory holding the in-box socket (bound at [`INBOX_DIR`](crate::types::INBOX_DIR) inside the box).
    pub fn inbox(&self) -> PathBuf {
        self.dir.join("inbox")
    }
    pub fn scratch(&self) -> PathBuf {
        self.dir.join("scratch")
    }
    pub fn lock(&self) -> PathBuf {
        self.dir.join("lock")
    }
    /// Where output box processes write for the host (git bundles) is kept while the host
    /// reads it; like the whole box directory, never visible inside a box.
    pub fn from_box(&self) -> PathBuf {
        self.dir.join("from-box")
    }
}

/// Name of box `name`'s cgroup: unique per agentbox home, so boxes of the same name in two
/// homes never share one.
pub fn cgroup_name(home: &Home, name: &str) -> String {
    let h = blake3::hash(home.root().as_os_str().as_encoded_bytes());
    format!("{name}-{}", &h.to_hex()[..8])
}

pub fn boxes_dir(home: &Home) -> PathBuf {
    home.root().join("boxes")
}

/// `supervisor.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SupervisorInfo {
    pub pid: u32,
    pub started: DateTime<Utc>,
}

fn local_provider() -> String {
    LOCAL_PROVIDER.to_owned()
}

/// A record as read from disk, with what older versions did not write filled in.
fn complete(mut rec: BoxRecord) -> BoxRecord {
    if rec.id.is_empty() {
        let seed = format!("{}\0{}", rec.name, rec.created.to_rfc3339());
        rec.id = agentbox_core::id::BoxId::derived(&seed);
    }
    rec
}

pub fn read(home: &Home, name: &str) -> Result<BoxRecord> {
    let dirs = BoxDirs::new(home, name);
    read_json_opt(&dirs.record())?
        .map(complete)
        .ok_or_else(|| BoxError::NoSuchBox { name: name.into() })
}

pub fn write(home: &Home, rec: &BoxRecord) -> Result<()> {
    Ok(write_json(&BoxDirs::new(home, &rec.name).record(), rec)?)
}

impl BoxRecord {
    /// What of the record its box's view of the host depends on (see [`crate::hostview`]).
    pub fn host_inputs(&self) -> crate::hostview::BoxInputs<'_> {
        crate::hostview::BoxInputs {
            source: self.source.as_deref(),
            repos: self
                .repos
                .iter()
                .map(|r| (r.host().git_dir().to_owned(), r.repo.clone()))
                .collect(),
            home_tools: &self.home_tools,
            host_paths: &self.host_paths,
            rootless: self.rootless,
        }
    }
    /// What lists show: the display name, else the name.
    pub fn shown_name(&self) -> &str {
        self.display_name.as_deref().unwrap_or(&self.name)
    }
}

/// The provider of boxes run by this machine's kernel.
pub const LOCAL_PROVIDER: &str = "local";

/// Every box, by name.
pub fn list(home: &Home) -> Result<Vec<BoxRecord>> {
    let dir = boxes_dir(home);
    let mut out = Vec::new();
    let Ok(entries) = fs_err::read_dir(&dir) else {
        return Ok(out);
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(rec) = read_json_opt::<BoxRecord>(&BoxDirs::new(home, &name).record())? {
            out.push(complete(rec));
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The box's auto-capture ignore set: the defaults plus the box's own patterns.
pub fn ignore_set(rec: &BoxRecord) -> IgnoreSet {
    let mut patterns = IgnoreSet::default_patterns();
    patterns.extend(rec.ignore.iter().cloned());
    IgnoreSet::new(&patterns)
}

/// Changes that count for auto-capture: files and links not ignored, and directories not
/// ignored with no change below them (a directory copied up only because something below
/// it changed is not a change of its own).
///
/// Linear in the changes (times their depth): a box that made a hundred thousand
/// directories must not keep its supervisor busy for minutes.
pub fn counted_changes(ignore: &IgnoreSet, changed: &[(PathBuf, bool)]) -> Vec<PathBuf> {
    // Every directory strictly above a changed path.
    let above: std::collections::HashSet<&Path> = changed
        .iter()
        .flat_map(|(p, _)| p.ancestors().skip(1))
        .collect();
    let touched_below = |dir: &Path| above.contains(dir);
    let mut ignored = ignore.memo();
    changed
        .iter()
        .filter(|(p, _)| !ignored.is_ignored(p))
        .filter(|(p, is_dir)| !*is_dir || !touched_below(p))
        .map(|(p, _)| p.clone())
        .collect()
}

/// The caller's environment variables that pass into a box, plus `extra` (`KEY=VALUE`).
pub fn caller_env(extra: &[String]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| ENV_ALLOW.contains(&k.as_str()) || k.starts_with("LC_"))
        // The host's HOME is hidden in the box; the box has its own.
        .filter(|(k, _)| k != "HOME" && k != "USER" && k != "LOGNAME")
        .collect();
    for kv in extra {
        if let Some((k, v)) = kv.split_once('=') {
            env.push((k.to_owned(), v.to_owned()));
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_with_one_repository_reads_as_a_list() {
        let old = serde_json::json!({
            "name": "b", "created": "2024-01-01T00:00:00Z", "source": "/p",
            "network": "host", "capture": true,
            "git": {"repo": "/p", "objects": "/p/.git/objects", "branch": "agentbox/b", "base": "abc"}
        });
        let rec = complete(serde_json::from_value(old).expect("an older record reads"));
        assert_eq!(rec.repos.len(), 1);
        // Registry fields get stable values: the same id every time it is read.
        assert!(agentbox_core::id::is_full_id(&rec.id), "{}", rec.id);
        assert_eq!((rec.index, rec.provider.as_str()), (0, LOCAL_PROVIDER));
        assert_eq!(rec.repos[0].sub, None);
        assert_eq!(rec.repos[0].box_objects, PathBuf::from(GIT_OBJECTS));
        let written = serde_json::to_value(&rec).expect("serialises");
        assert!(written.get("git").is_none() && written["repos"].is_array());
        let again: BoxRecord = serde_json::from_value(written).expect("reads back");
        assert_eq!(again, rec);
        assert_eq!(
            box_objects(Some("api")),
            PathBuf::from("/run/agentbox/git/sub/api/objects")
        );
    }

    #[test]
    fn copied_up_parents_do_not_count() {
        let p = IgnoreSet::new(&IgnoreSet::default_patterns());
        let changed = vec![
            (PathBuf::from("var"), true),
            (PathBuf::from("var/cache"), true),
            (PathBuf::from("var/cache/apt"), true),
            (PathBuf::from("var/cache/apt/pkg"), false),
        ];
        assert!(counted_changes(&p, &changed).is_empty());
        let changed = vec![
            (PathBuf::from("workspace"), true),
            (PathBuf::from("workspace/new-dir"), true),
        ];
        assert_eq!(
            counted_changes(&p, &changed),
            vec![PathBuf::from("workspace/new-dir")]
        );
    }
}

/// One seeded repository: what the box record keeps, and what seeding found.
#[derive(Debug, Clone)]
pub struct SeededRepo {
    pub record: GitRecord,
    pub seeded: agentbox_git::Seeded,
}
