//! An attempt's log read with bounded memory (issue 36, item 5): `GET .../logs` and
//! `GET .../log-chunks` held the whole log two or three times over in memory (about 3 GiB at the
//! 1 GiB attempt quota). Now the log is read in pages of at most [`PAGE_BYTES`] (and at least
//! one chunk), each page one short query (no connection is held between pages), and streamed to
//! the client through a channel of [`PIPELINE`] pieces, so the server holds at most about a page
//! and a few chunks of one log at once, whatever its size. A database failure after the first
//! byte can no longer change the status: the response is cut short (the client sees a body that
//! ends early, never a shorter log that looks whole).

use super::AppState;
use axum::body::{Body, Bytes};
use base64::Engine as _;
use leasewright_impl::AttemptId;
use sha2::Digest as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// The most log bytes one page reads (a page holds one chunk at least, whatever its size).
pub(super) const PAGE_BYTES: i64 = 1024 * 1024;

/// How many pieces (chunks, or JSON elements) may wait between the reader and the client.
const PIPELINE: usize = 2;

/// One page of the attempt's log after `after`: at most [`PAGE_BYTES`], at least one chunk.
const PAGE: &str = "SELECT seq, content FROM ( \
       SELECT seq, content, \
              sum(octet_length(content)) OVER (ORDER BY seq) - octet_length(content) AS before \
       FROM (SELECT seq, content FROM logs WHERE attempt_id = $1 AND seq > $2 \
             ORDER BY seq LIMIT 1024) AS next \
     ) AS page WHERE before < $3 ORDER BY seq";

/// How the log is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// The chunks' bytes, joined (`GET .../logs`).
    Text,
    /// A JSON array of `{"seq", "content_base64", "sha256"}` (`GET .../log-chunks`).
    Chunks,
}

/// The attempt's log, read one page at a time: the only way [`body`] reads it.
struct Pages {
    pool: sqlx::PgPool,
    attempt: AttemptId,
    /// The last sequence number read.
    after: i64,
}

impl Pages {
    fn new(pool: sqlx::PgPool, attempt: AttemptId) -> Self {
        Self {
            pool,
            attempt,
            after: i64::MIN,
        }
    }

    /// The next page: at most [`PAGE_BYTES`] of chunks, at least one; empty once the log is
    /// read. One short query: no connection is held between pages.
    async fn next(&mut self) -> Result<Vec<(i64, Vec<u8>)>, sqlx::Error> {
        let page: Vec<(i64, Vec<u8>)> = sqlx::query_as(PAGE)
            .bind(self.attempt.0)
            .bind(self.after)
            .bind(PAGE_BYTES)
            .fetch_all(&self.pool)
            .await?;
        if let Some((seq, _)) = page.last() {
            self.after = *seq;
        }
        Ok(page)
    }
}

/// The attempt's log as a streamed body.
pub(super) fn body(state: &AppState, attempt: AttemptId, shape: Shape) -> Body {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(PIPELINE);
    let mut pages = Pages::new(state.0.store.pool().clone(), attempt);
    tokio::spawn(async move {
        let mut first = true;
        if shape == Shape::Chunks && tx.send(Ok(Bytes::from_static(b"["))).await.is_err() {
            return;
        }
        loop {
            let page = match pages.next().await {
                Ok(page) => page,
                Err(error) => {
                    tracing::error!(%error, "reading a log page: the response is cut short");
                    let _ = tx.send(Err(std::io::Error::other("log read failed"))).await;
                    return;
                }
            };
            if page.is_empty() {
                break;
            }
            for (seq, content) in page {
                let piece = match shape {
                    Shape::Text => Bytes::from(content),
                    Shape::Chunks => {
                        let element = serde_json::json!({
                            "seq": seq,
                            "content_base64": base64::engine::general_purpose::STANDARD
                                .encode(&content),
                            "sha256": hex::encode(sha2::Sha256::digest(&content)),
                        });
                        let mut text = if first { Vec::new() } else { b",".to_vec() };
                        first = false;
                        text.extend_from_slice(element.to_string().as_bytes());
                        Bytes::from(text)
                    }
                };
                if tx.send(Ok(piece)).await.is_err() {
                    return; // the client went away
                }
            }
        }
        if shape == Shape::Chunks {
            let _ = tx.send(Ok(Bytes::from_static(b"]"))).await;
        }
    });
    Body::new(Streamed(rx))
}

