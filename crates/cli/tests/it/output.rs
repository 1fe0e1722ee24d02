//! One file (over 600 lines): one scenario and the snapshots of everything it prints; insta names the
//! snapshots after this module, so its tests and the scenario they share stay in one file.
//!
//! Snapshots of what the commands print, human tables and `--json` shapes alike, after a
//! realistic scenario run with the real binary: a change to any output is reviewed in the
//! diff of `tests/it/snapshots/`, not discovered by a user or a script.
//!
//! Values that differ between runs are replaced by insta filters before the comparison:
//! temporary paths (`[TMP]`), node, box and commit ids (a label per id, the same width as
//! the id where a table shows it, so columns stay aligned), spawned process ids, times,
//! pids, host uids, the project key and disk usage (`[size]`, `"[bytes]"`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{kill_supervisors, write, Env};
use agentbox_testkit::tier::require_root;

/// One run of the binary.
struct Ran {
    args: Vec<String>,
    stdout: String,
    stderr: String,
    code: Option<i32>,
}

impl Ran {
    /// What the snapshot holds: stdout, then stderr and the exit status when there are any.
    fn shown(&self) -> String {
        let mut s = self.stdout.clone();
        if !self.stderr.is_empty() {
            s.push_str("--- stderr ---\n");
            s.push_str(&self.stderr);
        }
        match self.code {
            Some(0) => {}
            Some(c) => s.push_str(&format!("--- exit status: {c} ---\n")),
            None => s.push_str("--- killed by a signal ---\n"),
        }
        s
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("{:?}: bad JSON {e}: {}", self.args, self.stdout))
    }
}

/// Escape `s` for use as a literal in a regular expression.
fn literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `label` padded with `_` to `width` characters (a table column keeps its width).
fn padded(label: &str, width: usize) -> String {
    format!("{label:_<width$}")
}

/// A scenario's agentbox home, the filters its snapshots are shown through, and the boxes
/// it started (their supervisors are killed when it ends).
struct Scene {
    env: Env,
    /// `(regex, replacement)`, applied in order.
    filters: Vec<(String, String)>,
    /// Spawned process ids already labelled.
    procs: usize,
}

impl Scene {
    fn new(test: &str) -> Option<Scene> {
        if !require_root(test) {
            return None;
        }
        let env = Env::new();
        let mut scene = Scene {
            env,
            filters: Vec::new(),
            procs: 0,
        };
        let root = scene.root().to_owned();
        scene.path(&root, "[TMP]");
        Some(scene)
    }

    fn root(&self) -> &Path {
        self.env.home.path()
    }

    /// Show `dir` (and what it resolves to) as `label`.
    fn path(&mut self, dir: &Path, label: &str) {
        if let Ok(real) = dir.canonicalize() {
            if real != dir {
                self.filters
                    .push((literal(&real.to_string_lossy()), label.to_owned()));
            }
        }
        self.filters
            .push((literal(&dir.to_string_lossy()), label.to_owned()));
    }

    /// Show `id` as `[label]`, and its prefixes of `widths` characters as the label padded
    /// to that width.
    fn id(&mut self, id: &str, label: &str, widths: &[usize]) {
        if self
            .filters
            .iter()
            .any(|(r, _)| r == &format!(r"\b{}\b", literal(id)))
        {
            return;
        }
        let shown = format!("[{label}]");
        self.filters
            .push((format!(r"\b{}\b", literal(id)), shown.clone()));
        for &w in widths {
            if w < id.len() {
                self.filters
                    .push((format!(r"\b{}\b", literal(&id[..w])), padded(&shown, w)));
            }
        }
    }

    /// Label every node of environment `env` by its sequence number (`[web.3]`).
    fn label_nodes(&mut self, dir: &Path, env: &str) {
        let log = self.ok(dir, &["--json", "log", env]).json();
        for n in log["nodes"].as_array().expect("nodes") {
            let id = n["id"].as_str().expect("id");
            let label = format!("{env}.{}", n["seq"]);
            self.id(id, &label, &[12]);
        }
    }

