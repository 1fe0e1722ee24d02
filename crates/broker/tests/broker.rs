//! The broker against a loopback stub of the Messages API: the stub records the keys it is
//! sent and streams a slow server-sent-event answer; requests reach the broker over TCP and
//! over its unix socket, as a box's would.

use std::time::{Duration, Instant};

use agentbox_broker::stub::{Stub, StubConfig};
use agentbox_broker::{AnthropicCredential, Broker, Credentials, Secret, Spec, Token, Upstreams};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;

/// SSE events the stub sends, one every [`GAP`].
const EVENTS: usize = 5;
const GAP: Duration = Duration::from_millis(200);

fn stub() -> Stub {
    Stub::start(StubConfig {
        events: EVENTS,
        gap: GAP,
    })
    .expect("stub")
}

fn spec(stub: &Stub) -> Spec {
    Spec {
        credentials: Credentials {
            anthropic: Some(AnthropicCredential::ApiKey(Secret::new("sk-ant-real-1"))),
            openai: Some(Secret::new("sk-openai-real-2")),
        },
        upstreams: Upstreams::new(stub.url(), stub.url()).expect("upstreams"),
    }
}

/// A broker on a loopback port; its base (`http://127.0.0.1:PORT`).
fn broker(spec: Spec) -> (Broker, String, agentbox_broker::Serving) {
    let broker = Broker::start(Token::generate().expect("token"), spec).expect("broker");
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", l.local_addr().expect("address"));
    let serving = broker.serve_tcp(l).expect("serve");
    (broker, base, serving)
}

/// A response: status, and each piece of the body with when it arrived (since the request
/// was sent).
struct Got {
    status: u16,
    pieces: Vec<(Duration, Bytes)>,
}

impl Got {
    fn text(&self) -> String {
        self.pieces
            .iter()
            .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
            .collect()
    }

    /// When the piece holding `needle` arrived.
    fn arrival_of(&self, needle: &str) -> Duration {
        let mut text = String::new();
        for (t, b) in &self.pieces {
            text.push_str(&String::from_utf8_lossy(b));
            if text.contains(needle) {
                return *t;
            }
        }
        panic!("{needle:?} never arrived in {text:?}")
    }
}

