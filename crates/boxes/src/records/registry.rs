//! The box registry: identity, numbering and lookup of boxes.
//!
//! There is no single registry file to lose or corrupt: each box's record is its own
//! `boxes/<name>/box.json`, written atomically once the box exists (see [`super::record`]),
//! so parallel creates and destroys never overwrite each other's records. What boxes share
//! is the per-project counter that numbers them:
//!
//! ```text
//! <home>/projects/<key>/index.json   {"root": "/abs/project", "next": 4}
//! <home>/projects/<key>/index.lock   flock held while the counter moves
//! <home>/projects/none/…             the same, for boxes made without a project
//! ```
//!
//! Numbers are allocated under the lock and the counter is written (atomically) before the
//! number is handed out, so a number is never given twice — not even after its box was
//! destroyed or its create failed half-way.
//!
//! A box is referred to by (first match wins): its name; its id; its number within the
//! current project; its display name; a unique prefix of its id (at least
//! [`agentbox_core::id::MIN_PREFIX`] hex digits). More than one match at the same step is an
//! error listing the candidates. Names always contain a non-hex character and display names
//! may not be all digits, so these forms cannot shadow each other.

use std::path::{Path, PathBuf};

use agentbox_core::atomic::{read_json_opt, write_json};
use agentbox_core::home::Home;
use agentbox_core::lock::{FileLock, Mode};
use serde::{Deserialize, Serialize};

use crate::records::record::{self, BoxDirs, BoxRecord};
use crate::{BoxError, Result};

#[derive(Debug, Serialize, Deserialize)]
struct Counter {
    root: Option<PathBuf>,
    next: u64,
}

fn index_dir(home: &Home, project: Option<&Path>) -> PathBuf {
    match project {
        Some(root) => home.project_dir(root),
        None => home.root().join("projects").join("none"),
    }
}

/// The process's current directory. When it no longer exists — a checkout replaced the
/// directory under a shell that was inside it — the error says so and how to fix it,
/// rather than a bare "No such file or directory".
pub fn current_dir() -> Result<PathBuf> {
    std::env::current_dir().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            BoxError::StaleCurrentDir {
                shell_pwd: std::env::var_os("PWD").map(PathBuf::from),
            }
        } else {
            BoxError::Io(e)
        }
    })
}

/// Run `change` on `project`'s counter under its lock, then write it (atomically).
fn with_counter<T>(
    home: &Home,
    project: Option<&Path>,
    doing: &str,
    change: impl FnOnce(&mut Counter) -> T,
) -> Result<T> {
    let dir = index_dir(home, project);
    fs_err::create_dir_all(&dir)?;
    let _lock = FileLock::acquire(
        &dir.join("index.lock"),
        Mode::Exclusive,
        "the project's box numbers",
        doing,
    )?;
    let path = dir.join("index.json");
    let mut counter = read_json_opt::<Counter>(&path)?.unwrap_or(Counter {
        root: project.map(Path::to_path_buf),
        next: 1,
    });
    // Boxes numbered by an older counter that was lost still keep their numbers.
    let highest = record::list(home)?
        .iter()
        .filter(|r| r.project.as_deref() == project)
        .map(|r| r.index)
        .max()
        .unwrap_or(0);
    counter.next = counter.next.max(highest + 1);
    let out = change(&mut counter);
    write_json(&path, &counter)?;
    Ok(out)
}

/// The next number of a box of `project` (starting at 1), never handed out before.
pub fn allocate_index(home: &Home, project: Option<&Path>) -> Result<u64> {
    with_counter(home, project, "number a new box", |c| {
        let n = c.next;
        c.next = n + 1;
        n
    })
}

/// Make sure `project` is known to the home (its state directory names its root), e.g.
/// before its configuration file is written.
pub fn remember_project(home: &Home, project: &Path) -> Result<()> {
    with_counter(home, Some(project), "record the project", |_| ())
}

/// A project the home knows: it numbered a box, or has a configuration file.
#[derive(Debug, Clone, Serialize)]
pub struct ProjectInfo {
    pub root: PathBuf,
    /// Its state directory's name (see [`Home::project_dir`]).
    pub key: String,
    /// Boxes of it that exist.
    pub boxes: usize,
    /// The number its next box gets.
    pub next_index: u64,
    /// Its configuration file, when it has one.
    pub config: Option<PathBuf>,
}

