//! Sessions end to end: the real binary, real boxes, and the client side on a real
//! pseudo-terminal (this test holds its master side and reads what `agentbox attach` draws
//! through a VT parser, as a terminal emulator would).

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use crate::common::{kill9, kill_supervisors, write, Env};
use agentbox_testkit::tier::{require_root, require_tool};

/// A temporary home with one box, whose supervisors are killed when the test ends.
struct Fixture {
    env: Env,
    name: &'static str,
}

impl Fixture {
    fn new(test: &str, name: &'static str) -> Option<Fixture> {
        if !require_root(test) || !require_tool(test, "setsid") {
            return None;
        }
        let env = Env::new();
        let proj = env.home.path().join("proj");
        write(&proj.join("README"), "readme\n");
        let from = proj.to_str().expect("utf-8 path");
        env.ok(&["create", name, "--from", from]);
        Some(Fixture { env, name })
    }

    /// `session start BOX -d --name NAME [extra…] -- ARGV…`.
    fn start(&self, session: &str, extra: &[&str], argv: &[&str]) {
        let mut args = vec!["session", "start", self.name, "-d", "--name", session];
        args.extend_from_slice(extra);
        args.push("--");
        args.extend_from_slice(argv);
        self.env.ok(&args);
    }

    fn sessions(&self) -> Vec<serde_json::Value> {
        self.env
            .json(&["sessions", self.name])
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn session(&self, name: &str) -> Option<serde_json::Value> {
        self.sessions().into_iter().find(|s| s["name"] == name)
    }

    /// Wait until session `name`'s listing satisfies `pred`.
    fn wait_for(&self, name: &str, what: &str, pred: impl Fn(&serde_json::Value) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.session(name);
            if s.as_ref().is_some_and(&pred) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "session {name}: {what}; it is {s:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `agentbox ARGS` on a new terminal of `rows`×`cols`.
    fn term(&self, args: &[&str], rows: u16, cols: u16) -> Term {
        Term::spawn(
            &self.env.path("home"),
            self.env.home.path(),
            args,
            rows,
            cols,
        )
    }

    fn attach(&self, session: &str) -> Term {
        self.term(&["attach", self.name, session], 24, 80)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        kill_supervisors(&self.env.path("home"));
    }
}

/// A program running on a pseudo-terminal this test holds, as a person's terminal would
/// run it: its output goes through a VT parser (the screen the person sees).
struct Term {
    master: std::fs::File,
    child: Child,
    chunks: Receiver<Vec<u8>>,
    screen: vt100::Parser,
    /// Everything it printed (to look for text that scrolled or was redrawn away).
    seen: Vec<u8>,
}

impl Term {
    fn spawn(home: &Path, dir: &Path, args: &[&str], rows: u16, cols: u16) -> Term {
        use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
        let master: OwnedFd =
            openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).expect("openpt");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        let name = ptsname(&master, Vec::new()).expect("ptsname");
        let slave_path = PathBuf::from(name.to_string_lossy().into_owned());
        let master = std::fs::File::from(master);
        set_size(&master, rows, cols);
        let slave = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOCTTY)
                .open(&slave_path)
                .expect("open the terminal")
        };
        // `setsid -c`: a session of its own whose controlling terminal is this one (so
        // that it gets SIGWINCH), as a login shell's child would have.
        let child = Command::new("setsid")
            .arg("-c")
            .arg(env!("CARGO_BIN_EXE_agentbox"))
            .args(args)
            .env("AGENTBOX_HOME", home)
            .env("TERM", "xterm-256color")
            .env_remove("AGENTBOX_FAILPOINT")
            .current_dir(dir)
            .stdin(Stdio::from(slave.try_clone().expect("dup")))
            .stdout(Stdio::from(slave.try_clone().expect("dup")))
            .stderr(Stdio::from(slave))
            .spawn()
            .expect("spawn agentbox on a terminal");
        let (tx, chunks) = channel();
        let mut reader = master.try_clone().expect("dup master");
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            // EIO once the program and everything it left are gone.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
        });
        Term {
            master,
            child,
            chunks,
            screen: vt100::Parser::new(
                std::num::NonZeroU16::new(rows).expect("rows"),
                std::num::NonZeroU16::new(cols).expect("cols"),
                1000,
            ),
            seen: Vec::new(),
        }
    }

    fn pump(&mut self, wait: Duration) {
        if let Ok(chunk) = self.chunks.recv_timeout(wait) {
            self.screen.process(&chunk);
            self.seen.extend(chunk);
        }
        while let Ok(chunk) = self.chunks.try_recv() {
            self.screen.process(&chunk);
            self.seen.extend(chunk);
        }
    }

    /// Wait until the screen satisfies `pred`.
    fn expect_screen(&mut self, what: &str, pred: impl Fn(&vt100::Screen) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !pred(self.screen.screen()) {
            assert!(
                Instant::now() < deadline,
                "the terminal never showed {what}; it shows:\n{}\n(it was sent {:?})",
                self.screen.screen().contents(),
                String::from_utf8_lossy(&self.seen)
            );
            self.pump(Duration::from_millis(50));
        }
    }

    /// Wait until the screen shows `text`.
    fn expect(&mut self, text: &str) {
        self.expect_screen(&format!("{text:?}"), |s| s.contents().contains(text));
    }

    /// Wait until `text` was printed (whether or not it is still on the screen).
    fn expect_printed(&mut self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !String::from_utf8_lossy(&self.seen).contains(text) {
            assert!(
                Instant::now() < deadline,
                "{text:?} was never printed; got {:?}",
                String::from_utf8_lossy(&self.seen)
            );
            self.pump(Duration::from_millis(50));
        }
    }

    fn type_(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).expect("type");
    }

    /// Detach with the default key (Ctrl-\ then d) and wait for the attach to end.
    fn detach(&mut self) -> i32 {
        self.type_(b"\x1c");
        std::thread::sleep(Duration::from_millis(50));
        self.type_(b"d");
        self.wait()
    }

    /// Wait for the program to end (while reading what it prints): its exit code.
    fn wait(&mut self) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                self.pump(Duration::from_millis(200));
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "the attach did not end; the terminal shows:\n{}",
                self.screen.screen().contents()
            );
            self.pump(Duration::from_millis(50));
        }
    }

    fn resize(&mut self, rows: u16, cols: u16) {
        set_size(&self.master, rows, cols);
        self.screen.set_size(
            std::num::NonZeroU16::new(rows).expect("rows"),
            std::num::NonZeroU16::new(cols).expect("cols"),
        );
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn set_size(master: &std::fs::File, rows: u16, cols: u16) {
    rustix::termios::tcsetwinsize(
        master,
        rustix::termios::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )
    .expect("set the terminal's size");
}

#[test]
fn an_attach_redraws_the_screen_forwards_input_and_ends_with_the_exit_status() {
    let Some(f) = Fixture::new(
        "an_attach_redraws_the_screen_forwards_input_and_ends_with_the_exit_status",
        "sess1",
    ) else {
        return;
    };
    f.start(
        "s",
        &[],
        &["sh", "-c", "echo hello; read x; echo got $x; exit 3"],
    );
    let mut t = f.attach("s");
    // Printed before anyone attached: the redraw shows it.
    t.expect("hello");
    t.type_(b"abc\r");
    t.expect("got abc");
    assert_eq!(t.wait(), 3, "the attach ends with the session's status");
    // Its end was seen by a terminal that is gone now: the session is too.
    assert!(f.session("s").is_none(), "{:?}", f.sessions());
    // Without -d, `session start` attaches at once.
    let mut fg = f.term(
        &[
            "session",
            "start",
            f.name,
            "--name",
            "fg",
            "--",
            "sh",
            "-c",
            "echo fg-up; read x; exit 5",
        ],
        24,
        80,
    );
    fg.expect("fg-up");
    fg.type_(b"q\r");
    assert_eq!(fg.wait(), 5);
    // Its process is one of the box's, of its own kind.
    f.start("listed", &[], &["sleep", "1003"]);
    let ps = f.env.json(&["ps", f.name]);
    assert!(
        ps.as_array().is_some_and(|a| a
            .iter()
            .any(|p| p["kind"] == "session" && p["argv"][1] == "1003")),
        "{ps}"
    );
}

#[test]
fn detaching_leaves_the_session_running_and_a_second_attach_redraws_it() {
    let Some(f) = Fixture::new(
        "detaching_leaves_the_session_running_and_a_second_attach_redraws_it",
        "sess2",
    ) else {
        return;
    };
    f.start(
        "loop",
        &[],
        &[
            "sh",
            "-c",
            "echo ready; while read x; do echo \"echo:$x\"; done",
        ],
    );
    let mut t = f.attach("loop");
    t.expect("ready");
    t.type_(b"one\r");
    t.expect("echo:one");
    assert_eq!(t.detach(), 0);
    t.expect_printed("detached from session loop");
    drop(t);
    f.wait_for("loop", "running with no client", |s| {
        s["state"] == "running" && s["clients"] == 0
    });
    let mut again = f.attach("loop");
    again.expect("echo:one");
    again.type_(b"two\r");
    again.expect("echo:two");
    assert_eq!(again.detach(), 0);
    // A detach key of one's own.
    let mut own = f.term(
        &["attach", f.name, "loop", "--detach-key", "ctrl-]"],
        24,
        80,
    );
    own.expect("echo:two");
    own.type_(b"\x1d");
    assert_eq!(own.wait(), 0);
    f.wait_for("loop", "still running", |s| s["state"] == "running");
}

#[test]
fn two_terminals_attached_at_once_both_see_the_output_and_both_type() {
    let Some(f) = Fixture::new(
        "two_terminals_attached_at_once_both_see_the_output_and_both_type",
        "sess3",
    ) else {
        return;
    };
    f.start(
        "shared",
        &[],
        &["sh", "-c", "while read x; do echo \"got:$x\"; done"],
    );
    let mut a = f.attach("shared");
    let mut b = f.attach("shared");
    f.wait_for("shared", "two clients", |s| s["clients"] == 2);
    a.type_(b"from-a\r");
    a.expect("got:from-a");
    b.expect("got:from-a");
    b.type_(b"from-b\r");
    a.expect("got:from-b");
    b.expect("got:from-b");
    assert_eq!(a.detach(), 0);
    f.wait_for("shared", "one client", |s| s["clients"] == 1);
    b.type_(b"still\r");
    b.expect("got:still");
    assert_eq!(b.detach(), 0);
}

#[test]
fn a_full_screen_program_is_redrawn_in_place_and_the_terminal_given_back() {
    let Some(f) = Fixture::new(
        "a_full_screen_program_is_redrawn_in_place_and_the_terminal_given_back",
        "sess4",
    ) else {
        return;
    };
    f.start(
        "full",
        &[],
        &[
            "sh",
            "-c",
            "printf '\\033[?1049h\\033[2J\\033[5;5Hmark\\033[?2004h'; sleep 1000",
        ],
    );
    for _ in 0..2 {
        let mut t = f.attach("full");
        t.expect_screen("mark at row 5, column 5", |s| {
            s.cell(4, 4).is_some_and(|c| c.contents() == "m")
                && s.contents()
                    .lines()
                    .nth(4)
                    .is_some_and(|l| l.trim() == "mark")
        });
        assert!(t.screen.screen().alternate_screen());
        assert!(t.screen.screen().bracketed_paste());
        assert_eq!(t.screen.screen().cursor_position(), (4, 8));
        assert_eq!(t.detach(), 0);
        // The terminal is given back as it was: main screen, no bracketed paste.
        assert!(!t.screen.screen().alternate_screen());
        assert!(!t.screen.screen().bracketed_paste());
    }
}

#[test]
fn the_session_follows_the_most_recent_terminals_size() {
    let Some(f) = Fixture::new(
        "the_session_follows_the_most_recent_terminals_size",
        "sess5",
    ) else {
        return;
    };
    f.start(
        "size",
        &[],
        &[
            "sh",
            "-c",
            "while read x; do echo \"size:$(stty size)\"; done",
        ],
    );
    let mut t = f.term(&["attach", f.name, "size"], 30, 100);
    t.type_(b"\r");
    t.expect("size:30 100");
    t.resize(40, 120);
    f.wait_for("size", "40x120", |s| {
        s["size"]["rows"] == 40 && s["size"]["cols"] == 120
    });
    t.type_(b"\r");
    t.expect("size:40 120");
    // A second terminal's attach makes its size the session's.
    let mut small = f.term(&["attach", f.name, "size"], 20, 60);
    small.type_(b"\r");
    small.expect("size:20 60");
    assert_eq!(small.detach(), 0);
    assert_eq!(t.detach(), 0);
}

#[test]
fn killing_the_attached_command_leaves_the_session_running() {
    let Some(f) = Fixture::new(
        "killing_the_attached_command_leaves_the_session_running",
        "sess6",
    ) else {
        return;
    };
    f.start(
        "survivor",
        &[],
        &[
            "sh",
            "-c",
            "echo up; while read x; do echo \"got:$x\"; done",
        ],
    );
    let mut t = f.attach("survivor");
    t.expect("up");
    f.wait_for("survivor", "one client", |s| s["clients"] == 1);
    kill9(t.child.id() as i32);
    let _ = t.wait();
    drop(t);
    f.wait_for("survivor", "running with no client", |s| {
        s["state"] == "running" && s["clients"] == 0
    });
    let mut again = f.attach("survivor");
    again.type_(b"after\r");
    again.expect("got:after");
    assert_eq!(again.detach(), 0);
}

#[test]
fn a_checkout_kills_sessions_and_supervised_ones_are_relaunched() {
    let Some(f) = Fixture::new(
        "a_checkout_kills_sessions_and_supervised_ones_are_relaunched",
        "sess7",
    ) else {
        return;
    };
    f.start("watched", &[], &["sleep", "1000"]);
    f.start("alone", &[], &["sleep", "1001"]);
    f.start(
        "agent",
        &["--supervise"],
        &["sh", "-c", "echo launched-$((40+2)); sleep 1002"],
    );
    let mut watched = f.attach("watched");
    f.wait_for("watched", "one client", |s| s["clients"] == 1);
    let mut agent = f.attach("agent");
    agent.expect("launched-42");
    f.env.ok(&["checkout", f.name, "HEAD"]);
    // The attached one ends as a command a checkout killed does.
    assert_eq!(watched.wait(), 137);
    watched.expect_printed("killed by a checkout");
    // The one nobody watched stays listed, killed, until a prune.
    f.wait_for("alone", "killed by the checkout", |s| {
        s["state"] == "exited" && s["killed_by_checkout"] == true && s["status"] == 137
    });
    // The supervised one came back, and its terminal stayed attached.
    f.wait_for("agent", "relaunched", |s| {
        s["state"] == "running" && s["launches"] == 2 && s["clients"] == 1
    });
    agent.expect_printed("relaunching");
    let printed = |t: &Term| {
        String::from_utf8_lossy(&t.seen)
            .matches("launched-42")
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while printed(&agent) < 2 {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            String::from_utf8_lossy(&agent.seen)
        );
        agent.pump(Duration::from_millis(50));
    }
    assert_eq!(agent.detach(), 0);
    let pruned = f.env.run(&["sessions", f.name, "--prune"]);
    assert!(pruned.status.success());
    let names: Vec<String> = f
        .sessions()
        .iter()
        .map(|s| s["name"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(names, ["agent"]);
}

#[test]
fn without_a_terminal_attach_streams_output_and_forwards_stdin_until_its_end() {
    let Some(f) = Fixture::new(
        "without_a_terminal_attach_streams_output_and_forwards_stdin_until_its_end",
        "sess8",
    ) else {
        return;
    };
    f.start(
        "plain",
        &[],
        &[
            "sh",
            "-c",
            "echo first; while read x; do echo \"got:$x\"; done",
        ],
    );
    let mut child = f
        .env
        .command(&["attach", f.name, "plain"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("attach");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"piped\n")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("first") && text.contains("got:piped"),
        "{text}"
    );
    // The end of its input detached it; the session goes on.
    f.wait_for("plain", "running with no client", |s| {
        s["state"] == "running" && s["clients"] == 0
    });
    // Names are unique; the default is the command's name.
    let taken = f.env.run(&[
        "session", "start", f.name, "-d", "--name", "plain", "--", "true",
    ]);
    assert_eq!(taken.status.code(), Some(4));
    f.env
        .ok(&["session", "start", f.name, "-d", "--", "sleep", "1000"]);
    f.env
        .ok(&["session", "start", f.name, "-d", "--", "sleep", "1000"]);
    let names: Vec<String> = f
        .sessions()
        .iter()
        .map(|s| s["name"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(names, ["plain", "sleep", "sleep-2"]);
    let table = f.env.ok(&["sessions", f.name]);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.contains("sleep-2") && table.contains("running"),
        "{table}"
    );
    // Several sessions: attach needs a name.
    let which = f.env.run(&["attach", f.name]);
    assert_eq!(which.status.code(), Some(2), "{which:?}");
}
