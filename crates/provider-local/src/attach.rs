//! The caller's side of a session attach (see [`crate::proto::Request::Attach`]): this
//! process's terminal in raw mode, its input to the session (less the detach key), the
//! session's output to it, its size to the session on every `SIGWINCH`.
//!
//! Without a terminal, the output is streamed and standard input forwarded until its end;
//! then the attach lingers until the session has been quiet for [`LINGER`] (so that the
//! answer to the last input is seen), and detaches.
//!
//! Threads: one copies the stream to standard output, one standard input to the stream,
//! one reads the connection (the session's end), one follows `SIGWINCH`; the calling thread
//! waits for the first that says the attach is over, then stops the others (a pipe wakes
//! the input thread, shutting the sockets down ends the others), so that a library caller
//! gets its standard input back.

use std::io::{IsTerminal, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentbox_boxes::sessions::{AttachOpts, AttachOutcome, DetachKey};
use agentbox_boxes::{BoxError, Result};
use agentbox_sandbox::proto::WinSize;

use crate::client::Client;
use crate::proto::{Reply, Request};
use crate::terminal::{restore_sequence, DetachScanner, KeyModes};

/// How long the session must be quiet after the end of a non-terminal's input before the
/// attach detaches.
pub const LINGER: Duration = Duration::from_millis(500);

/// How long the session's last output is waited for once it said its process ended.
const LAST_OUTPUT: Duration = Duration::from_secs(2);

/// What the attach's threads tell the calling thread.
enum Event {
    /// The detach key.
    Detach,
    /// Standard input ended (a terminal: it hung up).
    InputEnded,
    /// The stream ended (the session's process ended, or the supervisor went).
    OutputEnded,
    /// The session's process ended: its status, and whether a checkout killed it.
    Exited(i32, bool),
    /// The connection closed without a word: the box stopped.
    Gone,
}

/// The caller's terminal's size (`None`: it has none that says).
fn terminal_size() -> Option<WinSize> {
    rustix::termios::tcgetwinsize(std::io::stdin())
        .ok()
        .filter(|w| w.ws_row > 0 && w.ws_col > 0)
        .map(|w| WinSize {
            rows: w.ws_row,
            cols: w.ws_col,
        })
}

/// Attach this process to `session` (`None`: the box's only one) of the box `client` is
/// connected to, until it detaches or the session's process ends.
pub fn attach(
    client: Client,
    box_name: &str,
    session: Option<&str>,
    opts: &AttachOpts,
) -> Result<AttachOutcome> {
    let tty = opts
        .tty
        .unwrap_or_else(|| std::io::stdin().is_terminal() && std::io::stdout().is_terminal());
    let size = tty.then(|| terminal_size().unwrap_or(agentbox_boxes::sessions::DEFAULT_SIZE));
    // Caught before the attach: a resize while it is being set up is not lost.
    let winch = if tty {
        Some(signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGWINCH,
        ])?)
    } else {
        None
    };
    let (mine, theirs) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(std::io::Error::from)?;
    client.send(
        &Request::Attach {
            session: session.map(str::to_owned),
            size,
            history: opts.history,
        },
        &[theirs.as_fd()],
    )?;
    drop(theirs);
    let name = match client.recv()?.0 {
        Reply::Attached { session } => session.name,
        other => {
            return Err(BoxError::Supervisor(format!(
                "unexpected reply to an attach: {other:?}"
            )))
        }
    };
    let key = opts.detach_key.clone().unwrap_or_default();
    let raw = if tty {
        crate::client::raw_mode()?
    } else {
        None
    };
    let (tx, rx) = channel::<Event>();
    let mine = Arc::new(mine);
    // What the terminal was made to show, to undo at the end.
    let view = tty.then(|| {
        let size = size.unwrap_or(agentbox_boxes::sessions::DEFAULT_SIZE);
        Arc::new(Mutex::new(vt100::Parser::new_with_callbacks(
            std::num::NonZeroU16::new(size.rows).unwrap_or(std::num::NonZeroU16::MIN),
            std::num::NonZeroU16::new(size.cols).unwrap_or(std::num::NonZeroU16::MIN),
            0,
            KeyModes::default(),
        )))
    });
    let last_output = Arc::new(Mutex::new(Instant::now()));
    let output = {
        let (mine, tx, view, last) = (mine.clone(), tx.clone(), view.clone(), last_output.clone());
        std::thread::spawn(move || copy_output(&mine, view.as_deref(), &last, &tx))
    };
    let (wake_r, wake_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(std::io::Error::from)?;
    let input = {
        let (mine, tx) = (mine.clone(), tx.clone());
        std::thread::spawn(move || copy_input(&mine, &wake_r, &key, &tx))
    };
    let control = client.sock.try_clone()?;
    {
        let tx = tx.clone();
        std::thread::spawn(move || read_control(&control, &tx));
    }
    let winch_handle = match winch {
        Some(mut signals) => {
            let handle = signals.handle();
            let sock = client.sock.try_clone()?;
            let view = view.clone();
            std::thread::spawn(move || {
                for _ in signals.forever() {
                    if let Some(size) = terminal_size() {
                        if let Some(v) = &view {
                            resize_view(v, size);
                        }
                        let resize = Request::Resize { size };
                        if agentbox_sandbox::ipc::send(&sock, &resize, &[]).is_err() {
                            return;
                        }
                    }
                }
            });
            Some(handle)
        }
        None => None,
    };
    drop(tx);
    let outcome = wait(&rx, tty, &last_output, &name);
    // Stop the others: the input thread through its pipe, the rest through the sockets.
    let _ = rustix::io::write(&wake_w, b"x");
    let _ = rustix::net::shutdown(&*mine, rustix::net::Shutdown::Both);
    let _ = rustix::net::shutdown(&client.sock, rustix::net::Shutdown::Both);
    if let Some(h) = winch_handle {
        h.close();
    }
    let _ = input.join();
    let _ = output.join();
    if let Some(v) = &view {
        let v = v.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = std::io::stdout();
        let _ = out.write_all(restore_sequence(v.screen(), v.callbacks()).as_bytes());
        let _ = out.flush();
    }
    drop(raw);
    match outcome {
        Some(o) => Ok(o),
        None => Err(BoxError::NotRunning {
            name: box_name.to_owned(),
        }),
    }
}

