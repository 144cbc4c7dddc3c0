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

/// The attempt's log as a streamed body.
pub(super) fn body(state: &AppState, attempt: AttemptId, shape: Shape) -> Body {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(PIPELINE);
    let pool = state.0.store.pool().clone();
    tokio::spawn(async move {
        let mut after = i64::MIN;
        let mut first = true;
        if shape == Shape::Chunks && tx.send(Ok(Bytes::from_static(b"["))).await.is_err() {
            return;
        }
        loop {
            let page: Result<Vec<(i64, Vec<u8>)>, sqlx::Error> = sqlx::query_as(PAGE)
                .bind(attempt.0)
                .bind(after)
                .bind(PAGE_BYTES)
                .fetch_all(&pool)
                .await;
            let page = match page {
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
                after = seq;
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
