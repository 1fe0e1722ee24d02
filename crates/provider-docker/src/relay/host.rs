//! The host's end of a Docker box's relay: a process of its own per box (`agentbox
//! __docker-relay BOX`, started by [`crate::relay::keeper`]) that runs the in-box bridge in
//! the box's container as one long `docker exec` and answers what comes over it with
//! exactly the local relay's policy: the calls decode as [`RelayCall`]s only (unknown
//! operations and fields refused), are checked ([`RelayCall::check`]) and answered by the
//! front end's [`RelayHandler`] for this box only (it resolves every reference in the box's
//! own history); frames are bounded ([`frame`]); what the box sends is escaped before the
//! host prints it (its log).
//!
//! The exec is only a stream to the engine, so a remote engine (TCP with TLS, SSH) serves
//! as well as the local one. When the exec ends — the container stopped or made again by
//! a checkout — the relay starts it again once the container runs, copying the in-box
//! binary first when the container lacks it; it ends once the box is gone, or its container
//! stayed stopped for [`IDLE`].

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentbox_boxes::records::record::{self, BoxDirs};
use agentbox_boxes::relay::{RelayCall, RelayHandler};
use agentbox_boxes::Result;
use agentbox_core::exit::ExitCode;
use agentbox_core::lock::{FileLock, Mode};
use agentbox_docker::exec::ExecSpec;
use agentbox_docker::Engine;

use super::frame::{self, Frame, Kind};
use super::inbox_bin;
use crate::names;
use crate::provider::DockerProvider;

/// The in-box command that runs the bridge.
pub const BRIDGE_COMMAND: &str = "__relay-bridge";
/// How long a relay waits for a stopped container to run again before it ends.
pub const IDLE: Duration = Duration::from_secs(20);
/// The most calls answered at once for one box.
pub const MAX_CALLS: usize = 16;

/// What the host takes from a box.
const HOST_TAKES: &[Kind] = &[Kind::Call];

/// The lock a box's relay holds while it runs.
pub fn lock_path(p: &DockerProvider, name: &str) -> std::path::PathBuf {
    BoxDirs::new(&p.home, name).dir.join("docker-relay.lock")
}