    /// Label box `name`'s id (`[box web]`; as a table shows it, `[web]___`).
    fn label_box(&mut self, name: &str) {
        let list = self.ok(self.root(), &["--json", "list", "--all"]).json();
        let rec = list
            .as_array()
            .expect("list")
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("box {name} in {list}"));
        let id = rec["box"]["id"].as_str().expect("box id").to_owned();
        self.id(&id, &format!("box {name}"), &[]);
        self.filters.push((
            format!(r"\b{}\b", literal(&id[..8])),
            padded(&format!("[{name}]"), 8),
        ));
    }

    /// Label a spawned process's id (`p1`, `p2` … in the order spawned) where the outputs
    /// show one: a `ps` row, a JSON `id`, its log file, a sentence naming it.
    fn label_proc(&mut self, id: u64) {
        self.procs += 1;
        let label = format!("p{}", self.procs);
        self.filters.extend([
            // The ID column of `ps` is 5 wide.
            (
                format!(r"(?m)^{id} +(\d+ +(?:spawn|exec|shell) )"),
                format!("{label:<5} $1"),
            ),
            (format!(r#""id": {id},"#), format!(r#""id": "[{label}]","#)),
            (format!(r"logs/{id}\.log"), format!("logs/{label}.log")),
            (
                format!(r"\b(process|web|api) {id}\b"),
                format!("$1 {label}"),
            ),
        ]);
    }

    /// `agentbox ARGS` in `dir`, whatever its exit status.
    fn run(&self, dir: &Path, args: &[&str]) -> Ran {
        let out = self
            .env
            .command(args)
            .current_dir(dir)
            // Times are shown in local time: the same zone every run.
            .env("TZ", "UTC")
            .env("COLUMNS", "100")
            .output()
            .expect("run agentbox");
        Ran {
            args: args.iter().map(|a| a.to_string()).collect(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            code: out.status.code(),
        }
    }

    /// `agentbox ARGS` in `dir`, which must succeed.
    fn ok(&self, dir: &Path, args: &[&str]) -> Ran {
        let ran = self.run(dir, args);
        assert_eq!(
            ran.code,
            Some(0),
            "agentbox {args:?} failed:\n{}",
            ran.shown()
        );
        ran
    }

    /// Snapshot `ran` as `name`, disk usage shown as `[size]` when `sizes`.
    fn snap_with(&self, name: &str, ran: &Ran, sizes: bool) {
        if ran.args.iter().any(|a| a == "--json") {
            // Every JSON document on stdout parses (an error follows a report as a second).
            let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&ran.stdout)
                .into_iter()
                .collect::<Result<_, _>>()
                .unwrap_or_else(|e| panic!("{:?}: bad JSON {e}: {}", ran.args, ran.stdout));
            assert!(!docs.is_empty(), "{:?} printed no JSON", ran.args);
            // And no object in them repeats a key (serde_json above keeps the last of a
            // repeated key without a word; other parsers keep the first or fail).
            for doc in serde_json::Deserializer::from_str(&ran.stdout).into_iter::<Unique>() {
                if let Err(e) = doc {
                    panic!("{:?}: {e}: {}", ran.args, ran.stdout);
                }
            }
        }
        let mut settings = insta::Settings::clone_current();
        settings.set_description(format!("agentbox {}", ran.args.join(" ")));
        settings.set_omit_expression(true);
        settings.set_prepend_module_to_snapshot(true);
        for (regex, replacement) in &self.filters {
            settings.add_filter(regex, replacement.as_str());
        }
        for (regex, replacement) in generic_filters(sizes) {
            settings.add_filter(regex, replacement);
        }
        settings.bind(|| insta::assert_snapshot!(name, ran.shown()));
    }

    fn snap(&self, name: &str, ran: &Ran) {
        self.snap_with(name, ran, false)
    }

    /// Run and snapshot; the command must succeed.
    fn snap_ok(&self, name: &str, dir: &Path, args: &[&str]) -> Ran {
        let ran = self.ok(dir, args);
        self.snap(name, &ran);
        ran
    }

    /// Run and snapshot with disk usage redacted; the command must succeed.
    fn snap_sizes(&self, name: &str, dir: &Path, args: &[&str]) -> Ran {
        let ran = self.ok(dir, args);
        self.snap_with(name, &ran, true);
        ran
    }

    /// Wait until box `name` lists process `id` as ended.
    fn wait_exited(&self, name: &str, id: u64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ps = self.ok(self.root(), &["--json", "ps", name]).json();
            let ended = ps
                .as_array()
                .expect("ps")
                .iter()
                .any(|p| p["id"] == id && !p["exit"].is_null());
            if ended {
                return;
            }
            assert!(Instant::now() < deadline, "process {id} never ended: {ps}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        kill_supervisors(&self.env.path("home"));
    }
}

/// A JSON value whose objects have each key once: deserializing it fails on a repeated key.
struct Unique;

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Unique, D::Error> {
        d.deserialize_any(UniqueVisitor)
    }
}

struct UniqueVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
    type Value = Unique;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value without repeated keys")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_unit<E>(self) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
        while seq.next_element::<Unique>()?.is_some() {}
        Ok(Unique)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
        let mut seen = std::collections::BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!(
                    "key {key:?} appears twice"
                )));
            }
            map.next_value::<Unique>()?;
        }
        Ok(Unique)
    }
}

