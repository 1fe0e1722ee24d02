//! Connections that never finish a request (tier 0): they do not keep the token's holder
//! from an answer, they are closed after the server's header-read timeout, and past the
//! server's connection cap a new connection is closed at once, unanswered. The timeout is
//! the server's own (10 s); the tests only bound how long they wait for it, generously.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::server::{answer, Server};
use crate::common::Env;

/// How long a test waits for the server to close a connection before it fails instead of
/// hanging (a guard, not a measurement).
pub const HANG: Duration = Duration::from_secs(120);
/// The server's connection cap (`MAX_CONNECTIONS` of the accept loop).
const CAP: usize = 512;

/// `n` connections to `base` (`http://IP:PORT`), each sending half a request head.
pub fn half_requests(base: &str, n: usize) -> Vec<TcpStream> {
    let addr = base.trim_start_matches("http://");
    (0..n)
        .map(|_| {
            let mut c = TcpStream::connect(addr).expect("connect");
            c.write_all(b"GET / HTTP/1.1\r\n").expect("half a head");
            c
        })
        .collect()
}

/// Read `c` until the server closes it; what it sent. Fails past `deadline`.
pub fn until_closed(c: &mut TcpStream, deadline: Instant) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "a connection still open after {HANG:?}");
        c.set_read_timeout(Some(left)).expect("timeout");
        match c.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return got,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("a connection still open after {HANG:?}")
            }
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// A request with the token, on a connection of its own; its status.
fn with_token(s: &Server) -> u16 {
    let r = reqwest::blocking::Client::new()
        .get(s.url("/api/openapi.json"))
        .bearer_auth(&s.token)
        .send()
        .expect("an answer to the token's holder");
    answer(r).0
}

#[test]
fn half_finished_requests_are_closed_and_past_the_cap_refused_while_the_token_is_answered() {
    let env = Env::new();
    let s = Server::start(&env, env.home.path());

    // Many idle half-requests, below the cap: the token's holder is answered meanwhile,
    // and each of them is closed by the server (not by this side) eventually.
    let mut idle = half_requests(&s.base, 300);
    assert_eq!(with_token(&s), 200);
    let deadline = Instant::now() + HANG;
    for c in &mut idle {
        until_closed(c, deadline);
    }
    drop(idle);

    // The cap: with every slot held, a connection that sends a whole request gets no
    // answer, only its end (an accepted one would be answered, 401 or else).
    let mut held = half_requests(&s.base, CAP);
    let mut probe = TcpStream::connect(s.base.trim_start_matches("http://")).expect("connect");
    probe
        .write_all(b"GET /api/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("a request");
    let deadline = Instant::now() + HANG;
    let said = until_closed(&mut probe, deadline);
    assert!(
        said.is_empty(),
        "past the cap a connection is closed unanswered: {}",
        String::from_utf8_lossy(&said)
    );
    // Once the held ones time out, the server answers again.
    for c in &mut held {
        until_closed(c, deadline);
    }
    drop(held);
    assert_eq!(with_token(&s), 200);
}
