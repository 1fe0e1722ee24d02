//! `--network private` end to end: outbound access through pasta, the host's loopback and
//! abstract sockets out of reach, published ports, and the errors when it cannot be had.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{as_nobody, code, kill_supervisors, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// A temporary home whose box supervisors (and with them boxes and pastas) are killed when
/// the test ends.
struct Net {
    env: Env,
    proj: PathBuf,
}

impl Net {
    /// `None`: skipped (not root).
    fn new(test: &str) -> Option<Net> {
        if !require_root(test) {
            return None;
        }
        let env = Env::new();
        let proj = env.home.path().join("proj");
        write(&proj.join("README"), "readme\n");
        Some(Net { env, proj })
    }

    fn create(&self, name: &str, extra: &[&str]) {
        let from = self.proj.to_str().expect("utf-8 path");
        let mut args = vec!["create", name, "--from", from];
        args.extend_from_slice(extra);
        self.env.ok(&args);
    }

    /// `agentbox exec BOX -- python3 -c SCRIPT` → (status, stdout, stderr).
    fn py(&self, name: &str, script: &str) -> (i32, String, String) {
        let out = self.env.run(&["exec", name, "--", "python3", "-c", script]);
        (
            code(&out).unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr(&out),
        )
    }

    fn py_ok(&self, name: &str, script: &str) -> String {
        let (status, out, err) = self.py(name, script);
        assert_eq!(status, 0, "{script} failed: {err}");
        out
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        kill_supervisors(&self.env.path("home"));
    }
}

/// A host TCP server on `addr` that writes `token` to every connection.
fn token_server(addr: SocketAddr, token: &'static str) -> SocketAddr {
    let l = TcpListener::bind(addr).expect("bind the test server");
    let local = l.local_addr().expect("local address");
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let _ = c.write_all(token.as_bytes());
        }
    });
    local
}

/// A host port nothing listens on now.
fn free_port() -> u16 {
    free_ports::<1>()[0]
}

/// `N` distinct free TCP ports. Each listener is held until all are taken: a port released
/// at once can be handed out again by the next bind.
fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("a free port"))
        .collect();
    std::array::from_fn(|i| held[i].local_addr().expect("a bound address").port())
}

/// The host's first IPv4 address that is not loopback (`ip -4 -o addr`).
fn external_ipv4() -> Option<Ipv4Addr> {
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            words.find(|w| *w == "inet")?;
            words.next()?.split('/').next()?.parse::<Ipv4Addr>().ok()
        })
        .find(|ip| !ip.is_loopback())
}

/// A python one-liner printing what `host:port` sends, or `refused: …` when it cannot
/// connect.
fn fetch_script(host: &str, port: u16) -> String {
    format!(
        "import socket\n\
         try:\n    s = socket.create_connection(('{host}', {port}), timeout=3); print('got:' + s.recv(100).decode(errors='replace'))\n\
         except Exception as e:\n    print('refused: %r' % e)"
    )
}

/// Host-side: read what `127.0.0.1:port` sends, retrying until it answers (a server just
/// started in a box takes a moment to listen).
fn fetch_from_host(port: u16, request: &[u8]) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let attempt = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(request)?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok(out)
        });
        match attempt {
            Ok(text) if !text.is_empty() => return text,
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            other => panic!("nothing answered on host port {port}: {other:?}"),
        }
    }
}