/// Serve box `name`'s relay until the box is gone or stays stopped (see the module's
/// documentation); at once when another relay serves it.
pub fn serve(p: &DockerProvider, name: &str, handler: Arc<dyn RelayHandler>) -> Result<()> {
    let _lock = match FileLock::acquire(
        &lock_path(p, name),
        Mode::TryExclusive,
        &format!("the relay of box {name:?}"),
        "relay",
    ) {
        Ok(l) => l,
        Err(agentbox_core::Error::Locked { .. }) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let spool = BoxDirs::new(&p.home, name).dir;
    let container = names::container(name);
    let mut stopped_since: Option<Instant> = None;
    let mut quick_ends = 0u32;
    loop {
        if record::read(&p.home, name).is_err() {
            return Ok(());
        }
        let (_, engine) = p.boxed(name)?;
        if !p.running(&engine, name)? {
            if stopped_since.get_or_insert_with(Instant::now).elapsed() > IDLE {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(300));
            continue;
        }
        stopped_since = None;
        inbox_bin::ensure(&engine, &container, &spool)?;
        let began = Instant::now();
        match session(&engine, &container, name, &handler) {
            Ok(status) => eprintln!("agentbox relay: the bridge of box {name:?} ended ({status})"),
            Err(e) => eprintln!("agentbox relay: the bridge of box {name:?} failed: {e}"),
        }
        // A bridge that cannot run ends at once: do not start it in a tight loop.
        if began.elapsed() < Duration::from_secs(2) {
            quick_ends += 1;
            std::thread::sleep(Duration::from_millis(200 * u64::from(quick_ends.min(25))));
        } else {
            quick_ends = 0;
        }
    }
}

/// Writes frames to the bridge's stdin, from any thread.
#[derive(Clone)]
struct ToBox(Arc<Mutex<std::io::PipeWriter>>);

impl ToBox {
    fn send(&self, conn: u32, kind: Kind, payload: &[u8]) -> bool {
        let bytes = frame::encode(conn, kind, payload);
        let mut w = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        w.write_all(&bytes).and_then(|()| w.flush()).is_ok()
    }

    /// Refuse call `conn` with `why` (on its stderr) and the usage status.
    fn refuse(&self, conn: u32, why: &str) {
        // A box can ask for refusals as fast as it likes: the log stays bounded.
        cap_own_log();
        eprintln!(
            "agentbox relay: refused request {conn} of the box: {}",
            escaped(why)
        );
        let text = format!(
            "agentbox: error: {why}\n  hint: inside a box, agentbox acts on this box only\n"
        );
        self.send(conn, Kind::Err, text.as_bytes());
        let status: i32 = ExitCode::Usage.into();
        self.send(conn, Kind::Exit, &status.to_be_bytes());
    }
}

/// One run of the bridge in `container`: until its exec ends; the exec's status.
fn session(
    engine: &Engine,
    container: &str,
    name: &str,
    handler: &Arc<dyn RelayHandler>,
) -> agentbox_docker::Result<i64> {
    let (from_host, to_exec) = std::io::pipe()?;
    let to_box = ToBox(Arc::new(Mutex::new(to_exec)));
    let mut inbound = Inbound {
        reader: frame::Reader::new(HOST_TAKES, frame::MAX_CALL),
        to_box: to_box.clone(),
        name: name.to_owned(),
        handler: Arc::clone(handler),
        active: Arc::new(AtomicUsize::new(0)),
    };
    let spec = ExecSpec {
        argv: vec![inbox_bin::IN_BOX.to_owned(), BRIDGE_COMMAND.to_owned()],
        workdir: Some("/".to_owned()),
        ..Default::default()
    };
    cap_own_log();
    let mut log = EscapedLog::new(std::io::stderr());
    let stdin: Box<dyn Read + Send> = Box::new(from_host);
    let ran = engine.exec(container, &spec, Some(stdin), &mut inbound, &mut log);
    log.finish();
    // Answers still running write into a pipe nobody reads: they end on their own.
    drop(to_box);
    ran
}

/// The bridge's stdout: frames from the box, each call answered on a thread of its own.
struct Inbound {
    reader: frame::Reader,
    to_box: ToBox,
    name: String,
    handler: Arc<dyn RelayHandler>,
    active: Arc<AtomicUsize>,
}

impl Write for Inbound {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for f in self.reader.feed(buf) {
            match f {
                Frame::Whole { conn, payload, .. } => self.call(conn, &payload),
                // The stream is ended: what follows cannot be trusted to be frames.
                Frame::Oversized { conn, len } => {
                    self.to_box.refuse(
                        conn,
                        &format!(
                            "a request of {len} bytes is over the limit of {} bytes",
                            frame::MAX_CALL
                        ),
                    );
                    return Err(forged());
                }
                Frame::Refused { conn, kind } => {
                    self.to_box
                        .refuse(conn, &format!("a frame of kind {kind} is not a request"));
                    return Err(forged());
                }
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The error that ends a stream the box forged a frame on.
fn forged() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "the box sent a frame that is not a request within bounds",
    )
}

impl Inbound {
    fn call(&self, conn: u32, payload: &[u8]) {
        let call = match serde_json::from_slice::<RelayCall>(payload) {
            Ok(c) => c,
            Err(e) => {
                let why = format!("malformed request: {}", e.to_string().escape_debug());
                return self.to_box.refuse(conn, &why);
            }
        };
        if self.active.fetch_add(1, Ordering::SeqCst) >= MAX_CALLS {
            self.active.fetch_sub(1, Ordering::SeqCst);
            return self.to_box.refuse(
                conn,
                &format!(
                    "the box has {MAX_CALLS} requests running already; try again once one ends"
                ),
            );
        }
        let (to_box, handler, name, active) = (
            self.to_box.clone(),
            Arc::clone(&self.handler),
            self.name.clone(),
            Arc::clone(&self.active),
        );
        std::thread::spawn(move || {
            answer(&to_box, &*handler, &name, conn, call);
            active.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Answer `call` of connection `conn`: the handler writes into two pipes whose content
/// goes to the box as it comes, then the status.
fn answer(to_box: &ToBox, handler: &dyn RelayHandler, name: &str, conn: u32, call: RelayCall) {
    if let Err(why) = call.check() {
        return to_box.refuse(conn, &why);
    }
    let pipes = std::io::pipe().and_then(|o| std::io::pipe().map(|e| (o, e)));
    let Ok(((out_r, out_w), (err_r, err_w))) = pipes else {
        return to_box.refuse(conn, "the host could not make pipes for the answer");
    };
    let forward = |mut r: std::io::PipeReader, kind: Kind| {
        let to_box = to_box.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; frame::MAX_CHUNK];
            loop {
                match r.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        to_box.send(conn, kind, &buf[..n]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        })
    };
    let readers = [forward(out_r, Kind::Out), forward(err_r, Kind::Err)];
    let file = |w: std::io::PipeWriter| std::fs::File::from(OwnedFd::from(w));
    let status = handler.answer(name, call, file(out_w), file(err_w));
    for r in readers {
        let _ = r.join();
    }
    to_box.send(conn, Kind::Exit, &status.to_be_bytes());
}

/// The most the relay's log (its stderr, `docker-relay.log`) holds: past it, it is emptied
/// and begins with a line saying how many bytes were dropped.
pub const MAX_LOG: u64 = 1 << 20;
/// The most bytes of the bridge's stderr (the box's text) one session puts in the log; the
/// rest is counted, not kept.
pub const SESSION_TAKES: u64 = 64 << 10;

/// Keep the log `log` (the relay's stderr, opened to append) at most [`MAX_LOG`] bytes:
/// past it, empty it and say so in its first line.
pub fn cap_log(log: &std::fs::File) {
    let Ok(len) = log.metadata().map(|m| m.len()) else {
        return;
    };
    if len > MAX_LOG && log.set_len(0).is_ok() {
        let mut w = log;
        let _ = writeln!(
            w,
            "agentbox relay: the log passed {MAX_LOG} bytes: its {len} bytes were dropped"
        );
    }
}

/// [`cap_log`] of this process's stderr (a relay's is its log).
fn cap_own_log() {
    use std::os::fd::AsFd;
    if let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() {
        cap_log(&std::fs::File::from(fd));
    }
}

/// The bridge's stderr, into the relay's log (`sink`), escaped (it is the box's text):
/// each line as `box: <text>`, control characters and bidirectional marks as `?`, at most
/// [`SESSION_TAKES`] bytes of it a session; the log kept to [`MAX_LOG`] bytes.
struct EscapedLog<W: Write> {
    sink: W,
    taken: u64,
    dropped: u64,
}

impl<W: Write> EscapedLog<W> {
    fn new(sink: W) -> Self {
        EscapedLog {
            sink,
            taken: 0,
            dropped: 0,
        }
    }

    /// Say how much was dropped (the session ended).
    fn finish(&mut self) {
        if self.dropped > 0 {
            let _ = writeln!(
                self.sink,
                "agentbox relay: {} more bytes of the bridge's stderr dropped (over {SESSION_TAKES})",
                self.dropped
            );
            self.dropped = 0;
        }
    }
}

/// `text` with control characters and bidirectional marks as `?`.
fn escaped(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\t' => ' ',
            c if c.is_control() => '?',
            '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => '?',
            c => c,
        })
        .collect()
}

impl<W: Write> Write for EscapedLog<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = SESSION_TAKES.saturating_sub(self.taken);
        let take = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        self.dropped += (buf.len() - take) as u64;
        if take > 0 {
            self.taken += take as u64;
            cap_own_log();
            let text = String::from_utf8_lossy(&buf[..take]);
            let mut out = String::new();
            for line in text.lines() {
                out.push_str("box: ");
                out.push_str(&escaped(line));
                out.push('\n');
            }
            let _ = self.sink.write_all(out.as_bytes());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.sink.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentbox_boxes::relay::RelayRequest;

    /// Answers every call with its own JSON on stdout and status 7, remembering the calls.
    #[derive(Default)]
    struct Echo(Mutex<Vec<(String, RelayCall)>>);

    impl RelayHandler for Echo {
        fn answer(
            &self,
            name: &str,
            call: RelayCall,
            mut stdout: std::fs::File,
            _stderr: std::fs::File,
        ) -> i32 {
            let _ = stdout.write_all(serde_json::to_string(&call).unwrap_or_default().as_bytes());
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((name.to_owned(), call));
            7
        }
    }

    /// The frames the host sends back for each connection, once `n` connections ended.
    fn replies(from: &mut std::io::PipeReader, n: usize) -> HashMap<u32, (Vec<u8>, Vec<u8>, i32)> {
        let mut r = frame::Reader::new(&[Kind::Out, Kind::Err, Kind::Exit], 1 << 20);
        let mut got: HashMap<u32, (Vec<u8>, Vec<u8>, i32)> = HashMap::new();
        let mut ended = 0;
        let mut buf = [0u8; 4096];
        while ended < n {
            let k = from.read(&mut buf).expect("read");
            assert!(k > 0, "the host side closed early");
            for f in r.feed(&buf[..k]) {
                let Frame::Whole {
                    conn,
                    kind,
                    payload,
                } = f
                else {
                    panic!("{f:?}")
                };
                let e = got.entry(conn).or_default();
                match kind {
                    Kind::Out => e.0.extend(payload),
                    Kind::Err => e.1.extend(payload),
                    Kind::Exit => {
                        e.2 = frame::exit_status(&payload);
                        ended += 1;
                    }
                    Kind::Call => panic!("a call from the host"),
                }
            }
        }
        got
    }

    use std::collections::HashMap;

    #[test]
    fn calls_are_answered_and_anything_else_refused_without_reaching_the_handler() {
        let (mut from_host, to_exec) = std::io::pipe().expect("pipe");
        let echo = Arc::new(Echo::default());
        let mut inbound = Inbound {
            reader: frame::Reader::new(HOST_TAKES, frame::MAX_CALL),
            to_box: ToBox(Arc::new(Mutex::new(to_exec))),
            name: "mine".into(),
            handler: Arc::clone(&echo) as Arc<dyn RelayHandler>,
            active: Arc::new(AtomicUsize::new(0)),
        };
        let good = RelayCall {
            json: true,
            request: RelayRequest::Log {
                ancestors: false,
                leaves: false,
            },
        };
        let good_json = serde_json::to_vec(&good).expect("json");
        let too_long = RelayCall {
            json: false,
            request: RelayRequest::Commit {
                message: "m".repeat(agentbox_boxes::relay::MAX_TEXT + 1),
                command: None,
            },
        };
        let mut stream = frame::encode(1, Kind::Call, &good_json);
        // Another box named: no field for it, so it does not decode.
        stream.extend(frame::encode(
            2,
            Kind::Call,
            br#"{"json":false,"box":"theirs","request":{"op":"log","ancestors":false,"leaves":false}}"#,
        ));
        stream.extend(frame::encode(
            3,
            Kind::Call,
            br#"{"json":false,"request":{"op":"destroy"}}"#,
        ));
        stream.extend(frame::encode(4, Kind::Call, b"\xff not json"));
        stream.extend(frame::encode(
            8,
            Kind::Call,
            &serde_json::to_vec(&too_long).expect("json"),
        ));
        stream.extend(frame::encode(9, Kind::Call, &good_json));
        // Fed in awkward pieces, as an exec's output comes.
        for piece in stream.chunks(4093) {
            inbound.write_all(piece).expect("write");
        }
        let got = replies(&mut from_host, 6);
        for ok in [1, 9] {
            let (out, err, status) = &got[&ok];
            assert_eq!(*status, 7, "call {ok}");
            assert_eq!(out, &good_json, "call {ok}");
            assert!(err.is_empty());
        }
        let usage: i32 = ExitCode::Usage.into();
        for (bad, says) in [
            (2, "malformed request"),
            (3, "malformed request"),
            (4, "malformed request"),
            (8, "over 65536 bytes"),
        ] {
            let (out, err, status) = &got[&bad];
            assert_eq!(*status, usage, "frame {bad}");
            assert!(out.is_empty(), "frame {bad}");
            let err = String::from_utf8_lossy(err);
            assert!(err.contains(says), "frame {bad}: {err}");
        }
        let calls = echo.0.lock().expect("calls");
        assert_eq!(calls.len(), 2, "only the good calls reached the handler");
        assert!(calls
            .iter()
            .all(|(name, call)| name == "mine" && *call == good));
        drop(calls);

        // An oversized frame, or one of a kind a box may not send, is refused and ends the
        // stream (the relay starts the bridge again).
        for (conn, forged, says) in [
            (
                5,
                frame::encode(5, Kind::Call, &vec![b' '; frame::MAX_CALL + 1]),
                "over the limit",
            ),
            (
                6,
                frame::encode(6, Kind::Exit, &0i32.to_be_bytes()),
                "is not a request",
            ),
        ] {
            let ended = forged
                .chunks(1000)
                .map(|piece| inbound.write(piece))
                .find(Result::is_err);
            assert!(ended.is_some(), "frame {conn} did not end the stream");
            let got = replies(&mut from_host, 1);
            let (out, err, status) = &got[&conn];
            assert_eq!(*status, usage);
            assert!(out.is_empty());
            assert!(String::from_utf8_lossy(err).contains(says), "frame {conn}");
            inbound.reader = frame::Reader::new(HOST_TAKES, frame::MAX_CALL);
        }
        assert_eq!(echo.0.lock().expect("calls").len(), 2);
    }

    #[test]
    fn the_boxs_stderr_takes_a_bounded_share_of_the_log_escaped_compactly() {
        let mut out = Vec::new();
        {
            let mut log = EscapedLog::new(&mut out);
            log.write_all(b"hi \x1b[31mred\x07 \xe2\x80\xaeevil\n")
                .expect("write");
            let spew = vec![b'\x01'; 4 << 20];
            for _ in 0..4 {
                log.write_all(&spew).expect("write");
            }
            log.finish();
        }
        let text = String::from_utf8(out).expect("UTF-8");
        assert!(
            text.starts_with("box: hi ?[31mred? ?evil\n"),
            "{}",
            &text[..80]
        );
        assert!(
            (text.len() as u64) < SESSION_TAKES + 4096,
            "{} bytes logged",
            text.len()
        );
        assert!(text.ends_with("bytes of the bridge's stderr dropped (over 65536)\n"));
    }

    #[test]
    fn a_log_past_its_limit_is_emptied_saying_so() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("docker-relay.log");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("open");
        (&file).write_all(&vec![b'x'; 1000]).expect("write");
        cap_log(&file);
        assert_eq!(std::fs::metadata(&path).expect("meta").len(), 1000);
        (&file)
            .write_all(&vec![b'x'; MAX_LOG as usize])
            .expect("write");
        cap_log(&file);
        (&file).write_all(b"after\n").expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text,
            format!(
                "agentbox relay: the log passed {MAX_LOG} bytes: its {} bytes were dropped\nafter\n",
                MAX_LOG + 1000
            )
        );
    }
}
