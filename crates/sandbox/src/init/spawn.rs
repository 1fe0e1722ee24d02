//! Starting one box process: fork, then in the child the session, the working directory, the
//! OOM setting, the capability bounding set, `no_new_privs` and the system-call filter, then
//! exec.

use super::*;

pub(super) fn cstring(s: impl AsRef<OsStr>) -> Result<CString, String> {
    CString::new(s.as_ref().as_bytes()).map_err(|_| "an argument contains a NUL byte".to_owned())
}

/// Candidate executables for `argv0`: itself when it has a slash, else each `PATH` entry.
pub(super) fn candidates(argv0: &str, env: &[(String, String)]) -> Result<Vec<CString>, String> {
    if argv0.contains('/') {
        return Ok(vec![cstring(argv0)?]);
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("/usr/local/bin:/usr/bin:/bin");
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| cstring(Path::new(d).join(argv0)))
        .collect()
}

/// Capabilities a box keeps (the set container engines grant by default, less two): enough
/// for package managers and servers, not for mounting, loading modules, changing the host's
/// network or clock, or reaching files outside the box by handle (`CAP_DAC_READ_SEARCH`).
/// `CAP_MKNOD` is not kept (a block device node of a host disk would read it; the box's
/// `/dev` is made for it), nor `CAP_NET_RAW` on the host's network (raw sockets see the
/// host's traffic, loopback included).
pub(super) const KEPT_CAPS: &[u32] = &[
    0,  // CAP_CHOWN
    1,  // CAP_DAC_OVERRIDE
    3,  // CAP_FOWNER
    4,  // CAP_FSETID
    5,  // CAP_KILL
    6,  // CAP_SETGID
    7,  // CAP_SETUID
    8,  // CAP_SETPCAP
    10, // CAP_NET_BIND_SERVICE
    13, // CAP_NET_RAW (not on the host's network: see `dropped_capabilities`)
    18, // CAP_SYS_CHROOT
    29, // CAP_AUDIT_WRITE
    31, // CAP_SETFCAP
];

/// Every capability this kernel knows that a box on `network` does not keep (raw sockets
/// in a namespace of the box's own see only the box's traffic).
pub(super) fn dropped_capabilities(network: Network) -> Vec<u32> {
    const CAP_NET_RAW: u32 = 13;
    let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(40);
    (0..=last)
        .filter(|c| !KEPT_CAPS.contains(c) || (*c == CAP_NET_RAW && network == Network::Host))
        .collect()
}

/// Why a spawn failed, with the status a shell would give it (127: not found, else 126).
pub(super) struct SpawnError {
    pub(super) message: String,
    pub(super) status: i32,
}

impl From<String> for SpawnError {
    fn from(message: String) -> Self {
        SpawnError {
            message,
            status: 126,
        }
    }
}

impl From<&str> for SpawnError {
    fn from(message: &str) -> Self {
        message.to_owned().into()
    }
}

/// The status of a command whose explicit working directory the box does not have: a
/// usage error, as the CLI's own.
pub(super) const BAD_CWD_STATUS: i32 = 2;

