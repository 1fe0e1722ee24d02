//! The user's terminal, attacked from a box: an `exec` hands it to the box's command only,
//! and no box daemon keeps it (or types into it) after the command ends. Root and rootless.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{boxed, GitBox, Sec};

/// Where one of `exec`'s standard streams goes.
#[derive(Clone, Copy, Debug)]
enum End {
    Terminal,
    File,
    Null,
}

/// A pseudo-terminal: the side a user types into (`master`) and the device a program gets.
struct Pty {
    master: std::fs::File,
    slave_path: PathBuf,
    /// The terminal device's number, to find every process that holds it.
    rdev: u64,
}

impl Pty {
    fn new() -> Pty {
        use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
        let master: OwnedFd =
            openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).expect("openpt");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        let name = ptsname(&master, Vec::new()).expect("ptsname");
        let slave_path = PathBuf::from(name.to_string_lossy().into_owned());
        let rdev = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(&slave_path).expect("stat").rdev()
        };
        Pty {
            master: std::fs::File::from(master),
            slave_path,
            rdev,
        }
    }

    fn slave(&self) -> std::fs::File {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(&self.slave_path)
            .expect("open the terminal")
    }

    /// The processes other than this test and `shell` (the user's shell) that hold the
    /// terminal open (pid, fd).
    fn holders(&self, shell: u32) -> Vec<(String, String)> {
        use std::os::unix::fs::MetadataExt;
        let me = std::process::id().to_string();
        let shell = shell.to_string();
        let mut found = Vec::new();
        for p in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let pid = p.file_name().to_string_lossy().into_owned();
            if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me || pid == shell {
                continue;
            }
            let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
                continue;
            };
            for fd in fds.flatten() {
                // The magic link is followed whatever the process's root and namespaces.
                if let Ok(m) = std::fs::metadata(fd.path()) {
                    if m.rdev() == self.rdev && m.file_type().is_char_device() {
                        found.push((pid.clone(), fd.file_name().to_string_lossy().into_owned()));
                    }
                }
            }
        }
        found
    }

    /// Start collecting what the terminal shows.
    fn collect(&self) -> std::sync::Arc<std::sync::Mutex<Vec<u8>>> {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = seen.clone();
        let mut m = self.master.try_clone().expect("dup");
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = m.read(&mut buf) {
                if n == 0 {
                    return;
                }
                into.lock().expect("lock").extend_from_slice(&buf[..n]);
            }
        });
        seen
    }
}

/// What `seen` holds once it has `want` (or after a few seconds, what it has).
fn shown(seen: &std::sync::Mutex<Vec<u8>>, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = String::from_utf8_lossy(&seen.lock().expect("lock")).into_owned();
        if text.contains(want) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A login shell of its own session, whose controlling terminal is `pty` when standard input
/// is it, runs `agentbox exec BOX -- sh -c SCRIPT` with its standard streams as `ends` say (a
/// file: `out`), as `nobody` with that agentbox home when `nobody` is given; the shell stays
/// (the session's leader, as the user's shell would) until the returned child is killed.
/// Returns exec's exit status too.
#[allow(clippy::too_many_arguments)]
fn exec_on(
    s: &Sec,
    nobody: Option<&Path>,
    name: &str,
    pty: &Pty,
    ends: [End; 3],
    out: &Path,
    script: &str,
) -> (i32, std::process::Child) {
    let file = std::fs::File::create(out).expect("create the output file");
    let stdio = |e: End| -> Stdio {
        match e {
            End::Terminal => Stdio::from(pty.slave()),
            End::File => Stdio::from(file.try_clone().expect("dup")),
            End::Null => Stdio::null(),
        }
    };
    let status_file = s.env.path("exec-status");
    let _ = std::fs::remove_file(&status_file);
    let mut cmd = Command::new("setsid");
    if matches!(ends[0], End::Terminal) {
        // The terminal becomes the session's controlling one (from standard input).
        cmd.arg("-c");
    }
    cmd.args([
        "sh",
        "-c",
        "\"$@\"; echo $? > \"$STATUS_FILE\"; exec sleep 600",
        "sh",
    ])
    .env("STATUS_FILE", &status_file);
    match nobody {
        Some(home) => {
            let exe = home.join("agentbox");
            if !exe.exists() {
                std::fs::copy(env!("CARGO_BIN_EXE_agentbox"), &exe).expect("copy the binary");
            }
            cmd.args([
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ])
            .arg(exe)
            .env("AGENTBOX_HOME", home)
            .env("HOME", home)
            .current_dir("/");
        }
        None => {
            cmd.arg(env!("CARGO_BIN_EXE_agentbox"))
                .env("AGENTBOX_HOME", s.env.path("home"))
                .current_dir(s.env.home.path());
        }
    }
    cmd.args(["exec", name, "--", "sh", "-c", script])
        .env_remove("AGENTBOX_FAILPOINT")
        .stdin(stdio(ends[0]))
        .stdout(stdio(ends[1]))
        .stderr(stdio(ends[2]));
    let mut child = cmd.spawn().expect("run agentbox exec");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_file) {
            if text.ends_with('\n') {
                break text.trim().parse().unwrap_or(-1);
            }
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("agentbox exec never ended");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, child)
}

