//! `GET /api/hello`: the server proves it holds the token without being sent it, so that a
//! client never sends the token to a squatter on the port (tier 0).

use serde_json::json;

use super::server::{answer, Server};
use crate::common::Env;

/// The proof a server holding `token` and listening on `port` gives for `nonce`, computed
/// here independently of the server.
pub fn proof(token: &str, port: u16, nonce: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token.as_bytes());
    let tag = ring::hmac::sign(&key, format!("agentbox-serve:{port}:{nonce}").as_bytes());
    tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The port of `http://IP:PORT`.
pub fn port_of(base: &str) -> u16 {
    base.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port")
}

#[test]
fn the_server_proves_it_holds_the_token_without_being_sent_it() {
    let env = Env::new();
    let s = Server::start(&env, env.home.path());
    let port = port_of(&s.base);
    let http = reqwest::blocking::Client::new();
    let mut seen = Vec::new();
    for nonce in [
        "0123456789abcdef0123456789abcdef",
        "another-fresh-nonce-of-the-client",
    ] {
        // No token sent: the proof is answered all the same.
        let r = http
            .get(s.url(&format!("/api/hello?nonce={nonce}")))
            .send()
            .expect("GET");
        assert_eq!(r.headers()["cache-control"], "no-store");
        let (status, body) = answer(r);
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["port"], json!(port));
        let given = body["proof"].as_str().expect("a proof").to_owned();
        assert_eq!(given, proof(&s.token, port, nonce), "HMAC of the token");
        // Bound to the port: the same proof is not valid for another one.
        assert_ne!(given, proof(&s.token, port.wrapping_add(1), nonce));
        seen.push(given);
    }
    assert_ne!(seen[0], seen[1], "each nonce its own proof");
    // A nonce missing, too short or too long: 400, as the API's errors are.
    for query in [
        String::new(),
        "?nonce=short".to_owned(),
        format!("?nonce={}", "n".repeat(257)),
    ] {
        let (status, body) = answer(
            http.get(s.url(&format!("/api/hello{query}")))
                .send()
                .expect("GET"),
        );
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["code"], json!(2));
    }
    // In the OpenAPI document, as the one operation that needs no token.
    let (status, doc) = s.get("/api/openapi.json");
    assert_eq!(status, 200);
    let op = &doc["paths"]["/api/hello"]["get"];
    assert!(op.is_object(), "/api/hello documented");
    assert_eq!(op["security"], json!([{}]));
    assert!(doc["components"]["schemas"]["HelloAnswer"].is_object());
}