#[test]
fn a_private_box_reaches_out_but_never_the_host_loopback() {
    let Some(t) = Net::new("a_private_box_reaches_out_but_never_the_host_loopback") else {
        return;
    };
    t.create("priv", &["--network", "private"]);
    let status = t.env.json(&["status", "priv"]);
    assert_eq!(status["box"]["network"], "private", "{status}");
    assert_eq!(status["box"]["network_shown"], "private", "{status}");

    // Its own interface with a default route (pasta configured it before the box ran).
    let routes = t.py_ok("priv", "print(open('/proc/net/route').read())");
    assert!(
        routes
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some("00000000")),
        "{routes}"
    );
    let resolv = t.py_ok("priv", "print(open('/etc/resolv.conf').read())");
    assert!(resolv.contains("nameserver 10.0.2.3"), "{resolv}");

    // Outbound: a server on the host's own external address (there is no internet here).
    match external_ipv4() {
        Some(ext) => {
            let at = token_server(SocketAddr::from((ext, 0)), "outside-ok");
            let got = t.py_ok("priv", &fetch_script(&ext.to_string(), at.port()));
            assert_eq!(got.trim(), "got:outside-ok", "outbound TCP to {at}");
        }
        None => eprintln!("the host has no non-loopback IPv4 address: outbound not checked"),
    }

    // DNS through pasta's forwarder, when the host's own resolver answers.
    let query = "import socket\n\
                 q = b'\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x09localhost\\x00\\x00\\x01\\x00\\x01'\n\
                 s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)\n\
                 ns = [l.split()[1] for l in open('/etc/resolv.conf') if l.startswith('nameserver')][0]\n\
                 try:\n    s.sendto(q, (ns, 53)); print('answer', len(s.recv(512)))\n\
                 except Exception as e:\n    print('none', e)";
    let on_host = std::process::Command::new("python3")
        .args(["-c", query])
        .output()
        .expect("python3 on the host");
    if String::from_utf8_lossy(&on_host.stdout).starts_with("answer") {
        let inside = t.py_ok("priv", query);
        assert!(inside.starts_with("answer"), "DNS in the box: {inside}");
    } else {
        eprintln!("the host's resolver does not answer: DNS in the box not checked");
    }

    // The host's loopback: by no address the box could try.
    let secret = token_server(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), "host-loopback");
    let mut targets = vec![
        "127.0.0.1".to_owned(),
        "localhost".to_owned(),
        "0.0.0.0".to_owned(),
        "10.0.2.2".to_owned(),
        "10.0.2.3".to_owned(),
        "10.0.2.100".to_owned(),
        "10.0.2.1".to_owned(),
        "::1".to_owned(),
    ];
    targets.extend(external_ipv4().map(|ip| ip.to_string()));
    for target in targets {
        let got = t.py_ok("priv", &fetch_script(&target, secret.port()));
        assert!(
            !got.contains("host-loopback"),
            "the box reached the host's 127.0.0.1:{} through {target}",
            secret.port()
        );
    }
}

#[test]
fn host_abstract_sockets_are_out_of_reach_of_a_private_box() {
    let Some(t) = Net::new("host_abstract_sockets_are_out_of_reach_of_a_private_box") else {
        return;
    };
    let name = format!("agentbox-test-abstract-{}", std::process::id());
    let addr =
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("address");
    let listener = UnixListener::bind_addr(&addr).expect("listen on an abstract socket");
    std::thread::spawn(move || {
        for mut c in listener.incoming().flatten() {
            let _ = c.write_all(b"host-abstract");
        }
    });
    let script = format!(
        "import socket\n\
         s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
         try:\n    s.connect('\\0{name}'); print('got:' + s.recv(100).decode())\n\
         except Exception as e:\n    print('refused: %r' % e)"
    );
    // The control: on the host's network the socket is reachable, so the script works.
    t.create("onhost", &["--network", "host"]);
    assert_eq!(t.py_ok("onhost", &script).trim(), "got:host-abstract");
    t.create("priv", &["--network", "private"]);
    let got = t.py_ok("priv", &script);
    assert!(got.starts_with("refused"), "{got}");
}

#[test]
fn published_ports_reach_servers_in_private_boxes() {
    let Some(t) = Net::new("published_ports_reach_servers_in_private_boxes") else {
        return;
    };
    let [pa, pb] = free_ports::<2>();
    assert_ne!(pa, pb);
    t.create(
        "alpha",
        &["--network", "private", "--publish", &format!("{pa}:8123")],
    );
    t.create(
        "bravo",
        &[
            "--network",
            "private",
            "-p",
            &format!("127.0.0.1:{pb}:8123"),
        ],
    );
    let status = t.env.json(&["status", "alpha"]);
    assert_eq!(status["box"]["network"], "private", "{status}");
    assert_eq!(
        status["box"]["network_shown"],
        format!("private (published {pa}->8123)"),
        "{status}"
    );
    assert_eq!(status["box"]["publish"][0]["host_port"], pa, "{status}");
    assert_eq!(status["box"]["publish"][0]["box_port"], 8123, "{status}");
    let human = t.env.ok(&["status", "bravo"]);
    assert!(
        human.contains(&format!("private (published 127.0.0.1:{pb}->8123)")),
        "{human}"
    );
    // Both boxes listen on 8123 inside; each host port reaches its own box.
    let server = "import socket, sys\n\
                  l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
                  l.bind(('0.0.0.0', 8123)); l.listen(8)\n\
                  while True:\n    c, _ = l.accept(); c.sendall(socket.gethostname().encode()); c.close()";
    for name in ["alpha", "bravo"] {
        t.env.ok(&["spawn", name, "--", "python3", "-c", server]);
    }
    assert_eq!(fetch_from_host(pa, b""), "alpha");
    assert_eq!(fetch_from_host(pb, b""), "bravo");

    // A checkout replaces the box's PID 1 and with it the network: still published.
    let head = t.env.json(&["log", "alpha"])["nodes"][0]["id"]
        .as_str()
        .expect("a node id")
        .to_owned();
    t.env.ok(&["checkout", "alpha", &head]);
    t.env.ok(&["spawn", "alpha", "--", "python3", "-c", server]);
    assert_eq!(fetch_from_host(pa, b""), "alpha");

    // Stopped, the box's pasta is gone and the host port free again.
    t.env.ok(&["stop", "alpha"]);
    TcpListener::bind((Ipv4Addr::UNSPECIFIED, pa)).expect("the published port is free again");
}

