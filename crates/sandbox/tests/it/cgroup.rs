//! Box cgroups on the real kernel: limits enforced, processes listed, killed and cleaned up.
//! Tier 2 (root).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use agentbox_sandbox::cgroup::{self, BoxCgroup, Limits};
use agentbox_testkit::tier::require_root;

/// A box name unique to this test process and test.
fn unique(tag: &str) -> String {
    format!("test-{}-{tag}", std::process::id())
}

/// Removes the box's cgroup (killing whatever is left inside) when the test ends, even when it
/// fails, so nothing leaks into the host's hierarchies.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Ok(Some(cg)) = BoxCgroup::open(&self.0) {
            if let Err(e) = cg.remove() {
                eprintln!("cleanup of box cgroup {}: {e}", self.0);
            }
        }
    }
}

/// `sh -c script`, held back until [`Gated::go`]: the shell first reads a line from stdin, so
/// it can be moved into a box before it runs (and forks) anything.
struct Gated {
    child: Child,
    stdout: BufReader<ChildStdout>,
    /// stderr goes to a file: a pipe would stay open as long as any background child of the
    /// script lives, so reading it to the end could block for as long.
    stderr: tempfile::NamedTempFile,
}

impl Gated {
    fn spawn(script: &str) -> Gated {
        let stderr = tempfile::NamedTempFile::new().expect("stderr file");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("read go; {script}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr.reopen().expect("reopen stderr file"))
            .spawn()
            .expect("spawn sh");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Gated {
            child,
            stdout,
            stderr,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn go(&mut self) {
        let mut stdin = self.child.stdin.take().expect("stdin");
        stdin.write_all(b"go\n").expect("release the shell");
    }

    /// The next line the script prints.
    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read stdout");
        line.trim().to_owned()
    }

    fn wait(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().expect("wait");
        let stderr = std::fs::read_to_string(self.stderr.path()).expect("read stderr");
        (status, stderr)
    }
}

/// The box directory that has control file `file` (on v1, one hierarchy has it).
fn dir_with(cg: &BoxCgroup, file: &str) -> PathBuf {
    cg.dirs()
        .into_iter()
        .find(|d| d.join(file).exists())
        .unwrap_or_else(|| panic!("no directory of {cg:?} has {file}"))
        .to_owned()
}

/// The value of `key` in a flat-keyed cgroup file such as `pids.events`.
fn keyed(path: &Path, key: &str) -> u64 {
    let text = std::fs::read_to_string(path).expect("read keyed file");
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {}: {text}", path.display()))
}

fn procs_of(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .expect("read cgroup.procs")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces; fields after its closing parenthesis are fixed.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

#[test]
fn available_as_root() {
    if !require_root("available_as_root") {
        return;
    }
    cgroup::available().expect("cgroups with memory, pids and cpu controllers");
}

#[test]
fn memory_limit_is_enforced() {
    if !require_root("memory_limit_is_enforced") {
        return;
    }
    let name = unique("mem");
    let _cleanup = Cleanup(name.clone());
    let limits = Limits {
        memory_bytes: Some(Limits::parse_memory("32M").expect("size")),
        ..Limits::default()
    };
    let cg = BoxCgroup::create(&name, &limits).expect("create");
    assert_eq!(cg.limits().expect("limits").memory_bytes, Some(32 << 20));

    // `tail` keeps a newline-free stream in memory: 200 MiB of it cannot fit in 32 MiB.
    let mut sh = Gated::spawn("head -c 200M /dev/zero | tail");
    cg.add(sh.pid()).expect("add");
    sh.go();
    let (status, stderr) = sh.wait();
    assert_eq!(
        status.code(),
        Some(128 + 9),
        "tail must be SIGKILLed by the OOM killer: {status:?} {stderr}"
    );
    let oom_kills = if cg.version() == 2 {
        keyed(
            &dir_with(&cg, "memory.events").join("memory.events"),
            "oom_kill ",
        )
    } else {
        keyed(
            &dir_with(&cg, "memory.oom_control").join("memory.oom_control"),
            "oom_kill ",
        )
    };
    assert!(oom_kills >= 1, "the box must record an OOM kill");
}

#[test]
fn pids_limit_is_enforced() {
    if !require_root("pids_limit_is_enforced") {
        return;
    }
    let name = unique("pids");
    let _cleanup = Cleanup(name.clone());
    let limit = 5;
    let cg = BoxCgroup::create(
        &name,
        &Limits {
            pids: Some(limit),
            ..Limits::default()
        },
    )
    .expect("create");
    assert_eq!(cg.limits().expect("limits").pids, Some(limit));

    let mut sh =
        Gated::spawn("i=0; while [ $i -lt 20 ]; do sleep 600 & i=$((i+1)); done; echo spawned");
    cg.add(sh.pid()).expect("add");
    sh.go();
    let (status, stderr) = sh.wait();
    assert!(
        !status.success(),
        "20 background processes cannot fit in a limit of {limit}: {status:?}"
    );
    assert!(
        stderr.contains("fork"),
        "the shell reports the failed fork: {stderr}"
    );
    let events = dir_with(&cg, "pids.events").join("pids.events");
    assert!(
        keyed(&events, "max ") >= 1,
        "the box records forks refused at its limit"
    );
    let left = cg.pids().expect("pids");
    assert!(
        !left.is_empty() && left.len() as u64 <= limit,
        "the sleeps that did start are still there, within the limit: {left:?}"
    );
    cg.kill_all().expect("kill_all");
    assert_eq!(cg.pids().expect("pids"), Vec::<u32>::new());
}

#[test]
fn cpu_quota_is_written_and_read_back() {
    if !require_root("cpu_quota_is_written_and_read_back") {
        return;
    }
    let name = unique("cpu");
    let _cleanup = Cleanup(name.clone());
    let cg = BoxCgroup::create(
        &name,
        &Limits {
            cpus: Some(1.5),
            ..Limits::default()
        },
    )
    .expect("create");
    assert_eq!(cg.limits().expect("limits").cpus, Some(1.5));
    if cg.version() == 2 {
        let dir = dir_with(&cg, "cpu.max");
        let text = std::fs::read_to_string(dir.join("cpu.max")).expect("cpu.max");
        assert_eq!(text.trim(), "150000 100000");
    } else {
        let dir = dir_with(&cg, "cpu.cfs_quota_us");
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .expect("read cpu file")
                .trim()
                .to_owned()
        };
        assert_eq!(read("cpu.cfs_quota_us"), "150000");
        assert_eq!(read("cpu.cfs_period_us"), "100000");
    }
}

#[test]
fn pids_lists_added_processes_and_their_children() {
    if !require_root("pids_lists_added_processes_and_their_children") {
        return;
    }
    let name = unique("list");
    let _cleanup = Cleanup(name.clone());
    let cg = BoxCgroup::create(&name, &Limits::default()).expect("create");
    assert_eq!(cg.pids().expect("pids"), Vec::<u32>::new());

    let mut sh = Gated::spawn("sleep 600 & sleep 600 & echo ready; wait");
    let sh_pid = sh.pid();
    cg.add(sh_pid).expect("add");
    sh.go();
    assert_eq!(sh.line(), "ready");

    let pids = cg.pids().expect("pids");
    assert!(
        pids.contains(&sh_pid),
        "{pids:?} must contain the shell {sh_pid}"
    );
    let children: Vec<u32> = pids.iter().copied().filter(|&p| p != sh_pid).collect();
    assert_eq!(children.len(), 2, "the two sleeps: {pids:?}");
    for child in &children {
        assert_eq!(
            parent_pid(*child),
            Some(sh_pid),
            "{child} is a child of the shell"
        );
    }
    // Every hierarchy of the box holds all of them.
    for dir in cg.dirs() {
        let mut inside = procs_of(dir);
        inside.sort_unstable();
        assert_eq!(inside, pids, "{}", dir.display());
    }
    cg.kill_all().expect("kill_all");
    let (status, _) = sh.wait();
    assert_eq!(status.signal(), Some(9));
}

#[test]
fn kill_all_empties_the_box() {
    if !require_root("kill_all_empties_the_box") {
        return;
    }
    let name = unique("kill");
    let _cleanup = Cleanup(name.clone());
    let cg = BoxCgroup::create(
        &name,
        &Limits {
            pids: Some(64),
            ..Limits::default()
        },
    )
    .expect("create");

    let mut shells = Vec::new();
    for _ in 0..3 {
        let mut sh = Gated::spawn("sleep 600 & sleep 600 & echo ready; wait");
        cg.add(sh.pid()).expect("add");
        sh.go();
        assert_eq!(sh.line(), "ready");
        shells.push(sh);
    }
    // One shell forks without pause, so the box changes while it is being killed.
    let mut busy = Gated::spawn("echo ready; while :; do /bin/true; done");
    cg.add(busy.pid()).expect("add");
    busy.go();
    assert_eq!(busy.line(), "ready");
    shells.push(busy);

    assert!(cg.pids().expect("pids").len() >= 10);
    cg.kill_all().expect("kill_all");
    assert_eq!(cg.pids().expect("pids"), Vec::<u32>::new());
    for dir in cg.dirs() {
        assert_eq!(procs_of(dir), Vec::<u32>::new(), "{}", dir.display());
    }
    for sh in shells {
        let pid = sh.pid();
        let (status, _) = sh.wait();
        assert_eq!(status.signal(), Some(9), "shell {pid}: {status:?}");
    }
    // An empty box is killed again without error.
    cg.kill_all().expect("kill_all on an empty box");
}

#[test]
fn remove_cleans_up_every_hierarchy() {
    if !require_root("remove_cleans_up_every_hierarchy") {
        return;
    }
    let name = unique("remove");
    let _cleanup = Cleanup(name.clone());
    let limits = Limits {
        memory_bytes: Some(256 << 20),
        pids: Some(32),
        cpus: Some(0.5),
    };
    let cg = BoxCgroup::create(&name, &limits).expect("create");
    let dirs: Vec<PathBuf> = cg.dirs().into_iter().map(Path::to_owned).collect();
    if cg.version() == 1 {
        // pids, freezer, memory and cpu hierarchies.
        assert_eq!(dirs.len(), 4, "{dirs:?}");
    } else {
        assert_eq!(dirs.len(), 1, "{dirs:?}");
    }
    let mut sh = Gated::spawn("sleep 600 & echo ready; wait");
    cg.add(sh.pid()).expect("add");
    sh.go();
    assert_eq!(sh.line(), "ready");

    let second_handle = BoxCgroup::open(&name).expect("open").expect("it exists");
    cg.remove().expect("remove");
    for dir in &dirs {
        assert!(!dir.exists(), "{} must be gone", dir.display());
    }
    let (status, _) = sh.wait();
    assert_eq!(status.signal(), Some(9), "remove kills what is inside");
    assert!(BoxCgroup::open(&name).expect("open").is_none());
    second_handle
        .remove()
        .expect("removing an already removed box is not an error");
}

#[test]
fn create_twice_adopts() {
    if !require_root("create_twice_adopts") {
        return;
    }
    let name = unique("adopt");
    let _cleanup = Cleanup(name.clone());
    let first_limits = Limits {
        pids: Some(10),
        ..Limits::default()
    };
    let first = BoxCgroup::create(&name, &first_limits).expect("create");
    assert_eq!(first.limits().expect("limits"), first_limits);
    let mut sh = Gated::spawn("echo ready; exec sleep 600");
    let pid = sh.pid();
    first.add(pid).expect("add");
    sh.go();
    assert_eq!(sh.line(), "ready");

    // Left frozen, as by a crash in the middle of kill_all.
    let (freeze_file, frozen, thawed) = if first.version() == 2 {
        ("cgroup.freeze", "1", "0")
    } else {
        ("freezer.state", "FROZEN", "THAWED")
    };
    let freeze_path = dir_with(&first, freeze_file).join(freeze_file);
    std::fs::write(&freeze_path, frozen).expect("freeze");

    // The second create takes the existing box over: same directories (plus those the new
    // limits need), the process stays inside, and the new limits replace the old ones.
    let second_limits = Limits {
        memory_bytes: Some(64 << 20),
        pids: None,
        cpus: Some(0.5),
    };
    let second = BoxCgroup::create(&name, &second_limits).expect("create again");
    assert_eq!(second.version(), first.version());
    for dir in first.dirs() {
        assert!(second.dirs().contains(&dir), "{} kept", dir.display());
    }
    assert_eq!(second.pids().expect("pids"), vec![pid]);
    for dir in second.dirs() {
        assert_eq!(
            procs_of(dir),
            vec![pid],
            "{} holds the process",
            dir.display()
        );
    }
    assert_eq!(second.limits().expect("limits"), second_limits);
    let state = std::fs::read_to_string(&freeze_path).expect("freezer state");
    assert_eq!(state.trim(), thawed, "an adopted box is thawed");

    let opened = BoxCgroup::open(&name).expect("open").expect("exists");
    let mut a: Vec<&Path> = opened.dirs();
    let mut b: Vec<&Path> = second.dirs();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    assert!(BoxCgroup::open(&unique("never-created"))
        .expect("open")
        .is_none());

    second.remove().expect("remove");
    let (status, _) = sh.wait();
    assert_eq!(status.signal(), Some(9));
}

#[test]
fn invalid_names_and_limits_are_refused_before_touching_cgroups() {
    if !require_root("invalid_names_and_limits_are_refused_before_touching_cgroups") {
        return;
    }
    for bad in ["", "../escape", "a/b", ".hidden"] {
        let e = BoxCgroup::create(bad, &Limits::default()).expect_err(bad);
        assert!(
            matches!(e, cgroup::CgroupError::InvalidName { .. }),
            "{bad:?}: {e}"
        );
    }
    let name = unique("bad-limit");
    let _cleanup = Cleanup(name.clone());
    let e = BoxCgroup::create(
        &name,
        &Limits {
            cpus: Some(0.0),
            ..Limits::default()
        },
    )
    .expect_err("zero cpus");
    assert!(matches!(e, cgroup::CgroupError::InvalidLimit { .. }), "{e}");
    assert!(BoxCgroup::open(&name).expect("open").is_none());
}