/// Fork and exec one process in its own session, in `cwd` (with `exact_cwd`, only there;
/// otherwise in its nearest existing ancestor). Returns its PID and, with a PTY, the
/// terminal's master side.
pub(super) fn spawn(
    argv: &[String],
    env: &[(String, String)],
    cwd: &str,
    exact_cwd: bool,
    pty: Option<crate::proto::WinSize>,
    fds: Vec<OwnedFd>,
    hardening: &Hardening,
) -> Result<(i32, Option<OwnedFd>), SpawnError> {
    let argv0 = argv.first().ok_or("empty command")?;
    // Everything the child needs is prepared before fork.
    let c_argv = argv.iter().map(cstring).collect::<Result<Vec<_>, _>>()?;
    let c_env = env
        .iter()
        .map(|(k, v)| cstring(format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()?;
    let paths = candidates(argv0, env)?;
    // The directory and its ancestors, nearest first: a command whose default directory
    // does not exist in the box starts in the nearest one that does. A directory the user
    // named is the only candidate, and its absence is said before anything is forked (the
    // child's failed chdir is reported too, for a directory removed in between).
    if exact_cwd && !Path::new(cwd).is_dir() {
        return Err(bad_cwd(
            cwd,
            &std::io::Error::from_raw_os_error(libc::ENOENT),
        ));
    }
    let c_cwds = std::path::Path::new(cwd)
        .ancestors()
        .take(if exact_cwd { 1 } else { usize::MAX })
        .map(|d| cstring(d.to_string_lossy().as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    let drop_caps = &hardening.drop_caps;
    let mut argv_ptrs: Vec<*const libc::c_char> = c_argv.iter().map(|c| c.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const libc::c_char> = c_env.iter().map(|c| c.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());

    let (master, slave_path) = match pty {
        Some(size) => {
            let master = rustix::pty::openpt(
                rustix::pty::OpenptFlags::RDWR
                    | rustix::pty::OpenptFlags::NOCTTY
                    | rustix::pty::OpenptFlags::CLOEXEC,
            )
            .map_err(|e| err("opening a terminal", std::io::Error::from(e)))?;
            rustix::pty::grantpt(&master).map_err(|e| err("grantpt", std::io::Error::from(e)))?;
            rustix::pty::unlockpt(&master).map_err(|e| err("unlockpt", std::io::Error::from(e)))?;
            let name = rustix::pty::ptsname(&master, Vec::new())
                .map_err(|e| err("ptsname", std::io::Error::from(e)))?;
            let _ = rustix::termios::tcsetwinsize(
                &master,
                rustix::termios::Winsize {
                    ws_row: size.rows,
                    ws_col: size.cols,
                    ws_xpixel: 0,
                    ws_ypixel: 0,
                },
            );
            (Some(master), Some(name))
        }
        None => {
            if fds.len() != 3 {
                return Err(format!("expected 3 descriptors, got {}", fds.len()).into());
            }
            (None, None)
        }
    };
    let stdio: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let (err_r, err_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| err("pipe", std::io::Error::from(e)))?;

    // SAFETY: PID 1 is single-threaded; the child only makes syscalls on data prepared above
    // and leaves by exec or _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(err("fork", std::io::Error::last_os_error()).into());
    }
    if pid == 0 {
        // SAFETY: see above.
        unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            // The runtime ignores SIGPIPE; commands expect the default.
            for sig in 1..32 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            libc::setsid();
            // The OOM killer's first choice, before PID 1.
            let fd = libc::open(OOM_SCORE_ADJ.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, BOX_OOM_ADJ.as_ptr().cast(), BOX_OOM_ADJ.len());
                libc::close(fd);
            }
            // Out of the bounding set, so no program the box runs regains them (root's
            // file capabilities are bounded by it).
            for cap in drop_caps {
                libc::prctl(libc::PR_CAPBSET_DROP, *cap as libc::c_ulong, 0, 0, 0);
            }
            // No privilege gained by exec (setuid files, file capabilities), and the
            // system-call filter (which sets no_new_privs itself) for everything the
            // command starts. A box command never runs without it.
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || !hardening.filters.install()
            {
                child_fail(err_w.as_raw_fd());
            }
            if let Some(name) = &slave_path {
                let fd = libc::open(name.as_ptr(), libc::O_RDWR);
                if fd < 0 {
                    child_fail(err_w.as_raw_fd());
                }
                libc::ioctl(fd, libc::TIOCSCTTY, 0);
                for target in 0..3 {
                    libc::dup2(fd, target);
                }
                if fd > 2 {
                    libc::close(fd);
                }
            } else {
                // Move the sources above 2 first so no dup2 overwrites a later source.
                let mut moved = [0; 3];
                for (i, fd) in stdio.iter().enumerate() {
                    moved[i] = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 10);
                }
                for (target, fd) in moved.iter().enumerate() {
                    if *fd < 0 || libc::dup2(*fd, target as i32) < 0 {
                        child_fail(err_w.as_raw_fd());
                    }
                }
            }
            let mut entered = false;
            for d in &c_cwds {
                if libc::chdir(d.as_ptr()) == 0 {
                    entered = true;
                    break;
                }
            }
            if exact_cwd && !entered {
                // A negative errno tells the parent it was the directory, not the program.
                *libc::__errno_location() = -*libc::__errno_location();
                child_fail(err_w.as_raw_fd());
            }
            let mut last = libc::ENOENT;
            for p in &paths {
                libc::execve(p.as_ptr(), argv_ptrs.as_ptr(), env_ptrs.as_ptr());
                let e = *libc::__errno_location();
                // Keep the most telling error: a permission problem beats "not found".
                if e != libc::ENOENT || last == libc::ENOENT {
                    last = e;
                }
            }
            *libc::__errno_location() = last;
            child_fail(err_w.as_raw_fd());
        }
    }
    drop(err_w);
    drop(fds);
    let mut buf = [0u8; 4];
    let n = rustix::io::read(&err_r, &mut buf).unwrap_or(0);
    if n == 4 {
        let errno = i32::from_ne_bytes(buf);
        let mut status = 0;
        // SAFETY: reaping the child that failed to exec.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if errno < 0 {
            return Err(bad_cwd(cwd, &std::io::Error::from_raw_os_error(-errno)));
        }
        let e = std::io::Error::from_raw_os_error(errno);
        return Err(if errno == libc::ENOENT {
            SpawnError {
                message: format!("{argv0}: command not found in the box"),
                status: 127,
            }
        } else {
            format!("cannot run {argv0}: {e}").into()
        });
    }
    Ok((pid, master))
}

/// The failure of a command whose explicit working directory cannot be entered.
pub(super) fn bad_cwd(cwd: &str, e: &std::io::Error) -> SpawnError {
    let message = if e.kind() == std::io::ErrorKind::NotFound {
        format!("the working directory {cwd} does not exist in the box")
    } else {
        format!("cannot enter the working directory {cwd} in the box: {e}")
    };
    SpawnError {
        message,
        status: BAD_CWD_STATUS,
    }
}