/// Wait until the attach is over: its outcome (`None`: the box went away).
fn wait(
    rx: &std::sync::mpsc::Receiver<Event>,
    tty: bool,
    last_output: &Mutex<Instant>,
    session: &str,
) -> Option<AttachOutcome> {
    let detached = || {
        Some(AttachOutcome::Detached {
            session: session.to_owned(),
        })
    };
    let mut input_ended = false;
    let mut output_ended = false;
    let mut exited: Option<(AttachOutcome, Instant)> = None;
    loop {
        let timeout = match (&exited, input_ended) {
            (Some((_, at)), _) => LAST_OUTPUT.saturating_sub(at.elapsed()),
            (None, true) => Duration::from_millis(50),
            (None, false) => Duration::from_secs(3600),
        };
        match rx.recv_timeout(timeout) {
            Ok(Event::Detach) => return detached(),
            Ok(Event::InputEnded) if tty => return detached(),
            Ok(Event::InputEnded) => input_ended = true,
            Ok(Event::OutputEnded) => {
                if let Some((o, _)) = exited {
                    return Some(o);
                }
                output_ended = true;
            }
            Ok(Event::Exited(status, killed_by_checkout)) => {
                let o = AttachOutcome::Exited {
                    session: session.to_owned(),
                    status,
                    killed_by_checkout,
                };
                if output_ended {
                    return Some(o);
                }
                exited = Some((o, Instant::now()));
            }
            Ok(Event::Gone) => return exited.map(|(o, _)| o),
            Err(RecvTimeoutError::Timeout) => {
                if let Some((o, at)) = &exited {
                    if at.elapsed() >= LAST_OUTPUT {
                        return Some(o.clone());
                    }
                }
                let quiet = last_output
                    .lock()
                    .map(|t| t.elapsed() >= LINGER)
                    .unwrap_or(true);
                if input_ended && exited.is_none() && quiet {
                    return detached();
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                return exited.map(|(o, _)| o);
            }
        }
    }
}

fn resize_view(view: &Mutex<vt100::Parser<KeyModes>>, size: WinSize) {
    let mut v = view.lock().unwrap_or_else(|p| p.into_inner());
    v.set_size(
        std::num::NonZeroU16::new(size.rows).unwrap_or(std::num::NonZeroU16::MIN),
        std::num::NonZeroU16::new(size.cols).unwrap_or(std::num::NonZeroU16::MIN),
    );
}

/// The stream to standard output (and to `view`, the terminal's picture of it).
fn copy_output(
    stream: &OwnedFd,
    view: Option<&Mutex<vt100::Parser<KeyModes>>>,
    last: &Mutex<Instant>,
    tx: &Sender<Event>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = std::io::stdout();
    loop {
        let n = match rustix::io::read(stream, &mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break,
        };
        if let Some(v) = view {
            v.lock()
                .unwrap_or_else(|p| p.into_inner())
                .process(&buf[..n]);
        }
        if let Ok(mut t) = last.lock() {
            *t = Instant::now();
        }
        if out.write_all(&buf[..n]).is_err() || out.flush().is_err() {
            break;
        }
    }
    let _ = tx.send(Event::OutputEnded);
}

/// Standard input to the stream, less the detach key, until it ends, the key, or `wake`.
fn copy_input(stream: &OwnedFd, wake: &OwnedFd, key: &DetachKey, tx: &Sender<Event>) {
    use rustix::event::{poll, PollFd, PollFlags};
    let stdin = std::io::stdin();
    let mut scanner = DetachScanner::new(key);
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let mut fds = [
            PollFd::new(&stdin, PollFlags::IN),
            PollFd::new(wake, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        if fds[0].revents().is_empty() {
            continue;
        }
        let n = match rustix::io::read(&stdin, &mut buf) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => continue,
            Err(_) => 0,
        };
        if n == 0 {
            let _ = tx.send(Event::InputEnded);
            return;
        }
        let (bytes, detach) = scanner.feed(&buf[..n]);
        if !bytes.is_empty() && send_all(stream, &bytes).is_err() {
            return;
        }
        if detach {
            let _ = tx.send(Event::Detach);
            return;
        }
    }
}

/// The connection: the session's end, or its close.
fn read_control(sock: &OwnedFd, tx: &Sender<Event>) {
    loop {
        match agentbox_sandbox::ipc::recv::<Reply>(sock) {
            Ok((
                Reply::Exited {
                    status,
                    killed_by_checkout,
                    ..
                },
                _,
            )) => {
                let _ = tx.send(Event::Exited(status, killed_by_checkout));
            }
            Ok(_) | Err(agentbox_sandbox::ipc::IpcError::Malformed(_)) => {}
            Err(_) => {
                let _ = tx.send(Event::Gone);
                return;
            }
        }
    }
}

fn send_all(fd: &OwnedFd, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        match rustix::net::send(fd, bytes, rustix::net::SendFlags::NOSIGNAL) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