#[test]
fn a_taken_host_port_is_refused_by_name() {
    let Some(t) = Net::new("a_taken_host_port_is_refused_by_name") else {
        return;
    };
    let from = t.proj.to_str().expect("utf-8 path").to_owned();
    let taken = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("bind");
    let port = taken.local_addr().expect("address").port();
    let out = t.env.run(&[
        "create",
        "late",
        "--from",
        &from,
        "--network",
        "private",
        "--publish",
        &format!("{port}:80"),
    ]);
    assert_eq!(code(&out), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("host port {port}")) && err.contains("already in use"),
        "{err}"
    );
    drop(taken);

    // Free at creation, taken when the box starts.
    let port = free_port();
    t.create(
        "late",
        &["--network", "private", "-p", &format!("{port}:80")],
    );
    let holder = TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).expect("bind");
    let out = t.env.run(&["exec", "late", "--", "true"]);
    assert_eq!(code(&out), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("host port {port}")),
        "{}",
        stderr(&out)
    );
    drop(holder);
    t.env.ok(&["exec", "late", "--", "true"]);

    // A second box cannot take a port a running box publishes: not at creation, nor when
    // it starts.
    let out = t.env.run(&[
        "create",
        "second",
        "--from",
        &from,
        "--network",
        "private",
        "-p",
        &format!("{port}:81"),
    ]);
    assert_eq!(code(&out), Some(4), "{}", stderr(&out));
    t.env.ok(&["stop", "late"]);
    t.create(
        "second",
        &["--network", "private", "-p", &format!("{port}:81")],
    );
    t.env.ok(&["start", "late"]);
    let out = t.env.run(&["start", "second"]);
    assert_eq!(code(&out), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("host port {port}")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_private_network_without_pasta_is_refused_with_a_hint() {
    // Tier 0: refused before anything is made.
    let env = Env::new();
    let empty = env.home.path().join("empty-path");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let path = empty.to_str().expect("utf-8 path");
    let out = env.run_with(
        &["create", "x", "--empty", "--network", "private"],
        &[("PATH", path)],
    );
    assert_eq!(code(&out), Some(6), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("needs `pasta`"), "{err}");
    assert!(err.contains("apt-get install passt"), "{err}");

    let out = env.run(&["create", "y", "--empty", "--publish", "8080:80"]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--network private"),
        "{}",
        stderr(&out)
    );
    let out = env.run(&[
        "create",
        "y",
        "--empty",
        "--network",
        "private",
        "--publish",
        "80",
    ]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("HOST:BOX"), "{}", stderr(&out));
}

#[test]
fn a_started_box_without_pasta_says_so() {
    let Some(t) = Net::new("a_started_box_without_pasta_says_so") else {
        return;
    };
    t.create("p", &["--network", "private"]);
    let empty = t.env.home.path().join("empty-path");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let out = t.env.run_with(
        &["start", "p"],
        &[("PATH", empty.to_str().expect("utf-8 path"))],
    );
    assert_eq!(code(&out), Some(6), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("apt-get install passt"),
        "{}",
        stderr(&out)
    );
}

/// Whether everyone may open `path` for reading and writing (its "other" bits).
fn open_to_all(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o006 == 0o006)
}

#[test]
fn a_rootless_private_box_works_or_says_why() {
    if !require_root("a_rootless_private_box_works_or_says_why") {
        return;
    }
    let env = Env::new();
    let home = env.home.path().join("nobody");
    std::fs::create_dir_all(&home).expect("mkdir");
    let _stop = StopAll(home.clone());
    crate::common::chown_nobody(&home);
    let out = as_nobody(&home, &["create", "r", "--empty", "--network", "private"]);
    if !open_to_all(Path::new("/dev/net/tun")) {
        // pasta makes the box's interface as the user, through /dev/net/tun.
        assert_eq!(code(&out), Some(6), "{}", stderr(&out));
        assert!(stderr(&out).contains("/dev/net/tun"), "{}", stderr(&out));
        return;
    }
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let out = as_nobody(&home, &["exec", "r", "--", "cat", "/proc/net/route"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let routes = String::from_utf8_lossy(&out.stdout);
    assert!(
        routes
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some("00000000")),
        "{routes}"
    );
}

/// Kills the supervisors of an agentbox home when dropped.
struct StopAll(PathBuf);

impl Drop for StopAll {
    fn drop(&mut self) {
        kill_supervisors(&self.0);
    }
}