fn client_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn post(url: &str, headers: &[(&str, &str)]) -> Got {
    client_rt().block_on(async {
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        let mut req = client.post(url).body(r#"{"model":"m","stream":true}"#);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let start = Instant::now();
        let mut resp = req.send().await.expect("send");
        let status = resp.status().as_u16();
        let mut pieces = Vec::new();
        while let Some(chunk) = resp.chunk().await.expect("chunk") {
            pieces.push((start.elapsed(), chunk));
        }
        Got { status, pieces }
    })
}

#[test]
fn the_placeholder_is_swapped_for_the_real_key_and_the_answer_streams() {
    let stub = stub();
    let (broker, base, _serving) = broker(spec(&stub));
    let token = broker.token().as_str().to_owned();
    let got = post(
        &format!("{base}/anthropic/v1/messages?beta=true"),
        &[("x-api-key", &token), ("anthropic-version", "2023-06-01")],
    );
    assert_eq!(got.status, 200, "{}", got.text());
    let seen = stub.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/messages");
    assert_eq!(seen[0].api_key.as_deref(), Some("sk-ant-real-1"));
    assert_eq!(seen[0].authorization, None);
    assert_eq!(seen[0].body, r#"{"model":"m","stream":true}"#);
    // Chunk by chunk: the first event is there well before the last was even sent.
    let (first, last) = (got.arrival_of("\"n\":0"), got.arrival_of("\"n\":4"));
    assert!(
        last.saturating_sub(first) >= GAP * 3,
        "events arrived together: first at {first:?}, last at {last:?}"
    );
    assert!(got.text().contains("\"n\":2"));

    // OpenAI: a bearer placeholder becomes the real bearer key.
    let got = post(
        &format!("{base}/openai/v1/chat/completions"),
        &[("authorization", &format!("Bearer {token}"))],
    );
    assert_eq!(got.status, 200);
    let seen = stub.seen();
    assert_eq!(seen[1].path, "/v1/chat/completions");
    assert_eq!(
        seen[1].authorization.as_deref(),
        Some("Bearer sk-openai-real-2")
    );
    assert_eq!(seen[1].api_key, None);
}

#[test]
fn other_tokens_other_paths_and_missing_credentials_are_refused_here() {
    let stub = stub();
    let (broker, base, _serving) = broker(spec(&stub));
    let (other, _other_base, _other_serving) = self::broker(spec(&stub));
    let token = broker.token().as_str().to_owned();
    let url = format!("{base}/anthropic/v1/messages");
    for (headers, why) in [
        (vec![], "no key"),
        (
            vec![("x-api-key", other.token().as_str())],
            "another box's token",
        ),
        (vec![("x-api-key", "sk-ant-real-1")], "a real key"),
        (
            vec![("x-api-key", token.as_str()), ("authorization", "Bearer x")],
            "a second, wrong key",
        ),
    ] {
        let got = post(&url, &headers);
        assert_eq!(got.status, 401, "{why}: {}", got.text());
        assert!(got.text().contains("authentication_error"), "{why}");
    }
    for path in ["/", "/v1/messages", "/anthropic/v1/../../admin", "/metrics"] {
        let got = post(&format!("{base}{path}"), &[("x-api-key", &token)]);
        assert_eq!(got.status, 404, "{path}: {}", got.text());
    }
    assert!(
        stub.seen().is_empty(),
        "nothing refused reached the upstream"
    );

    // The owner may swap the credentials; an API with none is answered by the broker.
    let mut no_openai = spec(&stub);
    no_openai.credentials.openai = None;
    no_openai.credentials.anthropic =
        Some(AnthropicCredential::OauthToken(Secret::new("oauth-real-3")));
    broker.update(no_openai).expect("update");
    let got = post(
        &format!("{base}/openai/v1/responses"),
        &[("authorization", &format!("Bearer {token}"))],
    );
    assert_eq!(got.status, 503, "{}", got.text());
    assert!(!got.text().contains("real"), "{}", got.text());
    let got = post(&url, &[("authorization", &format!("Bearer {token}"))]);
    assert_eq!(got.status, 200);
    let seen = stub.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some("Bearer oauth-real-3")
    );
    assert_eq!(seen[0].api_key, None);
}

#[test]
fn an_unreachable_upstream_is_a_bad_gateway_without_the_key() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", free.local_addr().expect("address"));
    drop(free);
    let spec = Spec {
        credentials: Credentials {
            anthropic: Some(AnthropicCredential::ApiKey(Secret::new("sk-ant-real-1"))),
            openai: None,
        },
        upstreams: Upstreams::new(&url, &url).expect("upstreams"),
    };
    let (broker, base, _serving) = broker(spec);
    let token = broker.token().as_str().to_owned();
    let got = post(
        &format!("{base}/anthropic/v1/messages"),
        &[("x-api-key", &token)],
    );
    assert_eq!(got.status, 502, "{}", got.text());
    assert!(!got.text().contains("sk-ant-real-1"));
}

#[test]
fn the_unix_socket_serves_the_same() {
    let stub = stub();
    let broker = Broker::start(Token::generate().expect("token"), spec(&stub)).expect("broker");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(agentbox_broker::SOCKET_NAME);
    let l = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    let _serving = broker.serve_unix(l).expect("serve");
    let token = broker.token().as_str().to_owned();
    let (status, text) = client_rt().block_on(async {
        let io = tokio::net::UnixStream::connect(&path)
            .await
            .expect("connect");
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        let req = Request::post("/anthropic/v1/messages")
            .header("host", "broker")
            .header("x-api-key", &token)
            .body(Full::new(Bytes::from_static(b"{}")))
            .expect("request");
        let resp = send.send_request(req).await.expect("send");
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    });
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"n\":4"));
    assert_eq!(stub.seen()[0].api_key.as_deref(), Some("sk-ant-real-1"));
}
