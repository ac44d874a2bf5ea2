//! HTTP: every request goes through [`Ctx::req_raw`], which records it and its answer in the
//! case's transcript, and [`Resp`] checks what came back.
//!
//! * Bearer tokens are never written to the transcript (`[Bearer <redacted>]`); a request body
//!   that is not JSON and an `application/octet-stream` response are shown by size only.
//! * Every request carries the run's wait period as its timeout; a transport error fails the
//!   case with the request named.
//! * An error body is judged by the profile ([`check_error_body`]): under the documents profile
//!   any body passes, JSON or text (SPEC.md: "Error body shape and error code names: not
//!   shown"), and a refusal is its status alone; under the reference profile it must be our
//!   `{error, message}`.
//! * [`Resp::expect_error`] is for statuses the documents give; [`Resp::refused`] for those
//!   they do not (any 4xx under the documents profile, ours under the reference profile).

use bytes::Bytes;
use http::{HeaderName, Method, header::CONTENT_TYPE};
use seam::net::HttpRequest;
use serde_json::Value;

use super::Ctx;
use crate::transcript::Direction;
use crate::verdict::{CaseResult, Failure, Profile};
use crate::{ensure, fail};

impl Ctx {
    /// Sends a request with an optional bearer token and optional JSON body.
    pub async fn req(
        &mut self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Resp, Failure> {
        let (bytes, ctype) = match body {
            Some(v) => (Bytes::from(v.to_string()), Some("application/json")),
            None => (Bytes::new(), None),
        };
        self.req_raw(method, path, token, bytes, ctype, &[]).await
    }

    /// Sends a request with a raw body and extra headers.
    pub async fn req_raw(
        &mut self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Bytes,
        content_type: Option<&str>,
        headers: &[(HeaderName, String)],
    ) -> Result<Resp, Failure> {
        let what = format!("{method} {path}");
        let shown = if body.is_empty() {
            String::new()
        } else if content_type == Some("application/json") {
            format!(" {}", String::from_utf8_lossy(&body))
        } else {
            format!(" <{} bytes>", body.len())
        };
        let auth = if token.is_some() {
            " [Bearer <redacted>]"
        } else {
            ""
        };
        self.transcript
            .record(Direction::Out, "http", &format!("{what}{auth}{shown}"));
        let mut req = HttpRequest::new(method, path).timeout(self.shared.wait);
        if let Some(t) = token {
            req = req.bearer(t);
        }
        if let Some(ct) = content_type {
            req = req.header(CONTENT_TYPE, ct);
        }
        for (name, value) in headers {
            req = req.header(name.clone(), value.clone());
        }
        let req = req.body(body);
        let mut resp = self.transport.http(req.clone()).await;
        if resp.is_err() && self.steps().is_some() {
            // After a restart of the relay a pooled connection to the killed process is dead:
            // one more try on a fresh one.
            resp = self.transport.http(req).await;
        }
        let resp = resp.map_err(|e| Failure::Fail(format!("{what}: transport error: {e}")))?;
        let status = resp.status.as_u16();
        let text = if resp
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/octet-stream"))
        {
            format!("<{} bytes>", resp.body.len())
        } else {
            String::from_utf8_lossy(&resp.body).into_owned()
        };
        self.transcript
            .record(Direction::In, "http", &format!("{status} {text}"));
        Ok(Resp {
            status,
            headers: resp.headers,
            body: resp.body,
            what,
            profile: self.shared.profile,
        })
    }

    /// `GET` with an optional token.
    pub async fn get(&mut self, path: &str, token: Option<&str>) -> Result<Resp, Failure> {
        self.req(Method::GET, path, token, None).await
    }

    /// `POST` with an optional token and JSON body.
    pub async fn post(
        &mut self,
        path: &str,
        token: Option<&str>,
        body: &Value,
    ) -> Result<Resp, Failure> {
        self.req(Method::POST, path, token, Some(body)).await
    }
}

/// An HTTP response as the case saw it.
#[derive(Debug, Clone)]
pub struct Resp {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: http::HeaderMap,
    /// Raw body.
    pub body: Bytes,
    /// What was asked (for failure messages).
    pub what: String,
    /// The run's profile (how error bodies are judged).
    pub profile: Profile,
}

impl Resp {
    /// The body as JSON (`null` for an empty body).
    pub fn json(&self) -> Result<Value, Failure> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&self.body).map_err(|e| {
            Failure::Fail(format!(
                "{}: body is not JSON ({e}): {}",
                self.what,
                String::from_utf8_lossy(&self.body)
            ))
        })
    }

    /// Requires a 2xx status; returns the JSON body.
    pub fn ok(&self) -> Result<Value, Failure> {
        ensure!(
            (200..300).contains(&self.status),
            "{}: expected 2xx, got {} {}",
            self.what,
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        self.json()
    }

    /// Requires exactly `status`; returns the JSON body.
    pub fn expect(&self, status: u16) -> Result<Value, Failure> {
        self.status_is(status)?;
        self.json()
    }

    fn status_is(&self, status: u16) -> Result<(), Failure> {
        ensure!(
            self.status == status,
            "{}: expected {status}, got {} {}",
            self.what,
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        Ok(())
    }

    /// Requires `status` (one the documents give); under the reference profile also our error
    /// body. Returns the body as JSON, or (documents profile) as a JSON string when it is not
    /// JSON: the documents give no error body shape.
    pub fn expect_error(&self, status: u16) -> Result<Value, Failure> {
        self.status_is(status)?;
        self.error_body()
    }

    /// A refusal whose status the documents do not give: any 4xx under the documents profile;
    /// exactly `ours` (our relay's status) with our error body under the reference profile.
    pub fn refused(&self, ours: u16) -> Result<Value, Failure> {
        match self.profile {
            Profile::Reference => self.expect_error(ours),
            Profile::Documents => self.expect_client_error(),
        }
    }

    /// Requires a 4xx status (and our error body under the reference profile).
    pub fn expect_client_error(&self) -> Result<Value, Failure> {
        ensure!(
            (400..500).contains(&self.status),
            "{}: expected a 4xx refusal, got {} {}",
            self.what,
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        self.error_body()
    }

    /// The body of a refusal, judged by the profile: under the reference profile our JSON
    /// error body; under the documents profile anything (JSON, or else the text as a JSON
    /// string), since they give no shape.
    fn error_body(&self) -> Result<Value, Failure> {
        let body = match (self.profile, self.json()) {
            (Profile::Documents, Err(_)) => {
                return Ok(Value::String(
                    String::from_utf8_lossy(&self.body).into_owned(),
                ));
            }
            (_, body) => body?,
        };
        check_error_body(&body, self.profile).map_err(|r| {
            Failure::Fail(format!(
                "{}: refused with {} as required, but the body is not our relay's \
                 (reference profile): {r}",
                self.what, self.status
            ))
        })?;
        Ok(body)
    }
}

/// The error code of an error body or frame: the `UPPER_SNAKE` string in `error`, else in
/// `code`, with the field it was found in.
pub fn error_code(body: &Value) -> Option<(&'static str, &str)> {
    ["error", "code"].into_iter().find_map(|field| {
        body.get(field)
            .and_then(Value::as_str)
            .filter(|c| {
                !c.is_empty()
                    && c.bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            })
            .map(|c| (field, c))
    })
}

/// Checks an error body (or error frame) under `profile`: the documents give no shape
/// ("Error body shape and error code names: not shown", SPEC §Errors), so anything passes, and
/// a refusal is judged by what the relay did (the status; no ack, no delivery); the reference
/// profile wants exactly our `{error: CODE, message: string}`.
pub fn check_error_body(body: &Value, profile: Profile) -> Result<(), String> {
    if profile == Profile::Documents {
        return Ok(());
    }
    let Some(code) = body.get("error").and_then(Value::as_str) else {
        return Err(format!("error body has no string `error`: {body}"));
    };
    if code.is_empty()
        || !code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(format!("`error` is not an UPPER_SNAKE code: {code:?}"));
    }
    if body.get("message").and_then(Value::as_str).is_none() {
        return Err(format!("error body has no string `message`: {body}"));
    }
    Ok(())
}

/// The JSON type a field must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string.
    Str,
    /// A non-empty string.
    NonEmpty,
    /// An unsigned integer.
    Uint,
    /// Any number.
    Num,
    /// A boolean.
    Bool,
    /// An array.
    Arr,
    /// An object.
    Obj,
    /// An RFC 3339 / ISO 8601 date-time string.
    Iso,
}

