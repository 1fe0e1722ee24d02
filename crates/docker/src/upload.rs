//! Requests that send a large body: an import's root filesystem, a build's context.
//!
//! The engine answers them only once it has the whole body, so the request timeout cannot
//! bound them as a whole: over a slow link to a remote engine the upload alone may take
//! longer than any fixed bound, and the client would give up on an upload that is going
//! fine (while the engine goes on and finishes it). Instead the body must keep moving —
//! the connection takes a chunk at least once per [`Engine::request_timeout`] — and once
//! it has all gone, the engine has the request timeout to answer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use futures_util::{Stream, StreamExt};

use crate::engine::Engine;

/// Bytes handed to the connection at a time: small enough that even a slow link takes
/// one well within the limit, so that a moving upload is seen moving.
pub(crate) const CHUNK: usize = 64 << 10;

/// How often the watch looks.
const TICK: Duration = Duration::from_millis(250);

/// Not yet: the body has not ended.
const NOT_YET: u64 = u64::MAX;

/// What an upload's body has done, for [`UploadWatch::expired`].
pub(crate) struct UploadWatch {
    start: Instant,
    /// Milliseconds after `start` of the last chunk taken.
    last: AtomicU64,
    /// Milliseconds after `start` of the body's end, or [`NOT_YET`].
    ended: AtomicU64,
    limit: Duration,
}

impl UploadWatch {
    /// A watch for an upload on `engine`, bounded by its request timeout.
    pub(crate) fn new(engine: &Engine) -> Arc<UploadWatch> {
        Arc::new(UploadWatch {
            start: Instant::now(),
            last: AtomicU64::new(0),
            ended: AtomicU64::new(NOT_YET),
            limit: engine.request_timeout(),
        })
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(NOT_YET - 1)
    }

    /// `body`, noting each chunk as the connection takes it and the end.
    pub(crate) fn track<S, T>(self: &Arc<Self>, body: S) -> impl Stream<Item = T> + Send
    where
        S: Stream<Item = T> + Send,
    {
        let on_chunk = Arc::clone(self);
        let on_end = Arc::clone(self);
        body.inspect(move |_| on_chunk.last.store(on_chunk.now(), Ordering::Relaxed))
            .chain(futures_util::stream::poll_fn(move |_| {
                on_end.ended.store(on_end.now(), Ordering::Relaxed);
                std::task::Poll::Ready(None)
            }))
    }

    /// Resolves (with why) when the body stopped moving for the limit, or the engine did
    /// not answer within it after the body's end; pending while neither.
    pub(crate) async fn expired(&self) -> String {
        let limit = u64::try_from(self.limit.as_millis()).unwrap_or(NOT_YET - 1);
        loop {
            tokio::time::sleep(TICK).await;
            let now = self.now();
            let ended = self.ended.load(Ordering::Relaxed);
            if ended != NOT_YET {
                if now.saturating_sub(ended) > limit {
                    return format!(
                        "no answer {} s after the upload ended",
                        self.limit.as_secs()
                    );
                }
            } else if now.saturating_sub(self.last.load(Ordering::Relaxed)) > limit {
                return format!("the upload did not move for {} s", self.limit.as_secs());
            }
        }
    }
}

/// The first item of `answer` (the engine's answer to the upload), unless the upload
/// expires first: `Err` says why.
pub(crate) async fn first_answer<S: Stream + Unpin>(
    watch: &UploadWatch,
    answer: &mut S,
) -> Result<Option<S::Item>, String> {
    tokio::select! {
        item = answer.next() => Ok(item),
        why = watch.expired() => Err(why),
    }
}

impl Engine {
    /// Follow the engine's answer to an upload while `doing`: its first step within the
    /// upload's watch, then every step to the end. The engine reports a failed import or
    /// build inside the stream, not as an HTTP error: `check` reads each step and says
    /// why it failed, which ends the upload with that reason.
    pub(crate) async fn follow_upload<S, T>(
        &self,
        watch: &UploadWatch,
        answer: S,
        doing: &str,
        mut check: impl FnMut(T) -> Option<String>,
    ) -> crate::Result<()>
    where
        S: Stream<Item = Result<T, bollard::errors::Error>>,
    {
        let failed = |why: String| crate::DockerError::Engine {
            engine: self.endpoint().shown(),
            doing: doing.to_owned(),
            why,
        };
        futures_util::pin_mut!(answer);
        let first = first_answer(watch, &mut answer).await.map_err(failed)?;
        let rest = futures_util::stream::iter(first).chain(answer);
        futures_util::pin_mut!(rest);
        while let Some(step) = rest.next().await {
            let step = step.map_err(|e| self.fail(doing, e))?;
            if let Some(why) = check(step) {
                return Err(failed(why));
            }
        }
        Ok(())
    }
}

/// `bytes` as a body of [`CHUNK`]-sized pieces.
pub(crate) fn chunks(bytes: bytes::Bytes) -> impl Stream<Item = std::io::Result<bytes::Bytes>> {
    let n = bytes.len().div_ceil(CHUNK);
    futures_util::stream::iter(
        (0..n).map(move |i| Ok(bytes.slice(i * CHUNK..((i + 1) * CHUNK).min(bytes.len())))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(limit: Duration) -> Arc<UploadWatch> {
        Arc::new(UploadWatch {
            start: Instant::now(),
            last: AtomicU64::new(0),
            ended: AtomicU64::new(NOT_YET),
            limit,
        })
    }

    #[test]
    fn chunks_cover_the_bytes_in_order() {
        let data: Vec<u8> = (0..(2 * CHUNK + 5)).map(|i| i as u8).collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("rt");
        let pieces: Vec<bytes::Bytes> = rt.block_on(
            chunks(bytes::Bytes::from(data.clone()))
                .map(|c| c.expect("chunk"))
                .collect(),
        );
        assert_eq!(
            pieces.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [CHUNK, CHUNK, 5]
        );
        assert_eq!(pieces.concat(), data);
        let none: Vec<_> = rt.block_on(chunks(bytes::Bytes::new()).collect());
        assert!(none.is_empty());
    }

    #[test]
    fn a_body_that_stops_moving_expires_and_its_end_is_seen() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("rt");
        rt.block_on(async {
            // Nothing taken for longer than the limit: expired, saying so.
            let w = watch(Duration::from_secs(5));
            let why = w.expired().await;
            assert_eq!(why, "the upload did not move for 5 s");
            assert!(w.start.elapsed() >= Duration::from_secs(5));
            // A body taken whole: its end is noted, and then the engine's answer is
            // waited for.
            let w = watch(Duration::from_secs(5));
            let n = w.track(futures_util::stream::iter([1, 2, 3])).count().await;
            assert_eq!(n, 3);
            assert_ne!(w.ended.load(Ordering::Relaxed), NOT_YET);
            let why = w.expired().await;
            assert_eq!(why, "no answer 5 s after the upload ended");
            // An answer that comes in time is the answer.
            let w = watch(Duration::from_secs(5));
            let mut answer = futures_util::stream::iter(["done"]);
            assert_eq!(first_answer(&w, &mut answer).await, Ok(Some("done")));
        });
    }
}