/// Every project the home knows, by root.
pub fn projects(home: &Home) -> Result<Vec<ProjectInfo>> {
    let boxes = record::list(home)?;
    let Ok(entries) = fs_err::read_dir(home.root().join("projects")) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Some(counter) = read_json_opt::<Counter>(&e.path().join("index.json"))? else {
            continue;
        };
        let Some(root) = counter.root else {
            continue;
        };
        let config = e.path().join("config.yaml");
        out.push(ProjectInfo {
            key: e.file_name().to_string_lossy().into_owned(),
            boxes: boxes
                .iter()
                .filter(|b| b.project.as_deref() == Some(root.as_path()))
                .count(),
            next_index: counter.next,
            config: config.exists().then_some(config),
            root,
        });
    }
    out.sort_by(|a, b| a.root.cmp(&b.root));
    Ok(out)
}

/// Change box `name`'s record under its record lock (a read-modify-write that concurrent
/// updates cannot interleave with); the updated record is written atomically.
pub fn update(home: &Home, name: &str, change: impl FnOnce(&mut BoxRecord)) -> Result<BoxRecord> {
    let dirs = BoxDirs::new(home, name);
    let _lock = FileLock::acquire(
        &dirs.dir.join("record.lock"),
        Mode::Exclusive,
        &format!("box {name:?}"),
        "update its record",
    )?;
    let mut rec = record::read(home, name)?;
    change(&mut rec);
    record::write(home, &rec)?;
    Ok(rec)
}

/// The project the current directory `cwd` belongs to, for box lookup: the deepest project
/// root of a box in `boxes` that contains `cwd`, else the project found from `cwd` itself.
fn project_of(boxes: &[BoxRecord], cwd: &Path) -> Option<PathBuf> {
    let cwd = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    let deepest = boxes
        .iter()
        .filter_map(|r| r.project.as_ref())
        .filter(|p| cwd.starts_with(p))
        .max_by_key(|p| p.components().count())
        .cloned();
    deepest.or_else(|| crate::project::find_root(&cwd))
}

/// [`project_of`] the home's boxes.
pub fn current_project(home: &Home, cwd: &Path) -> Result<Option<PathBuf>> {
    Ok(project_of(&record::list(home)?, cwd))
}

/// How a candidate is shown in an ambiguity error.
fn describe(r: &BoxRecord) -> String {
    let mut s = format!("{} (id {}", r.name, &r.id[..8.min(r.id.len())]);
    if let Some(d) = &r.display_name {
        s.push_str(&format!(", shown as {d:?}"));
    }
    s.push(')');
    s
}

fn one(reference: &str, mut found: Vec<BoxRecord>) -> Result<Option<BoxRecord>> {
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(BoxError::Ambiguous {
            reference: reference.to_owned(),
            candidates: found.iter().map(describe).collect(),
        }),
    }
}

/// The box `reference` names, seen from the current directory `cwd` (numbers refer to the
/// boxes of its project).
pub fn resolve(home: &Home, reference: &str, cwd: &Path) -> Result<BoxRecord> {
    // A box's name is the common case, and its record is found without reading the others
    // (this is on the path of every `exec`).
    if agentbox_store::names::validate_env("box", reference).is_ok() {
        if let Ok(rec) = record::read(home, reference) {
            return Ok(rec);
        }
    }
    let all = record::list(home)?;
    let pick = |f: &dyn Fn(&BoxRecord) -> bool| -> Vec<BoxRecord> {
        all.iter().filter(|r| f(r)).cloned().collect()
    };
    if let Some(r) = one(reference, pick(&|r| r.id == reference))? {
        return Ok(r);
    }
    if let Ok(n) = reference.parse::<u64>() {
        let here = project_of(&all, cwd);
        if let Some(r) = one(reference, pick(&|r| r.index == n && r.project == here))? {
            return Ok(r);
        }
    }
    if let Some(r) = one(
        reference,
        pick(&|r| r.display_name.as_deref() == Some(reference)),
    )? {
        return Ok(r);
    }
    if reference.len() >= agentbox_core::id::MIN_PREFIX && agentbox_core::id::is_hex(reference) {
        if let Some(r) = one(reference, pick(&|r| r.id.starts_with(reference)))? {
            return Ok(r);
        }
    }
    Err(BoxError::NoSuchBox {
        name: reference.to_owned(),
    })
}

/// The box a command means when it names none: the only box of the project of `cwd`.
pub fn implicit(home: &Home, cwd: &Path) -> Result<BoxRecord> {
    let all = record::list(home)?;
    let here = project_of(&all, cwd);
    let mut boxes: Vec<BoxRecord> = all.into_iter().filter(|r| r.project == here).collect();
    boxes.sort_by_key(|r| r.index);
    match boxes.len() {
        1 => Ok(boxes.pop().expect("one element")),
        _ => Err(BoxError::WhichBox {
            project: here,
            candidates: boxes.iter().map(describe).collect(),
        }),
    }
}

