//! The paths whose changes never make a node: glob patterns (`**/` for any depth) over
//! paths relative to the box root.

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use agentbox_core::glob::PathPattern;

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
///
/// The patterns are [`agentbox_core::glob::PathPattern`]s (the project's one path matcher),
/// with one rule of their own: a path is ignored when the pattern matches it *or any
/// directory above it*, so a trailing `/**` adds nothing.
#[derive(Debug, Clone, Default)]
pub struct IgnoreSet {
    patterns: Vec<PathPattern>,
}

impl IgnoreSet {
    /// Compiles `patterns` (syntax in the type's documentation). Never fails: every string is
    /// a valid pattern; empty ones are dropped.
    pub fn new(patterns: &[String]) -> IgnoreSet {
        IgnoreSet {
            patterns: patterns
                .iter()
                .filter_map(|p| {
                    // `x/**` means "x and below" here, which is what `x` already means
                    // (`**` alone stays: it is everything).
                    let given = p;
                    let mut p = p.trim_end_matches('/');
                    while let Some(shorter) = p.strip_suffix("/**") {
                        p = shorter.trim_end_matches('/');
                    }
                    // `/**` is everything; an empty pattern is nothing (dropped).
                    PathPattern::new(if p.is_empty() && given.contains("**") {
                        "**"
                    } else {
                        p
                    })
                })
                .collect(),
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
        let components = names(rel);
        if components.is_empty() {
            return false;
        }
        self.patterns
            .iter()
            .any(|p| (1..=components.len()).any(|n| p.matches(&components[..n])))
    }

    /// Whether a pattern matches `rel` itself (not one of its directories).
    fn matches_whole(&self, rel: &Path) -> bool {
        let components = names(rel);
        !components.is_empty() && self.patterns.iter().any(|p| p.matches(&components))
    }

    /// [`IgnoreSet::is_ignored`] for many paths in the same directories (a check of what
    /// an install changed), remembering each directory's answer: a path is ignored when
    /// its directory is or a pattern matches it whole, so each path costs one match per
    /// pattern instead of one per pattern and depth.
    pub fn memo(&self) -> IgnoreMemo<'_> {
        IgnoreMemo {
            set: self,
            dirs: std::collections::HashMap::new(),
        }
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
            "**/.node_repl_history",
            "**/.wget-hsts",
            // What package managers write on every run, whatever the home they run in (the
            // host user's shown toolchains are at the host's paths): npm's debug logs and
            // update check, pip's log and version check, cargo's package lock and
            // last-use database, go's telemetry counters.
            "**/.npm/_logs",
            "**/.npm/_update-notifier-last-checked",
            "**/.pip/pip.log",
            "**/.cache/pip/selfcheck",
            "**/.cargo/.package-cache",
            "**/.cargo/.package-cache-mutate",
            "**/.cargo/.global-cache",
            // SQLite's side files of the last-use database (journal, WAL, shared memory).
            "**/.cargo/.global-cache-*",
            // The registry index's parsed-entry cache: cargo rewrites it while resolving,
            // also when nothing is installed (it is still captured with the next node).
            "**/.cargo/registry/index/*/.cache",
            // The same, where images put CARGO_HOME (the official rust images).
            "usr/local/cargo/.package-cache",
            "usr/local/cargo/.package-cache-mutate",
            "usr/local/cargo/.global-cache",
            "usr/local/cargo/.global-cache-*",
            "usr/local/cargo/registry/index/*/.cache",
            "**/.config/go/telemetry",
            // `git status` rewrites the index to refresh its stat data: alone, that is no
            // change of the project (the index is still captured with the next node).
            "**/.git/index",
        ]
        .iter()
        .map(|p| (*p).to_owned())
        .collect()
    }
}

/// The names along `rel` (a leading `/` or `./` and `..` left out), as patterns match them.
fn names(rel: &Path) -> Vec<&[u8]> {
    rel.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.as_bytes()),
            _ => None,
        })
        .collect()
}

/// See [`IgnoreSet::memo`].
pub struct IgnoreMemo<'a> {
    set: &'a IgnoreSet,
    dirs: std::collections::HashMap<std::path::PathBuf, bool>,
}

