//! Sessions end to end: the real binary, real boxes, and the client side on a real
//! pseudo-terminal (this test holds its master side and reads what `agentbox attach` draws
//! through a VT parser, as a terminal emulator would).
//!
//! The fixture (a box, a terminal) is here; the tests in the files beside it.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use crate::common::{kill_supervisors, write, Env};
use agentbox_testkit::tier::{require_root, require_tool};

mod attach;
mod lifetime;

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