/// Check a display name: not empty after trimming, not all digits (numbers refer to boxes by
/// index), and not the name or id of another box.
pub fn check_display_name(home: &Home, name: &str, display: &str) -> Result<()> {
    let bad = |why: &str| BoxError::BadDisplayName {
        display: display.to_owned(),
        why: why.to_owned(),
    };
    if display.trim().is_empty() || display.trim() != display {
        return Err(bad("it is empty or starts or ends with spaces"));
    }
    if display.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("numbers refer to boxes by their index"));
    }
    for r in record::list(home)? {
        if r.name != name && (r.name == display || r.id == display) {
            return Err(bad(&format!("it is the name or id of box {:?}", r.name)));
        }
    }
    Ok(())
}

/// Check the name of a new box: valid (see [`agentbox_store::names::validate_env`]) and,
/// when all hex, not a prefix of another box's id or of a node's id in the home's store —
/// names are looked up before id prefixes, so it would take that prefix from its owner.
pub fn check_new_name(home: &Home, name: &str) -> Result<agentbox_core::name::BoxName> {
    use agentbox_store::names;
    let checked = agentbox_core::name::BoxName::new(name)?;
    if !agentbox_core::id::is_hex(name) {
        return Ok(checked);
    }
    names::check_not_id_prefix("box", name, record::list(home)?.iter().map(|r| &r.id))?;
    // A home without a store has no nodes yet.
    if let Ok(store) = agentbox_store::Store::open_unreconciled(&home.store_dir()) {
        store.check_not_id_prefix("box", name)?;
    }
    Ok(checked)
}

/// A free box name for a new box of `project`: `<project dir name>-<index>` (the directory
/// name reduced to name characters), with a suffix if another project already took it.
pub fn default_name(home: &Home, project: Option<&Path>, index: u64) -> String {
    let stem: String = project
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "box".to_owned())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let stem = stem.trim_matches(|c| c == '-' || c == '.').to_owned();
    let stem = if stem.is_empty() {
        "box".to_owned()
    } else {
        stem
    };
    let base = format!("{stem}-{index}");
    let taken = |n: &str| BoxDirs::new(home, n).dir.exists();
    if !taken(&base) {
        return base;
    }
    (2..)
        .map(|k| format!("{base}-{k}"))
        .find(|n| !taken(n))
        .expect("an unbounded search finds a free name")
}

/// A host repository in which box `box_name` keeps refs (`refs/agentbox/<box>/…`).
///
/// The home keeps a ledger of them (`<home>/pins.json`, a JSON list, rewritten atomically
/// under `<home>/pins.lock`), written *before* a create touches a repository: `prune` then
/// removes exactly the refs this home's boxes left behind, never those of boxes of another
/// agentbox home that uses the same repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    #[serde(rename = "box")]
    pub box_name: String,
    pub repo: PathBuf,
}

fn with_pins<T>(home: &Home, change: impl FnOnce(&mut Vec<Pin>) -> T) -> Result<T> {
    fs_err::create_dir_all(home.root())?;
    let _lock = FileLock::acquire(
        &home.root().join("pins.lock"),
        Mode::Exclusive,
        "the ledger of box refs",
        "update it",
    )?;
    let path = home.root().join("pins.json");
    let mut pins: Vec<Pin> = read_json_opt(&path)?.unwrap_or_default();
    let before = pins.clone();
    let out = change(&mut pins);
    if pins != before {
        write_json(&path, &pins)?;
    }
    Ok(out)
}

/// Record that box `name` is about to keep refs in `repos`.
pub fn note_pins(home: &Home, name: &str, repos: &[&Path]) -> Result<()> {
    with_pins(home, |pins| {
        for repo in repos {
            let pin = Pin {
                box_name: name.to_owned(),
                repo: repo.to_path_buf(),
            };
            if !pins.contains(&pin) {
                pins.push(pin);
            }
        }
    })
}

/// Forget box `name`'s entries (its refs are gone).
pub fn forget_pins(home: &Home, name: &str) -> Result<()> {
    with_pins(home, |pins| pins.retain(|p| p.box_name != name))
}

/// Forget one entry (its refs are gone).
pub fn forget_pin(home: &Home, name: &str, repo: &Path) -> Result<()> {
    with_pins(home, |pins| {
        pins.retain(|p| !(p.box_name == name && p.repo == repo))
    })
}

/// Every entry of the ledger.
pub fn pins(home: &Home) -> Result<Vec<Pin>> {
    with_pins(home, |pins| pins.clone())
}