impl IgnoreMemo<'_> {
    /// The same answer as [`IgnoreSet::is_ignored`].
    pub fn is_ignored(&mut self, rel: &Path) -> bool {
        if self.set.patterns.is_empty() {
            return false;
        }
        if let Some(dir) = rel.parent().filter(|d| !d.as_os_str().is_empty()) {
            let ignored = match self.dirs.get(dir).copied() {
                Some(b) => b,
                None => {
                    let b = self.is_ignored(dir);
                    self.dirs.insert(dir.to_owned(), b);
                    b
                }
            };
            if ignored {
                return true;
            }
        }
        self.set.matches_whole(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::IgnoreSet;
    use std::path::Path;

    #[test]
    fn the_memo_answers_as_the_set_does() {
        let mut patterns = IgnoreSet::default_patterns();
        patterns.extend([
            "workspace/build/**".to_owned(),
            "*.log".to_owned(),
            "a?c".to_owned(),
        ]);
        let set = IgnoreSet::new(&patterns);
        let mut memo = set.memo();
        let names = [
            "workspace",
            "tmp",
            "node_modules",
            ".cache",
            "build",
            "abc",
            "x.log",
            "src",
            "__pycache__",
            "v",
        ];
        let mut paths = vec![std::path::PathBuf::new()];
        for _ in 0..4 {
            let next: Vec<_> = paths
                .iter()
                .flat_map(|p| names.iter().map(move |n| p.join(n)))
                .collect();
            paths.extend(next);
            paths.sort();
            paths.dedup();
        }
        assert!(paths.len() > 10_000);
        let ignored = paths.iter().filter(|p| set.is_ignored(p)).count();
        assert!(ignored > 0 && ignored < paths.len());
        for p in &paths {
            assert_eq!(memo.is_ignored(p), set.is_ignored(p), "{}", p.display());
        }
        assert!(!IgnoreSet::new(&[]).memo().is_ignored(Path::new("tmp/x")));
    }

    fn set(p: &[&str]) -> IgnoreSet {
        IgnoreSet::new(&p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn a_pattern_ignores_its_path_and_everything_below() {
        let s = set(&[
            "tmp",
            "/var/cache/",
            "home/*/.cache",
            "**/node_modules/.cache",
            "*.log",
            "a/**/b",
            "x/**",
        ]);
        let ig = |p: &str| s.is_ignored(Path::new(p));
        assert!(ig("tmp") && ig("tmp/a/b") && ig("/tmp/x") && ig("./tmp"));
        assert!(!ig("tmpx") && !ig("a/tmp"));
        assert!(ig("var/cache/apt/pkg") && !ig("var"));
        assert!(ig("home/u/.cache/x") && !ig("home/u/.config"));
        assert!(ig("node_modules/.cache/x") && ig("w/p/node_modules/.cache"));
        assert!(ig("a.log") && ig("var/log/a.log") && ig("d.log/inside"));
        assert!(ig("a/b") && ig("a/x/y/b/c") && !ig("a/x"));
        assert!(ig("x") && ig("x/y"), "a trailing /** adds nothing");
        assert!(!ig(""), "the root is never ignored");
        assert!(set(&["", "/"]).is_empty(), "empty patterns are dropped");
        assert!(set(&["/**"]).is_ignored(Path::new("any/thing")));
    }

    #[test]
    fn package_managers_logs_are_ignored_in_any_home() {
        let s = IgnoreSet::new(&IgnoreSet::default_patterns());
        for p in [
            "root/.npm/_logs/2024-01-01T00_00_00_000Z-debug-0.log",
            "home/alice/.npm/_logs/x.log",
            "srv/h/.npm/_logs/x.log",
            "root/.npm/_update-notifier-last-checked",
            "root/.cache/pip/selfcheck/abc.json",
            "srv/u/.cargo/.global-cache",
            "root/.cargo/.package-cache",
            "root/.cargo/.global-cache-journal",
            "home/dev/.cargo/.global-cache-wal",
            "root/.cargo/registry/index/index.crates.io-1949cf8c6b5b557f/.cache/se/rd/serde",
            "usr/local/cargo/.global-cache",
            "usr/local/cargo/.package-cache",
            "usr/local/cargo/registry/index/index.crates.io-1949cf8c6b5b557f/.cache/3/s/syn",
        ] {
            assert!(s.is_ignored(Path::new(p)), "{p}");
        }
        // The caches themselves are the box's warm state, and installs are changes.
        for p in [
            "srv/h/.npm/_cacache/index-v5/x",
            "root/.cargo/bin/cargo",
            "root/.cargo/registry/cache/index.crates.io-1949cf8c6b5b557f/serde-1.0.0.crate",
            "root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/serde-1.0.0/src/lib.rs",
            "usr/local/cargo/bin/cargo",
        ] {
            assert!(!s.is_ignored(Path::new(p)), "{p}");
        }
    }
}
