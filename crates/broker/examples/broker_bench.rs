//! What the credential broker adds, measured in one process against the same loopback stub
//! reached directly (`bench/broker` runs it, and runs the in-box figures).
//!
//! * `broker_bench inproc [REQUESTS] [MB]` — p50/p90 latency of REQUESTS small requests
//!   (keep-alive, one at a time) and the throughput of an MB-megabyte streamed answer, each
//!   direct and through a broker; prints one JSON object per figure.
//! * `broker_bench stub [EVENTS] [GAP_MS]` — a stub (EVENTS events GAP_MS apart, default one
//!   at once; `/v1/bytes/N` streams N bytes), its URL on stdout, until stdin closes.

use std::time::{Duration, Instant};

use agentbox_broker::stub::{Stub, StubConfig};
use agentbox_broker::{AnthropicCredential, Broker, Credentials, Secret, Spec, Token, Upstreams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("stub") => {
            let stub = Stub::start(StubConfig {
                events: args.get(1).and_then(|n| n.parse().ok()).unwrap_or(1),
                gap: Duration::from_millis(args.get(2).and_then(|n| n.parse().ok()).unwrap_or(0)),
            })?;
            println!("{}", stub.url());
            // Until the caller closes our stdin (or kills us).
            let mut sink = String::new();
            while std::io::stdin().read_line(&mut sink)? > 0 {}
            Ok(())
        }
        Some("inproc") => {
            let requests = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(2000);
            let mb = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(10);
            inproc(requests, mb)
        }
        _ => {
            eprintln!(
                "usage: broker_bench inproc [REQUESTS] [MB] | broker_bench stub [EVENTS] [GAP_MS]"
            );
            std::process::exit(2)
        }
    }
}

fn inproc(requests: usize, mb: usize) -> Result<(), Box<dyn std::error::Error>> {
    let stub = Stub::start(StubConfig {
        events: 1,
        gap: Duration::ZERO,
    })?;
    let broker = Broker::start(
        Token::generate()?,
        Spec {
            credentials: Credentials {
                anthropic: Some(AnthropicCredential::ApiKey(Secret::new("sk-bench"))),
                openai: None,
            },
            upstreams: Upstreams::new(stub.url(), stub.url())?,
        },
    )?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let via = format!("http://{}/anthropic", listener.local_addr()?);
    let _serving = broker.serve_tcp(listener)?;
    let token = broker.token().as_str().to_owned();
    let direct = stub.url().to_owned();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = reqwest::Client::builder().no_proxy().build()?;
        let once = |base: &str, path: &str| {
            client
                .post(format!("{base}{path}"))
                .header("x-api-key", &token)
                .body("{}")
                .send()
        };
        // Latency: rounds alternate direct and brokered, so drift hits both alike.
        let (mut d, mut b) = (Vec::new(), Vec::new());
        for _ in 0..50 {
            once(&direct, "/v1/messages").await?.bytes().await?;
            once(&via, "/v1/messages").await?.bytes().await?;
        }
        for i in 0..requests {
            let (base, into) = if i % 2 == 0 {
                (&direct, &mut d)
            } else {
                (&via, &mut b)
            };
            let t = Instant::now();
            let r = once(base, "/v1/messages").await?;
            assert!(r.status().is_success(), "status {}", r.status());
            r.bytes().await?;
            into.push(t.elapsed());
        }
        let (dp50, dp90, bp50, bp90) = (
            pct(&mut d, 50),
            pct(&mut d, 90),
            pct(&mut b, 50),
            pct(&mut b, 90),
        );
        println!(
            "{}",
            serde_json::json!({
                "figure": "latency", "requests": requests / 2,
                "direct_p50_us": dp50, "broker_p50_us": bp50, "added_p50_us": bp50 - dp50,
                "direct_p90_us": dp90, "broker_p90_us": bp90,
                "ratio_p50": bp50 / dp50,
            })
        );
        // Throughput of a streamed answer, read chunk by chunk as a client would.
        let path = format!("/v1/bytes/{}", mb * 1024 * 1024);
        let (mut d, mut b) = (Vec::new(), Vec::new());
        for round in 0..12 {
            for (base, into) in [(&direct, &mut d), (&via, &mut b)] {
                let t = Instant::now();
                let mut r = once(base, &path).await?;
                let mut n = 0;
                while let Some(c) = r.chunk().await? {
                    n += c.len();
                }
                assert_eq!(n, mb * 1024 * 1024);
                if round >= 2 {
                    into.push(t.elapsed());
                }
            }
        }
        let mbps = |v: &mut Vec<Duration>| mb as f64 / (pct(v, 50) / 1e6);
        let (dm, bm) = (mbps(&mut d), mbps(&mut b));
        println!(
            "{}",
            serde_json::json!({
                "figure": "throughput", "mb": mb,
                "direct_mb_s": dm, "broker_mb_s": bm, "ratio": bm / dm,
            })
        );
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    // The runtimes are dropped outside any async context.
    drop(_serving);
    drop(broker);
    Ok(())
}

/// The `p`th percentile of `v`, in microseconds.
fn pct(v: &mut [Duration], p: usize) -> f64 {
    v.sort();
    let i = ((v.len() - 1) * p) / 100;
    v[i].as_secs_f64() * 1e6
}
