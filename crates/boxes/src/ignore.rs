//! The paths whose changes never make a node: glob patterns (`**/` for any depth) over
//! paths relative to the box root.

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// Paths, relative to the watched root, whose changes never trigger a capture.
///
/// Pattern syntax (patterns are matched component by component against the relative path):
///
/// * `tmp`, `/tmp`, `root/.cache` — anchored at the root: the directory (or file) of that
///   path and everything below it. A leading `/` is optional.
/// * `*` and `?` inside a component are globs within that component: `*` matches any run of
///   bytes (leading dots included), `?` exactly one byte. `home/*/.cache` ignores every
///   user's cache. There are no character classes; `[` is literal.
/// * `**` as a whole component matches any number of components, zero included:
///   `**/node_modules/.cache` ignores `node_modules/.cache` at any depth, `a/**/b` ignores
///   `a/b`, `a/x/b`, `a/x/y/b`. A trailing `/**` adds nothing (a match already covers
///   everything below).
/// * A pattern without `/` that contains a glob, such as `*.log`, is a name glob at any
///   depth (it means `**/*.log`); a directory it matches is ignored with its contents.
///
/// Empty components and `.` components are dropped (`./tmp//x/` is `tmp/x`), so are
/// patterns that end up empty (`""`, `/`). The root itself is never ignored.
#[derive(Debug, Clone, Default)]
pub struct IgnoreSet {
    pub(crate) patterns: Vec<Vec<Part>>,
}

/// One component of a compiled pattern.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Part {
    /// `**`: any number of components.
    AnyDepth,
    /// A component without globs, compared byte for byte.
    Literal(Vec<u8>),
    /// A component with `*` or `?`.
    Glob(Vec<u8>),
}

pub(crate) fn has_glob(component: &str) -> bool {
    component.contains(['*', '?'])
}

/// Compiles one pattern; `None` when it is empty.
pub(crate) fn compile(pattern: &str) -> Option<Vec<Part>> {
    let components: Vec<&str> = pattern
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let mut parts = Vec::with_capacity(components.len() + 1);
    if let [only] = components.as_slice() {
        if !pattern.contains('/') && has_glob(only) {
            parts.push(Part::AnyDepth);
        }
    }
    for c in components {
        let part = if c == "**" {
            Part::AnyDepth
        } else if has_glob(c) {
            Part::Glob(c.as_bytes().to_vec())
        } else {
            Part::Literal(c.as_bytes().to_vec())
        };
        if part == Part::AnyDepth && parts.last() == Some(&Part::AnyDepth) {
            continue;
        }
        parts.push(part);
    }
    // A trailing `**` matches zero components, so it never changes the result.
    while parts.len() > 1 && parts.last() == Some(&Part::AnyDepth) {
        parts.pop();
    }
    (!parts.is_empty()).then_some(parts)
}

/// True when `parts` matches a prefix (one or more leading components) of `components`.
pub(crate) fn matches_prefix(parts: &[Part], components: &[&[u8]]) -> bool {
    match parts.split_first() {
        None => true,
        Some((Part::AnyDepth, rest)) => {
            (0..=components.len()).any(|skip| matches_prefix(rest, &components[skip..]))
        }
        Some((part, rest)) => match components.split_first() {
            None => false,
            Some((c, tail)) => {
                let ok = match part {
                    Part::Literal(lit) => lit.as_slice() == *c,
                    Part::Glob(glob) => agentbox_core::glob::matches(glob, c),
                    Part::AnyDepth => true,
                };
                ok && matches_prefix(rest, tail)
            }
        },
    }
}

impl IgnoreSet {
    /// Compiles `patterns` (syntax in the type's documentation). Never fails: every string is
    /// a valid pattern; empty ones are dropped.
    pub fn new(patterns: &[String]) -> IgnoreSet {
        IgnoreSet {
            patterns: patterns.iter().filter_map(|p| compile(p)).collect(),
        }
    }

    /// Whether the set has no pattern (it ignores nothing).
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// An ignore set that ignores nothing.
    pub fn none() -> IgnoreSet {
        IgnoreSet::default()
    }

    /// Whether changes at `rel` (a path relative to the watched root; a leading `/` or `./`
    /// is tolerated) are ignored. The root (an empty path) never is.
    pub fn is_ignored(&self, rel: &Path) -> bool {
        if self.patterns.is_empty() {
            return false;
        }
        let components: Vec<&[u8]> = rel
            .components()
            .filter_map(|c| match c {
                Component::Normal(name) => Some(name.as_bytes()),
                _ => None,
            })
            .collect();
        if components.is_empty() {
            return false;
        }
        self.patterns
            .iter()
            .any(|parts| matches_prefix(parts, &components))
    }

    /// What a box changes constantly without it being worth a snapshot: temp directories,
    /// system caches and logs, per-user caches, Python bytecode and test caches, bundler
    /// caches.
    pub fn default_patterns() -> Vec<String> {
        [
            "tmp",
            "var/tmp",
            "var/cache",
            "var/log",
            "root/.cache",
            "home/*/.cache",
            "**/__pycache__",
            "**/node_modules/.cache",
            "**/.pytest_cache",
            "**/.bash_history",
            "**/.python_history",
            "**/.lesshst",
            "**/.viminfo",
            // `git status` rewrites the index to refresh its stat data: alone, that is no
            // change of the project (the index is still captured with the next node).
            "**/.git/index",
        ]
        .iter()
        .map(|p| (*p).to_owned())
        .collect()
    }
}
