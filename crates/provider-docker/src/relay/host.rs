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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
/// How long the history lock is held once the bridge's exec is being started.
const START_HOLD: Duration = Duration::from_secs(2);

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
        // The bridge's exec is started under the box's history lock, held a moment past
        // the start: an exec starting while a `docker commit` pauses the container leaves
        // its `runc init` in the frozen cgroup and the engine waits on both for good. The
        // engine does not say when an exec has started, hence the moment.
        let held = p.history_lock(name, "start the in-box relay")?;
        std::thread::spawn(move || {
            std::thread::sleep(START_HOLD);
            drop(held);
        });
        let began = Instant::now();
        match session(&engine, &container, name, &handler) {
            Ok(status) => log(&format!(
                "agentbox relay: the bridge of box {name:?} ended ({status})"
            )),
            Err(e) => log(&format!(
                "agentbox relay: the bridge of box {name:?} failed: {e}"
            )),
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
        log(&format!(
            "agentbox relay: refused request {conn} of the box: {why}"
        ));
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
    let mut log = EscapedLog;
    let stdin: Box<dyn Read + Send> = Box::new(from_host);
    let ran = engine.exec(container, &spec, Some(stdin), &mut inbound, &mut log);
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

/// The most bytes a relay writes to its log in its life: what it logs is mostly the box's
/// doing (the bridge's stderr, refused frames), and the box must not fill the host's disk.
pub const LOG_LIMIT: u64 = 1 << 20;

/// Bytes logged so far by this process.
static LOGGED: AtomicU64 = AtomicU64::new(0);

/// Write `line` to the relay's log (its stderr), within [`LOG_LIMIT`]; past it, one line
/// says that the rest is dropped.
fn log(line: &str) {
    log_within(&LOGGED, LOG_LIMIT, line, &mut std::io::stderr());
}

fn log_within(logged: &AtomicU64, limit: u64, line: &str, out: &mut dyn Write) {
    let n = line.len() as u64 + 1;
    let before = logged.fetch_add(n, Ordering::SeqCst);
    if before + n <= limit {
        let _ = writeln!(out, "{line}");
    } else if before <= limit {
        let _ = writeln!(
            out,
            "agentbox relay: the log reached {limit} bytes; further lines are dropped"
        );
    }
}

/// The bridge's stderr, into the relay's log, escaped (it is the box's text).
struct EscapedLog;

impl Write for EscapedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        for line in text.lines() {
            log(&format!("box: {}", line.escape_debug()));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
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
    fn the_log_is_bounded_whatever_the_box_prints() {
        let logged = AtomicU64::new(0);
        let mut out = Vec::new();
        for _ in 0..1000 {
            log_within(&logged, 100, "0123456789", &mut out);
        }
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 10, "{text}");
        assert!(lines[..9].iter().all(|l| *l == "0123456789"));
        assert!(lines[9].contains("further lines are dropped"));
    }

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
}
