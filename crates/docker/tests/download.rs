//! Files out of a container through the engine's archive API (tier 2): one regular file's
//! content only, bounded; anything else refused; a whole tree streamed to a reader.

mod common;

use agentbox_docker::container::Limits;
use agentbox_docker::download::Downloaded;
use agentbox_docker::endpoint::{Endpoint, Origin};
use agentbox_docker::Engine;
use agentbox_testkit::tier;
use common::{run, running};

fn engine(test: &str) -> Option<Engine> {
    if !tier::require_root(test)
        || !tier::require_docker(test)
        || !tier::require_tool(test, "busybox")
    {
        return None;
    }
    let ep = Endpoint {
        host: "unix:///var/run/docker.sock".into(),
        origin: Origin::Default,
        tls: None,
    };
    Some(Engine::connect(ep).expect("connect to the local engine"))
}

#[test]
fn one_file_comes_out_bounded_and_nothing_but_a_regular_file_does() {
    let test = "one_file_comes_out_bounded_and_nothing_but_a_regular_file_does";
    let Some(engine) = engine(test) else { return };
    let c = running(&engine, "download", Limits::default());
    let (status, _, err) = run(
        &engine,
        &c.name,
        &[
            "sh",
            "-c",
            "printf 'hello\\n' > /tmp/f; ln -s /etc/passwd /tmp/link; mkdir /tmp/d; touch /tmp/d/x",
        ],
        None,
    );
    assert_eq!(status, 0, "{err}");
    let spool = tempfile::tempdir().expect("spool");
    let get = |path: &str, limit: u64| {
        let mut out = Vec::new();
        let got = engine.download_file(&c.name, path, spool.path(), &mut out, limit);
        (got, out)
    };
    let (got, out) = get("/tmp/f", 1024);
    assert_eq!(got.expect("download"), Downloaded::Whole(6));
    assert_eq!(out, b"hello\n");
    // At the limit exactly it comes; one byte more is too large, and nothing is kept.
    assert_eq!(get("/tmp/f", 6).0.expect("download"), Downloaded::Whole(6));
    let (got, out) = get("/tmp/f", 5);
    assert_eq!(got.expect("download"), Downloaded::TooLarge);
    assert!(out.is_empty());
    // A link is not followed, a directory is not a file.
    for other in ["/tmp/link", "/tmp/d"] {
        let err = get(other, 1 << 20).0.expect_err(other).to_string();
        assert!(err.contains("not a regular file"), "{other}: {err}");
    }
    assert!(get("/tmp/none", 1 << 20).0.is_err());
    // Nothing of the spool is left.
    assert_eq!(fs_err::read_dir(spool.path()).expect("ls").count(), 0);

    // A whole tree, streamed to a reader.
    let names = engine
        .read_archive(&c.name, "/tmp/d", |tar| {
            let mut names = Vec::new();
            for e in tar::Archive::new(tar).entries()? {
                names.push(e?.path()?.to_string_lossy().into_owned());
            }
            Ok(names)
        })
        .expect("read the archive");
    assert_eq!(names, ["d/", "d/x"]);
}