/// A box daemon started by an `exec` whose streams are partly a terminal keeps what it was
/// given; the terminal must not be among it. Then the user types a password at the host
/// shell: the box never reads it.
fn a_terminal_never_reaches_a_box(test: &str, rootless: bool) {
    // The rootless case uses the git box `g` run by `nobody`; the root one a plain box.
    let (g, s) = if rootless {
        let Some(g) = GitBox::new(test, true) else {
            return;
        };
        (Some(g), None)
    } else {
        let Some(s) = boxed(test, "t", &[]) else {
            return;
        };
        (None, Some(s))
    };
    let (s, nobody, name) = match (&g, &s) {
        (Some(g), _) => (&g.s, g.nobody.as_deref(), "g"),
        (None, Some(s)) => (s, None, "t"),
        (None, None) => unreachable!(),
    };
    let out = s.env.path("exec-output");
    for (i, ends) in [
        [End::Terminal, End::File, End::File],
        [End::Null, End::Terminal, End::File],
        [End::Null, End::File, End::Terminal],
        [End::Terminal, End::Terminal, End::File],
    ]
    .into_iter()
    .enumerate()
    {
        let pty = Pty::new();
        let seen = pty.collect();
        // What a user typed before: the command reads it (through whatever it was given).
        pty.master
            .try_clone()
            .expect("dup")
            .write_all(b"typed\n")
            .expect("type");
        // A daemon keeps the command's three streams, reading its input into a file (through
        // a copy: a shell gives a background job /dev/null as its standard input).
        let script = format!(
            "read line; echo \"read:$line\"; echo to-stderr >&2;
             exec 3<&0; setsid sh -c 'cat <&3 > /workspace/stolen-{i}; exec sleep 600' &"
        );
        let (status, mut shell) = exec_on(s, nobody, name, &pty, ends, &out, &script);
        let written = std::fs::read_to_string(&out).expect("read the output");
        assert_eq!(status, 0, "{ends:?}: {written}");
        // The command's output arrived where it was sent, terminal or file.
        let on_terminal = match ends {
            [_, End::Terminal, _] => "read:",
            [_, _, End::Terminal] => "to-stderr",
            _ => "",
        };
        let shown = shown(&seen, on_terminal) + &written;
        if matches!(ends[0], End::Terminal) {
            assert!(shown.contains("read:typed"), "{ends:?}: {shown:?}");
        }
        assert!(shown.contains("to-stderr"), "{ends:?}: {shown:?}");
        // `exec` returned; its daemon lives on in the box. Nothing but this test holds the
        // terminal.
        let holders = pty.holders(shell.id());
        assert!(
            holders.is_empty(),
            "{ends:?}: processes kept the user's terminal: {holders:?}"
        );
        // The user types a password at the host shell.
        pty.master
            .try_clone()
            .expect("dup")
            .write_all(b"hunter2\n")
            .expect("type");
        let stolen = wait_for_file(s, nobody, name, &format!("/workspace/stolen-{i}"));
        let _ = shell.kill();
        let _ = shell.wait();
        assert!(
            !stolen.contains("hunter2"),
            "{ends:?}: the box read what was typed on the host's terminal"
        );
    }
}

/// The content of `path` in box `name` once some process has written it (or after a few
/// seconds, what is there: empty when nothing came).
fn wait_for_file(s: &Sec, nobody: Option<&Path>, name: &str, path: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let script = format!("cat {path} 2>/dev/null");
        let args = ["exec", name, "--", "sh", "-c", &script];
        let out = match nobody {
            Some(home) => crate::common::as_nobody(home, &args),
            None => s.env.run(&args),
        };
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !text.is_empty() || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_terminal_never_reaches_a_box_root() {
    a_terminal_never_reaches_a_box("a_terminal_never_reaches_a_box_root", false);
}

#[test]
fn a_terminal_never_reaches_a_box_rootless() {
    a_terminal_never_reaches_a_box("a_terminal_never_reaches_a_box_rootless", true);
}