#[test]
fn a_repeated_key_is_found() {
    let parse = |s: &str| serde_json::from_str::<Unique>(s).map(|_| ());
    assert!(parse(r#"{"a": 1, "b": {"c": [null, true, "x", 1.5, -2]}}"#).is_ok());
    assert!(parse(r#"{"a": 1, "b": 2, "a": 3}"#).is_err());
    assert!(parse(r#"[{"box": {"network": "host", "network": "host"}}]"#).is_err());
}

/// Filters for values no scenario controls, after the scenario's own.
fn generic_filters(sizes: bool) -> Vec<(&'static str, &'static str)> {
    let mut f = vec![
        (
            r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})",
            "[timestamp]",
        ),
        (
            r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}",
            "YYYY-MM-DD hh:mm:ss",
        ),
        (r"projects/[0-9a-f]{16}", "projects/[key]"),
        // Branch tips are a set ordered by (random) id: their labels come in any order.
        (r#"(?s)"tips": \[.*?\n\s*\]"#, r#""tips": "[tips]""#),
        (r#""pid": \d+"#, r#""pid": "[pid]""#),
        (r"\(pid \d+ in the box\)", "(pid [pid] in the box)"),
        (r"supervisor \d+ \(exited\)", "supervisor [pid] (exited)"),
        // The PID column of `ps`.
        (r"(?m)^(\S+ +)\d+ +(spawn|exec|shell) ", "${1}[pid]   $2 "),
        (r#""(uid|gid)": \d+"#, r#""$1": "[uid]""#),
        (r"host uid \d+", "host uid [uid]"),
        // What the watcher watches follows the box's layer (git's own files included).
        (
            r"watching \(\d+ directories\)",
            "watching ([n] directories)",
        ),
        (r#""watches": \d+"#, r#""watches": "[n]""#),
        (r"host ids \d+-\d+", "host ids [uid]-[uid+65535]"),
        (r#""([a-z_]*bytes[a-z_]*)": \d+"#, r#""$1": "[bytes]""#),
        // Ids the scenario did not label (layers of a crashed commit, say).
        (r"\b[0-9a-f]{40}\b", "[sha]"),
        (r"\b[0-9a-f]{16}\b", "[id]"),
    ];
    if sizes {
        f.push((r"\b\d+(\.\d)? (B|KiB|MiB|GiB|TiB)\b", "[size]"));
    }
    f
}

/// Git in `dir` as a fixed author at a fixed time (commit ids are the same every run).
fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .envs(GIT_ENV.iter().map(|v| v.split_once('=').expect("K=V")))
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

const GIT_ENV: [&str; 6] = [
    "GIT_AUTHOR_NAME=dev",
    "GIT_AUTHOR_EMAIL=dev@example.com",
    "GIT_AUTHOR_DATE=2024-01-02T03:04:05Z",
    "GIT_COMMITTER_NAME=dev",
    "GIT_COMMITTER_EMAIL=dev@example.com",
    "GIT_COMMITTER_DATE=2024-01-02T03:04:05Z",
];

/// A project under `root`: a git repository with one commit and an untracked file.
fn project(root: &Path) -> PathBuf {
    let p = root.join("proj");
    write(&p.join("main.js"), "console.log('hi')\n");
    write(&p.join("README"), "readme\n");
    git(&p, &["init", "-q", "-b", "main"]);
    git(&p, &["add", "-A"]);
    git(&p, &["commit", "-qm", "first"]);
    write(&p.join("notes.txt"), "untracked\n");
    p
}

/// `exec BOX -- sh -c SCRIPT` (with git's identity and clock fixed), which must succeed;
/// the node it recorded.
fn sh(s: &Scene, dir: &Path, name: &str, script: &str) -> Option<String> {
    let mut args = vec!["--json", "exec", name];
    for v in GIT_ENV {
        args.extend(["--env", v]);
    }
    args.extend(["--", "sh", "-c", script]);
    let ran = s.ok(dir, &args);
    ran.json()["node"].as_str().map(str::to_owned)
}

/// Boxes of a git project: their history, processes, status and listing; a versioned
/// directory beside them; the configuration.
#[test]
fn box_outputs() {
    let Some(mut s) = Scene::new("box_outputs") else {
        return;
    };
    let root = s.root().to_owned();
    let proj = project(&root);
    let first = git(&proj, &["rev-parse", "HEAD"]);
    s.id(&first, "commit first", &[12]);

    // A versioned directory (its store's backend chosen explicitly: the same everywhere).
    let site = root.join("site");
    write(&site.join("index.html"), "<h1>hi</h1>\n");
    s.ok(&root, &["env", "site", "--backend", "layers"]);
    write(&site.join("index.html"), "<h1>hello</h1>\n");
    s.ok(&root, &["commit", "site", "-m", "greet"]);
    s.label_nodes(&root, "site");

    // Two boxes of the project: one recording every command, one only what is committed.
    let created = s.ok(&proj, &["create", "web"]);
    let created_json = s.ok(&proj, &["--json", "create", "api", "--no-capture"]);
    s.label_box("web");
    s.label_box("api");
    s.label_nodes(&proj, "web");
    s.label_nodes(&proj, "api");
    s.snap("create", &created);
    s.snap("create-json", &created_json);
    s.ok(&proj, &["rename", "api", "api server"]);

    // The web box's history: commands that change something are nodes.
    let v1 = sh(
        &s,
        &proj,
        "web",
        "echo more >> main.js; mkdir lib; echo 'export {}' > lib/util.js",
    )
    .expect("a node");
    s.ok(&proj, &["tag", "web", "v1", &v1]);
    sh(
        &s,
        &proj,
        "web",
        "rm README; echo \"console.log('bye')\" >> main.js",
    )
    .expect("a node");
    s.ok(&proj, &["tag", "web", "experiment"]);

    // A rollback kills the box's processes.
    let doomed = s
        .ok(&proj, &["--json", "spawn", "web", "--", "sleep", "1000"])
        .json();
    s.label_proc(doomed["id"].as_u64().expect("id"));
    s.label_nodes(&proj, "web");
    s.snap_ok("checkout", &proj, &["checkout", "web", "v1"]);
    sh(&s, &proj, "web", "echo feature > feature.txt").expect("a node");
    // A commit in the box's repository reaches the host's.
    sh(
        &s,
        &proj,
        "web",
        "git add -A && git commit -qm 'add feature'",
    )
    .expect("a node");
    let wip = git(&proj, &["rev-parse", "agentbox/web"]);
    assert_ne!(wip, first, "the box's commit reached the host repository");
    s.id(&wip, "commit add feature", &[12]);
    s.label_nodes(&proj, "web");

    s.snap_ok("log", &proj, &["log", "web"]);
    let log = s
        .snap_ok("log-json", &proj, &["--json", "log", "web"])
        .json();
    assert_eq!(log["nodes"].as_array().map(Vec::len), Some(5), "{log}");
    s.snap_ok("log-ancestors", &proj, &["log", "web", "--ancestors"]);
    s.snap_ok(
        "log-ancestors-json",
        &proj,
        &["--json", "log", "web", "--ancestors"],
    );
    let leaves = s.snap_ok("log-leaves", &proj, &["log", "web", "--leaves"]);
    assert_eq!(leaves.stdout.lines().count(), 2, "{}", leaves.stdout);
    s.snap_ok(
        "log-leaves-json",
        &proj,
        &["--json", "log", "web", "--leaves"],
    );
    s.snap_ok("show", &proj, &["show", "web", "v1"]);
    s.snap_ok("show-json", &proj, &["--json", "show", "web", "v1"]);
    s.snap_ok("diff-nodes", &proj, &["diff", "web", "v1", "experiment"]);
    s.snap_ok(
        "diff-nodes-json",
        &proj,
        &["--json", "diff", "web", "v1", "experiment"],
    );
    s.snap_ok(
        "diff-nodes-patch",
        &proj,
        &["diff", "web", "v1", "experiment", "-p"],
    );
    s.snap_ok(
        "diff-nodes-patch-json",
        &proj,
        &["--json", "diff", "web", "v1", "experiment", "-p"],
    );
    s.snap_ok("tag", &proj, &["tag", "web"]);
    s.snap_ok("tag-json", &proj, &["--json", "tag", "web"]);

    // Background processes: one that ends well, one that fails at once, one that runs.
    let built = s.ok(
        &proj,
        &[
            "spawn",
            "web",
            "--",
            "sh",
            "-c",
            "echo built; echo '2 warnings' >&2",
        ],
    );
    let built_id: u64 = built
        .stdout
        .split_whitespace()
        .nth(2)
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("a process id in {:?}", built.stdout));
    s.label_proc(built_id);
    s.snap("spawn", &built);
    s.wait_exited("web", built_id);
    // The failing one's id is the next one.
    s.label_proc(built_id + 1);
    let failed = s.run(
        &proj,
        &[
            "spawn",
            "web",
            "--",
            "sh",
            "-c",
            "echo 'cannot reach the database' >&2; exit 3",
        ],
    );
    assert_ne!(failed.code, Some(0), "{}", failed.shown());
    s.snap("spawn-fails", &failed);
    let server = s.ok(&proj, &["--json", "spawn", "web", "--", "sleep", "1000"]);
    let server_id = server.json()["id"].as_u64().expect("id");
    assert_eq!(server_id, built_id + 2, "process ids are given in order");
    s.label_proc(server_id);
    s.snap("spawn-json", &server);
    let ps = s.snap_ok("ps", &proj, &["ps", "web"]);
    for state in ["running", "killed by checkout", "exited 0", "exited 3"] {
        assert!(ps.stdout.contains(state), "{state}: {}", ps.stdout);
    }
    s.snap_ok("ps-json", &proj, &["--json", "ps", "web"]);
    let st = s.snap_sizes("status-box", &proj, &["status", "web"]);
    assert!(st.stdout.contains("processes:    1\n"), "{}", st.stdout);
    s.snap_sizes("status-box-json", &proj, &["--json", "status", "web"]);
    s.snap_sizes("status-box-usage", &proj, &["status", "web", "--usage"]);
    s.snap_sizes(
        "status-box-usage-json",
        &proj,
        &["--json", "status", "web", "--usage"],
    );

    // The api box: a commit by hand, then uncommitted work.
    sh(&s, &proj, "api", "echo '# API' > API.md");
    s.ok(&proj, &["commit", "api", "-m", "api docs"]);
    assert_eq!(
        sh(
            &s,
            &proj,
            "api",
            "echo draft > draft.txt; rm README; echo x >> main.js"
        ),
        None,
        "a box without auto-capture records nothing by itself"
    );
    s.label_nodes(&proj, "api");
    s.snap_ok("diff-working-tree", &proj, &["diff", "api"]);
    s.snap_ok("diff-working-tree-json", &proj, &["--json", "diff", "api"]);
    s.snap_ok("diff-working-tree-patch", &proj, &["diff", "api", "-p"]);
    s.snap_ok(
        "diff-working-tree-patch-json",
        &proj,
        &["--json", "diff", "api", "-p"],
    );
    s.snap_sizes("status-box-uncommitted", &proj, &["status", "api"]);
    s.ok(&proj, &["stop", "api"]);
    s.snap_sizes("status-box-stopped", &proj, &["status", "api"]);
    s.snap_sizes(
        "status-box-stopped-json",
        &proj,
        &["--json", "status", "api"],
    );

    // The project's boxes, every box, the versioned directory.
    s.snap_sizes("status-project", &proj, &["status"]);
    s.snap_sizes("status-project-json", &proj, &["--json", "status"]);
    s.snap_sizes("status-environment", &site, &["status"]);
    s.snap_sizes("status-environment-json", &site, &["--json", "status"]);
    let list = s.snap_ok("list", &proj, &["list"]);
    assert_eq!(list.stdout.lines().count(), 3, "{}", list.stdout);
    s.snap_ok("list-json", &proj, &["--json", "list"]);
    let all = s.snap_ok("list-all", &proj, &["list", "--all"]);
    assert!(all.stdout.contains("site"), "{}", all.stdout);
    s.snap_ok("list-all-json", &proj, &["--json", "list", "--all"]);

    // The configuration, one key set in the project's file.
    s.snap_ok("config-set", &proj, &["config", "set", "box.keep", "50"]);
    s.snap_ok("config-list", &proj, &["config", "list"]);
    s.snap_ok("config-list-json", &proj, &["--json", "config", "list"]);
    s.snap_ok(
        "config-list-origin",
        &proj,
        &["config", "list", "--show-origin"],
    );
    s.snap_ok(
        "config-list-origin-json",
        &proj,
        &["--json", "config", "list", "--show-origin"],
    );

    // A rollback that kills a process, as a script sees it; then the boxes go.
    s.snap_ok(
        "checkout-json",
        &proj,
        &["--json", "checkout", "web", "experiment"],
    );
    let ps = s.ok(&proj, &["--json", "ps", "web"]).json();
    assert!(
        ps.as_array()
            .expect("ps")
            .iter()
            .all(|p| !p["exit"].is_null()),
        "the checkout killed the server: {ps}"
    );
    s.snap_ok("destroy", &proj, &["destroy", "api", "--delete-branch"]);
    s.snap_ok("destroy-json", &proj, &["--json", "destroy", "web"]);
    assert_eq!(
        git(&proj, &["branch", "--list", "agentbox/*"]),
        "agentbox/web"
    );
}

/// A versioned directory's store: collecting garbage, what a crash leaves (fsck, prune),
/// export and import.
#[test]
fn store_outputs() {
    let Some(mut s) = Scene::new("store_outputs") else {
        return;
    };
    let root = s.root().to_owned();
    let docs = root.join("docs");
    write(&docs.join("a.txt"), "one\n");
    let created = s.ok(&root, &["env", "docs", "--backend", "layers"]);
    let commit = |s: &Scene, file: &str, text: &str, message: &str| {
        write(&docs.join(file), text);
        let node = s
            .ok(&root, &["--json", "commit", "docs", "-m", message])
            .json();
        node["id"].as_str().expect("id").to_owned()
    };
    commit(&s, "a.txt", "two\n", "two");
    // Two attempts abandoned for a third.
    let b = commit(&s, "b.txt", "b\n", "try b");
    s.ok(&root, &["checkout", "docs", "HEAD~1"]);
    let c = commit(&s, "c.txt", "c\n", "try c");
    s.ok(&root, &["checkout", "docs", "HEAD~1"]);
    commit(&s, "d.txt", "d\n", "try d");
    s.label_nodes(&root, "docs");
    s.snap("env", &created);
    let scratch = root.join("scratch");
    std::fs::create_dir(&scratch).expect("mkdir");
    let created_json = s.ok(&root, &["--json", "env", "scratch"]);
    s.label_nodes(&root, "scratch");
    s.snap("env-json", &created_json);
    s.snap_ok("log-branches", &root, &["log", "docs"]);

    // Garbage: the abandoned attempts' data.
    s.ok(&root, &["delete", "docs", &b]);
    let gc = s.snap_sizes("gc", &root, &["gc"]);
    assert!(gc.stdout.starts_with("removed 1 "), "{}", gc.stdout);
    s.ok(&root, &["delete", "docs", &c]);
    let gc = s.snap_sizes("gc-json", &root, &["--json", "gc"]).json();
    assert_eq!(
        gc["removed_layers"].as_array().map(Vec::len),
        Some(1),
        "{gc}"
    );

    // A commit killed half-way, and a box directory nothing owns.
    write(&docs.join("e.txt"), "e\n");
    let out = s
        .env
        .command(&["commit", "docs", "-m", "interrupted"])
        .current_dir(&root)
        .env("AGENTBOX_FAILPOINT", "commit:after-layer")
        .output()
        .expect("run agentbox");
    assert_eq!(out.status.code(), None, "it died at the failpoint");
    std::fs::create_dir_all(s.env.path("home/boxes/ghost")).expect("mkdir");
    let fsck = s.run(&root, &["fsck"]);
    assert_eq!(fsck.code, Some(7), "{}", fsck.shown());
    s.snap_with("fsck-problems", &fsck, true);
    let fsck = s.run(&root, &["--json", "fsck"]);
    assert_eq!(fsck.code, Some(7), "{}", fsck.shown());
    s.snap_with("fsck-problems-json", &fsck, true);
    let dry = s.snap_sizes(
        "prune-dry-run",
        &root,
        &["prune", "--dry-run", "--min-age", "0"],
    );
    assert!(dry.stdout.contains("would remove"), "{}", dry.stdout);
    s.snap_sizes(
        "prune-dry-run-json",
        &root,
        &["--json", "prune", "--dry-run", "--min-age", "0"],
    );
    s.snap_sizes("prune", &root, &["prune", "--min-age", "0"]);
    s.snap_sizes(
        "prune-nothing",
        &root,
        &["prune", "--dry-run", "--min-age", "0"],
    );
    s.snap_sizes("fsck", &root, &["fsck"]);
    s.snap_sizes("fsck-json", &root, &["--json", "fsck"]);

    // Export, and import into another home.
    s.snap_ok("export", &root, &["export", "docs", "-o", "docs.bundle"]);
    s.snap_ok(
        "export-json",
        &root,
        &[
            "--json",
            "export",
            "docs",
            "--kind",
            "snapshot",
            "-o",
            "docs.snap",
        ],
    );
    // Into another home, from its directory.
    let other = Env::new();
    s.path(other.home.path(), "[TMP2]");
    for bundle in ["docs.bundle", "docs.snap"] {
        std::fs::copy(root.join(bundle), other.home.path().join(bundle)).expect("copy");
    }
    let import = |args: &[&str]| {
        let out = other.command(args).output().expect("run agentbox");
        Ran {
            args: args.iter().map(|a| a.to_string()).collect(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            code: out.status.code(),
        }
    };
    let imported = import(&["import", "docs.bundle", "--dir", "copy"]);
    assert_eq!(imported.code, Some(0), "{}", imported.shown());
    s.snap("import", &imported);
    let imported = import(&["--json", "import", "docs.snap", "--dir", "snap"]);
    assert_eq!(imported.code, Some(0), "{}", imported.shown());
    s.snap("import-json", &imported);
}
