//! A loopback stub of the Messages API, for tests and benchmarks (feature `stub`; never in
//! the product): it records the keys each request carries and answers with server-sent
//! events spaced in time, or with a large streamed body.
//!
//! * `POST /v1/bytes/N` — `N` bytes of `x`, in 64 KiB frames, as fast as they go;
//! * any other path — [`StubConfig::events`] events `data: {"n":I}`, the first at once and
//!   each next one [`StubConfig::gap`] later (`content-type: text/event-stream`).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// What the stub saw of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub path: String,
    pub api_key: Option<String>,
    pub authorization: Option<String>,
    pub body: String,
}

/// How the stub answers.
#[derive(Debug, Clone, Copy)]
pub struct StubConfig {
    pub events: usize,
    pub gap: Duration,
}

/// A running stub on `127.0.0.1`, on its own runtime; stopped when dropped.
pub struct Stub {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Stub {
    /// Start a stub on a free loopback port.
    pub fn start(config: StubConfig) -> std::io::Result<Stub> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("stub")
            .enable_all()
            .build()?;
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let url = format!("http://{}", listener.local_addr()?);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        runtime.spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let _ = conn.set_nodelay(true);
                let log = log.clone();
                tokio::spawn(async move {
                    let svc =
                        hyper::service::service_fn(move |req| answer(log.clone(), config, req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(conn), svc)
                        .await;
                });
            }
        });
        Ok(Stub {
            url,
            seen,
            _runtime: runtime,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A response body fed by a task, frame by frame.
struct Fed(tokio::sync::mpsc::Receiver<Bytes>);

impl Body for Fed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// A body of `items`, each sent after its delay.
fn fed(items: impl Iterator<Item = (Duration, Bytes)> + Send + 'static) -> Fed {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        for (delay, b) in items {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if tx.send(b).await.is_err() {
                return;
            }
        }
    });
    Fed(rx)
}

async fn answer(
    log: Arc<Mutex<Vec<Seen>>>,
    config: StubConfig,
    req: Request<Incoming>,
) -> Result<Response<Fed>, Infallible> {
    let header = |n: &str| {
        req.headers()
            .get(n)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    let (path, api_key, authorization) = (
        req.uri().path().to_owned(),
        header("x-api-key"),
        header("authorization"),
    );
    let body = match req.into_body().collect().await {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        Err(_) => String::new(),
    };
    log.lock().unwrap_or_else(|p| p.into_inner()).push(Seen {
        path: path.clone(),
        api_key,
        authorization,
        body,
    });
    if let Some(n) = path
        .strip_prefix("/v1/bytes/")
        .and_then(|n| n.parse::<usize>().ok())
    {
        const FRAME: usize = 64 * 1024;
        let frame = Bytes::from(vec![b'x'; FRAME]);
        let frames = (0..n.div_ceil(FRAME)).map(move |i| {
            let len = FRAME.min(n - i * FRAME);
            (Duration::ZERO, frame.slice(..len))
        });
        return Ok(Response::new(fed(frames)));
    }
    let events = (0..config.events).map(move |i| {
        (
            if i == 0 { Duration::ZERO } else { config.gap },
            Bytes::from(format!(
                "event: content_block_delta\ndata: {{\"n\":{i}}}\n\n"
            )),
        )
    });
    let mut r = Response::new(fed(events));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    Ok(r)
}
