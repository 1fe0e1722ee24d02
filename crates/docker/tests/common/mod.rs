//! What the tests of this crate share: the test image (a root filesystem of the host's
//! static busybox, imported once per content on each engine: see
//! [`agentbox_testkit::busybox_image`]), running containers of it, and commands run in them.

use agentbox_docker::container::{ContainerSpec, Limits};
use agentbox_docker::exec::ExecSpec;
use agentbox_docker::Engine;

pub const LABEL: &str = "agentbox.test";

/// The test image (see [`agentbox_testkit::busybox_image`]), imported on `engine` when it
/// lacks it.
pub fn test_image(engine: &Engine) -> String {
    agentbox_testkit::busybox_image::busybox_image(
        |name| engine.image(name).expect("inspect").is_some(),
        |tar, repo, tag, changes| {
            engine
                .import_rootfs(tar, repo, tag, changes)
                .expect("import");
        },
    )
}

/// A running container of the test image, removed when dropped.
pub struct Running<'a> {
    pub engine: &'a Engine,
    pub name: String,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let _ = self.engine.remove_container(&self.name);
    }
}

pub fn running<'a>(engine: &'a Engine, test: &str, limits: Limits) -> Running<'a> {
    let image = test_image(engine);
    let name = format!("agentbox-test-{test}-{}", std::process::id());
    let _ = engine.remove_container(&name);
    let spec = ContainerSpec {
        name: name.clone(),
        image,
        cmd: vec!["sleep".into(), "3600".into()],
        labels: [(LABEL.to_owned(), test.to_owned())].into(),
        limits,
        workdir: Some("/workspace".into()),
        ..Default::default()
    };
    engine.create_container(&spec).expect("create");
    let r = Running { engine, name };
    engine.start_container(&r.name).expect("start");
    r
}

/// Run `argv` with `stdin`; (status, stdout, stderr).
pub fn run(
    engine: &Engine,
    container: &str,
    argv: &[&str],
    stdin: Option<&[u8]>,
) -> (i64, String, String) {
    let spec = ExecSpec {
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        ..Default::default()
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let input =
        stdin.map(|s| Box::new(std::io::Cursor::new(s.to_vec())) as Box<dyn std::io::Read + Send>);
    let status = engine
        .exec(container, &spec, input, &mut out, &mut err)
        .expect("exec");
    (
        status,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}
