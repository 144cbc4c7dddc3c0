//! Extractors: JSON bodies, path segments and query strings whose failures are JSON errors, and the
//! two kinds of authentication (a runner's bearer token, the operator token).

use super::error::ApiError;
use super::listen::BodyReadTimeout;
use super::AppState;
use crate::wire::TupleBody;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::{header, HeaderMap, StatusCode};
use base64::Engine as _;
use leasewright_impl::{AttemptId, JobId, LeaseId, RunnerId, Tuple};
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use uuid::Uuid;

pub(super) const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

pub(super) fn digest32(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Whether two byte strings are equal, in a time that depends only on their lengths (public:
/// both are SHA-256 digests), never on where they differ. `subtle` keeps the optimizer from
/// turning the comparison into an early exit.
pub(super) fn constant_time_eq(left: &[u8], right: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    left.ct_eq(right).into()
}

/// A JSON body whose failures are JSON errors (400, 413).
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        json_content_type(req.headers())?;
        let bytes = Bytes::from_request(req, state).await.map_err(body_error)?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// A body is JSON only when it says so (`Content-Type: application/json`, parameters allowed):
/// otherwise `415`. A browser page can send `text/plain` to another origin without asking
/// (a "simple request"); it cannot send `application/json` that way.
fn json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let essence = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .map(str::trim);
    match essence {
        Some(essence) if essence.eq_ignore_ascii_case("application/json") => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the body must be sent as Content-Type: application/json",
        )),
    }
}

/// Why a body could not be read: too large (413), stalled past the read timeout (408), or
/// malformed (400).
#[allow(clippy::needless_pass_by_value)] // used as `map_err(body_error)`
fn body_error(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the request body exceeds this route's limit",
        );
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&rejection);
    while let Some(error) = cause {
        if error.is::<BodyReadTimeout>() {
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the request body stalled past the server's read timeout",
            );
        }
        cause = error.source();
    }
    ApiError::bad_request(rejection.body_text())
}

/// A JSON body: an object (docs/http.md), whose strings hold no NUL character (PostgreSQL text
/// cannot store one: it would be a database error, a 5xx, instead of a 400).
pub(super) fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let first = bytes
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'{') {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    // Whole-body UTF-8 (RFC 8259 §8.1): serde skips the strings of unknown fields unchecked.
    if std::str::from_utf8(bytes).is_err() {
        return Err(ApiError::bad_request("the body is not UTF-8"));
    }
    if has_escaped_nul(bytes) {
        return Err(ApiError::bad_request(
            "strings must not contain the NUL character (\\u0000)",
        ));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// Whether JSON text holds the escape `\u0000` (a raw NUL byte is not JSON at all). A `\u0000`
/// preceded by an even number of backslashes is the escape; after an odd number it is text.
pub(super) fn has_escaped_nul(bytes: &[u8]) -> bool {
    let mut backslashes = 0usize;
    for (i, &byte) in bytes.iter().enumerate() {
        if byte == b'\\' {
            backslashes += 1;
            continue;
        }
        if byte == b'u' && backslashes % 2 == 1 && bytes[i + 1..].starts_with(b"0000") {
            return true;
        }
        backslashes = 0;
    }
    false
}

/// The longest name, key, slot or deployment id taken (a PostgreSQL index entry holds at most
/// about 2.7 KB; a longer key would be a database error, a 5xx, instead of a 400).
pub const MAX_IDENTIFIER_BYTES: usize = 1024;

/// `text` if it is a usable name, key, slot or deployment id: at most
/// [`MAX_IDENTIFIER_BYTES`], no NUL character.
pub(super) fn identifier<'a>(text: &'a str, what: &str) -> Result<&'a str, ApiError> {
    if text.len() > MAX_IDENTIFIER_BYTES {
        return Err(ApiError::bad_request(format!(
            "{what} is longer than {MAX_IDENTIFIER_BYTES} bytes"
        )));
    }
    if text.contains('\0') {
        return Err(ApiError::bad_request(format!(
            "{what} must not contain the NUL character"
        )));
    }
    Ok(text)
}

