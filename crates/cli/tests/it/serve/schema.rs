//! schemathesis (PyPI) against the server's own OpenAPI document: generated requests, valid
//! and not, to every operation but box creation (which would make boxes of whatever
//! directory it names) and the event stream (which never ends); no answer may be a server
//! error, and every answer must match the document (status, content type, schema).

use crate::common::{git, write, Env};
use agentbox_testkit::tier::{require_root, skip};

use super::server::Server;

fn require_schemathesis(test: &str) -> bool {
    let ok = std::process::Command::new("schemathesis")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok || skip(
        test,
        "needs schemathesis: python3 -m pip install schemathesis",
    )
}

#[test]
fn schemathesis_finds_no_server_error_and_every_answer_matches_the_document() {
    let test =
        "serve::schema::schemathesis_finds_no_server_error_and_every_answer_matches_the_document";
    if !require_root(test) || !require_schemathesis(test) {
        return;
    }
    let env = Env::new();
    // A box, so that the list and the store are not empty; the server runs outside its
    // project, so that numbers name no box.
    let project = env.path("proj");
    write(&project.join("a.txt"), "one\n");
    git(&project, &["init", "-q", "-b", "main"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "first"]);
    env.run_in(&project, &["create", "st1"]);
    let elsewhere = env.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let s = Server::start(&env, &elsewhere);
    let out = std::process::Command::new("schemathesis")
        .args(["run", &s.url("/api/openapi.json")])
        .args(["--header", &format!("Authorization: Bearer {}", s.token)])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
        ])
        .args(["--exclude-path", "/api/events"])
        .args(["--exclude-operation-id", "create"])
        .args(["--max-examples", "15", "--workers", "1", "--seed", "1"])
        .args(["--no-color", "--generation-database", "none"])
        .current_dir(&elsewhere)
        .env("SCHEMATHESIS_TELEMETRY", "false")
        .output()
        .expect("run schemathesis");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "schemathesis failed:\n{said}");
    // It tested the operations (not a run that found nothing to call).
    assert!(said.contains("passed"), "{said}");
}