/// The receiving end, as an HTTP body.
struct Streamed(mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl http_body::Body for Streamed {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        self.get_mut()
            .0
            .poll_recv(cx)
            .map(|piece| piece.map(|piece| piece.map(http_body::Frame::data)))
    }
}

#[cfg(test)]
mod tests {
    use super::{body, Pages, Shape, PAGE_BYTES};
    use crate::app::AppState;
    use crate::source::Limits;
    use leasewright_impl::database::TestDatabase;
    use leasewright_impl::{NewJob, Store, StoreConfig, SystemClock};
    use std::pin::Pin;
    use std::sync::Arc;

    const KIB: usize = 1024;

    /// Issue 36, item 5: reading a log held it whole, two or three times over. Each read step
    /// (a page) now materialises at most [`PAGE_BYTES`], or a single larger chunk, whatever the
    /// log's size: here 7.5 MiB (28 chunks of 256 KiB and one of 1.5 MiB) is read in 8 pages,
    /// none over a mebibyte but the lone large chunk's; and the streamed body (`GET .../logs`)
    /// gives back the log, byte for byte, never a piece larger than a chunk.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_log_is_read_a_bounded_page_at_a_time() {
        let db = TestDatabase::create().await.expect("test database");
        let store = Store::connect(db.url(), Arc::new(SystemClock), StoreConfig::default())
            .await
            .unwrap();
        let project = store.create_project("p").await.unwrap();
        let (runner, _) = store.create_runner(project, "r").await.unwrap();
        store
            .submit_job(project, NewJob::new("r", "d", "true"))
            .await
            .unwrap();
        let lease = store
            .claim(runner, None)
            .await
            .unwrap()
            .accepted()
            .expect("a lease");
        let mut sizes = vec![256 * KIB; 24];
        sizes.push(1536 * KIB);
        sizes.extend([256 * KIB; 4]);
        let mut log = Vec::new();
        for (seq, size) in sizes.iter().enumerate() {
            let chunk: Vec<u8> = (0..*size).map(|i| (i * 7 + seq) as u8).collect();
            let verdict = store
                .append_log(&lease.tuple, seq as i64, &chunk, None)
                .await
                .unwrap();
            assert_eq!(verdict.as_str(), "accepted");
            log.extend_from_slice(&chunk);
        }
        let mut pages = Pages::new(store.pool().clone(), lease.tuple.attempt);
        let (mut read, mut pages_read) = (Vec::new(), Vec::new());
        loop {
            let page = pages.next().await.unwrap();
            if page.is_empty() {
                break;
            }
            let bytes: usize = page.iter().map(|(_, content)| content.len()).sum();
            assert!(
                bytes <= PAGE_BYTES as usize || page.len() == 1,
                "a page of {} chunks held {bytes} bytes (at most {PAGE_BYTES}, or one chunk)",
                page.len()
            );
            pages_read.push(bytes / KIB);
            for (_, content) in page {
                read.extend_from_slice(&content);
            }
        }
        assert_eq!(
            pages_read,
            [1024, 1024, 1024, 1024, 1024, 1024, 1536, 1024],
            "KiB per page"
        );
        assert!(read == log, "the pages joined are the log");

        let state = AppState::new(store, None, "operator", Limits::submission());
        let mut streamed = body(&state, lease.tuple.attempt, Shape::Text);
        let (mut text, mut largest) = (Vec::new(), 0);
        while let Some(frame) =
            std::future::poll_fn(|cx| http_body::Body::poll_frame(Pin::new(&mut streamed), cx))
                .await
        {
            let data = frame.unwrap().into_data().expect("data");
            largest = largest.max(data.len());
            text.extend_from_slice(&data);
        }
        assert!(text == log, "the streamed body is the log");
        assert_eq!(largest, 1536 * KIB, "no piece larger than a chunk");
    }
}