/// Path parameters whose failures (not UTF-8, a wrong count) are JSON errors (400).
pub struct Segments<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Segments<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| Segments(value))
            .map_err(|rejection| ApiError::bad_request(rejection.body_text()))
    }
}

/// A query string whose failures are JSON errors (400).
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| QueryParams(value))
            .map_err(|rejection| ApiError::bad_request(rejection.body_text()))
    }
}

/// A JSON body that may be empty (then `T::default()`); otherwise as [`JsonBody`].
pub struct OptionalJsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for OptionalJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let headers = req.headers().clone();
        let bytes = Bytes::from_request(req, state).await.map_err(body_error)?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJsonBody(T::default()));
        }
        json_content_type(&headers)?;
        parse_json(&bytes).map(OptionalJsonBody)
    }
}

pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// The runner a bearer token authenticates (authentication only: ownership is the Store's): the
/// request slots' verdict when they looked the token up for this request (app/slots.rs), the
/// store's otherwise (a token verified before is authenticated again: it may be revoked).
pub struct RunnerAuth(pub RunnerId);

impl FromRequestParts<AppState> for RunnerAuth {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let token = bearer(&parts.headers).ok_or_else(ApiError::unauthorized)?;
        // Looked up by the request slots for this request: their verdict, no second read.
        let looked_up = parts
            .extensions
            .get::<super::slots::Caller>()
            .and_then(|caller| caller.looked_up);
        let runner = match looked_up {
            Some(verdict) => verdict,
            None => state.0.store.authenticate(token).await?,
        };
        match runner {
            Some(runner) => Ok(RunnerAuth(runner)),
            None => {
                // Revoked since it was verified: its next request is looked up again.
                state.forget_token(token);
                Err(ApiError::unauthorized())
            }
        }
    }
}

/// The operator (one operator token for the whole server).
pub struct OperatorAuth;

impl FromRequestParts<AppState> for OperatorAuth {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let token = bearer(&parts.headers).ok_or_else(ApiError::unauthorized)?;
        if constant_time_eq(&digest32(token.as_bytes()), &state.0.operator_token_sha256) {
            Ok(OperatorAuth)
        } else {
            Err(ApiError::unauthorized())
        }
    }
}

pub(super) fn parse_uuid(text: &str, what: &str) -> Result<Uuid, ApiError> {
    Uuid::try_parse(text).map_err(|_| ApiError::bad_request(format!("{what} is not a UUID")))
}

pub(super) fn tuple(runner: RunnerId, body: &TupleBody) -> Tuple {
    Tuple {
        runner,
        job: JobId(body.job),
        attempt: AttemptId(body.attempt),
        lease_id: LeaseId(body.lease_id),
        fence: body.fence,
    }
}

pub(super) fn decode(content: &str) -> Result<Vec<u8>, ApiError> {
    B64.decode(content)
        .map_err(|_| ApiError::bad_request("content_base64 is not valid base64"))
}

#[cfg(test)]
mod tests {
    use super::{constant_time_eq, digest32, has_escaped_nul};

    #[test]
    fn operator_token_hashes_are_equal_only_when_every_byte_is() {
        let hash = digest32(b"operator-secret");
        assert!(constant_time_eq(&hash, &digest32(b"operator-secret")));
        assert!(!constant_time_eq(&hash, &digest32(b"operator-secret ")));
        for at in [0, 16, 31] {
            let mut other = hash;
            other[at] ^= 1;
            assert!(!constant_time_eq(&hash, &other), "byte {at}");
        }
        assert!(!constant_time_eq(&hash, &hash[..31]));
        assert!(!constant_time_eq(&hash, b""));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn an_escaped_nul_is_found_and_an_escaped_backslash_before_u0000_is_text() {
        assert!(has_escaped_nul(br#"{"name": "a\u0000b"}"#));
        assert!(has_escaped_nul(br#"{"a\u0000": 1}"#));
        assert!(has_escaped_nul(br#"{"name": "\\\u0000"}"#));
        assert!(!has_escaped_nul(br#"{"name": "\\u0000"}"#));
        assert!(!has_escaped_nul(br#"{"name": "\u0001 u0000"}"#));
        assert!(!has_escaped_nul(br#"{"name": "\\\\u0000"}"#));
    }
}