fn kind_ok(v: &Value, k: Kind) -> bool {
    match k {
        Kind::Str => v.is_string(),
        Kind::NonEmpty => v.as_str().is_some_and(|s| !s.is_empty()),
        Kind::Uint => v.is_u64(),
        Kind::Num => v.is_number(),
        Kind::Bool => v.is_boolean(),
        Kind::Arr => v.is_array(),
        Kind::Obj => v.is_object(),
        Kind::Iso => v.as_str().is_some_and(|s| {
            s.len() >= 20
                && s.as_bytes().get(4) == Some(&b'-')
                && s.as_bytes().get(10) == Some(&b'T')
        }),
    }
}

/// Requires each named field to be present with its kind.
pub fn fields(what: &str, v: &Value, spec: &[(&str, Kind)]) -> CaseResult {
    for (name, kind) in spec {
        match v.get(*name) {
            None => fail!("{what}: field `{name}` is missing in {v}"),
            Some(f) if !kind_ok(f, *kind) => {
                fail!("{what}: field `{name}` should be {kind:?}, got {f}")
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The string field `name` of `v`.
pub fn s<'a>(v: &'a Value, name: &str) -> Result<&'a str, Failure> {
    v.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| Failure::Fail(format!("no string `{name}` in {v}")))
}

/// The unsigned integer field `name` of `v`.
pub fn u(v: &Value, name: &str) -> Result<u64, Failure> {
    v.get(name)
        .and_then(Value::as_u64)
        .ok_or_else(|| Failure::Fail(format!("no unsigned integer `{name}` in {v}")))
}

/// A JSON id (number or string) as path text.
pub fn id_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
