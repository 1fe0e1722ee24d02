//! Agents in boxes (root): the catalogue as data, configuration synced in (sanitised, never
//! back, credentials never), variables for the agent only, the box made when needed; and the
//! real Claude Code CLI when the machine has it.
//!
//! The fixture is here; the tests in the files beside it.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{git, kill_supervisors, write, Env};
use agentbox_testkit::tier::require_root;

mod config;
mod real;

struct Setup {
    env: Env,
    /// The host user's home the agents' configuration comes from.
    user: PathBuf,
    proj: PathBuf,
}

impl Drop for Setup {
    fn drop(&mut self) {
        kill_supervisors(&self.env.path("home"));
    }
}

impl Setup {
    fn new(test: &str) -> Option<Setup> {
        if !require_root(test) {
            return None;
        }
        let env = Env::new();
        let user = env.home.path().join("user");
        let proj = env.home.path().join("proj");
        write(&proj.join("a.txt"), "a\n");
        git(&proj, &["init", "-q", "-b", "main"]);
        git(&proj, &["add", "-A"]);
        git(&proj, &["commit", "-qm", "first"]);
        Some(Setup { env, user, proj })
    }

    /// Run agentbox in the project, as the host user whose home is `self.user`.
    fn run(&self, args: &[&str], vars: &[(&str, &str)]) -> Output {
        let mut c = self.env.command(args);
        c.current_dir(&self.proj).env("HOME", &self.user);
        for (k, v) in vars {
            c.env(k, v);
        }
        c.output().expect("run agentbox")
    }

    /// Run the agent command `args` against the model-API stub `stub` (which logs to
    /// `seen`), which is stopped after: the agent must succeed and print the stub's streamed
    /// answer. Returns what the stub saw.
    fn answer_from_stub(
        &self,
        mut stub: std::process::Child,
        seen: &Path,
        args: &[&str],
        vars: &[(&str, &str)],
    ) -> String {
        let out = self.run(args, vars);
        let seen_text = std::fs::read_to_string(seen).unwrap_or_default();
        let _ = stub.kill();
        let _ = stub.wait();
        assert!(
            out.status.success(),
            "{}\nstub saw: {seen_text}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Hello from the stub"),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        seen_text
    }

    /// The test's only box.
    fn only_box(&self) -> String {
        self.env.json(&["list", "--all"])[0]["name"]
            .as_str()
            .expect("name")
            .to_owned()
    }

    fn ok(&self, args: &[&str], vars: &[(&str, &str)]) -> String {
        let out = self.run(args, vars);
        assert!(
            out.status.success(),
            "agentbox {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// The loopback stub of the model APIs (`messages_stub.py`), and its port.
fn start_stub(seen: &Path) -> (std::process::Child, String) {
    let mut stub = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/messages_stub.py"
        ))
        .arg(seen)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the stub");
    let port = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(stub.stdout.as_mut().expect("stdout"))
            .read_line(&mut line)
            .expect("the stub's port");
        line.trim().to_owned()
    };
    if port.parse::<u16>().is_err() {
        let _ = stub.kill();
        let _ = stub.wait();
        panic!("the stub did not start (it printed {port:?})");
    }
    (stub, port)
}

/// A key no box may hold, and a search of box `name` for it (its processes' environments and
/// files): the count of matches, then the files that hold it.
fn search_box_for(s: &Setup, name: &str, key: &str) -> String {
    // Searched for in two halves, so the search's own command line cannot match.
    let (a, b) = key.split_at(key.len() / 2);
    s.ok(
        &[
            "exec",
            name,
            "--",
            "sh",
            "-c",
            &format!(
                "k=\"{a}\"\"{b}\"; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c \"$k\"; grep -rl \"$k\" /root /workspace /run /tmp /etc 2>/dev/null; true"
            ),
        ],
        &[],
    )
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).expect("read")
}
