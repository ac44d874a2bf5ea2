//! WebSocket: a case's sockets ([`Ws`]), opened the way a client opens them.
//!
//! * [`Ctx::connect`] asks for a ticket (A5) and falls back to the token in the query, then
//!   sends `sync`; tickets and tokens are transcript secrets.
//! * Every frame in and out is recorded on the socket's own transcript channel (`ws:<label>`).
//! * Waiting for a frame keeps every other frame queued, in arrival order, for later
//!   expectations; a wait fails after the run's wait period and lists what was left unconsumed.
//!   "No such frame" is checked over the quiet period.
//! * A close, an error or the end of the stream marks the socket closed; later reads return
//!   nothing at once.

use std::collections::VecDeque;
use std::time::Duration;

use seam::net::{WsMessage, WsRequest};
use serde_json::{Value, json};
use wire::http::paths;

use super::Ctx;
use super::accounts::Account;
use super::requests::{check_error_body, s};
use crate::transcript::{Direction, Transcript};
use crate::transport::WsIo;
use crate::verdict::{CaseResult, Failure, Profile};
use crate::{ensure, fail};

impl Ctx {
    /// Opens a socket for `acct` (A5 ticket, falling back to the token), then sends `sync`
    /// (a setup step).
    pub async fn connect(&mut self, acct: &Account, label: &str) -> Result<Ws, Failure> {
        self.connect_unchecked(acct, label)
            .await
            .map_err(|f| f.in_setup(&format!("opening {label}'s WebSocket")))
    }

    async fn connect_unchecked(&mut self, acct: &Account, label: &str) -> Result<Ws, Failure> {
        let ticket = self
            .post(paths::WS_TICKET, Some(&acct.token), &json!({}))
            .await?;
        let path = if (200..300).contains(&ticket.status) {
            let t = s(&ticket.json()?, "ticket")?.to_owned();
            self.transcript.secret(&t);
            format!("{}?user_uuid={}&ticket={t}", paths::WS, acct.uuid)
        } else {
            format!("{}?user_uuid={}&token={}", paths::WS, acct.uuid, acct.token)
        };
        let mut ws = self
            .open_ws(WsRequest::new(path.clone()), &path, label)
            .await
            .map_err(|e| Failure::Fail(format!("opening the WebSocket for {label}: {e}")))?;
        ws.send(&json!({"type": "sync", "crypto_v": 1})).await?;
        Ok(ws)
    }

    /// Opens a socket to `path` (already with query); `Err` carries the handshake error.
    pub async fn open_ws(
        &mut self,
        req: WsRequest,
        shown: &str,
        label: &str,
    ) -> Result<Ws, String> {
        let channel = format!("ws:{label}");
        self.transcript
            .record(Direction::Out, &channel, &format!("GET {shown} (upgrade)"));
        match self.transport.ws(req).await {
            Ok(io) => {
                self.transcript
                    .record(Direction::In, &channel, "101 Switching Protocols");
                Ok(Ws {
                    io,
                    channel,
                    transcript: self.transcript.clone(),
                    pending: VecDeque::new(),
                    closed: false,
                    wait: self.shared.wait,
                    quiet: self.shared.quiet,
                    profile: self.shared.profile,
                })
            }
            Err(e) => {
                let text = e.to_string();
                self.transcript
                    .record(Direction::In, &channel, &format!("refused: {text}"));
                Err(text)
            }
        }
    }
}

/// An open WebSocket of a case.
pub struct Ws {
    io: Box<dyn WsIo>,
    channel: String,
    transcript: Transcript,
    pending: VecDeque<Value>,
    closed: bool,
    wait: Duration,
    quiet: Duration,
    profile: Profile,
}

impl std::fmt::Debug for Ws {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ws")
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl Ws {
    /// Sends a JSON frame.
    pub async fn send(&mut self, frame: &Value) -> CaseResult {
        self.send_text(&frame.to_string()).await
    }

    /// Sends a raw text frame.
    pub async fn send_text(&mut self, text: &str) -> CaseResult {
        self.transcript.record(Direction::Out, &self.channel, text);
        self.io
            .send(WsMessage::text(text.to_owned()))
            .await
            .map_err(|e| Failure::Fail(format!("{}: send failed: {e}", self.channel)))
    }

    /// The next JSON frame within `within`, `None` on timeout or when the socket ended.
    async fn read(&mut self, within: Duration) -> Option<Value> {
        if self.closed {
            return None;
        }
        let deadline = tokio::time::sleep(within);
        tokio::pin!(deadline);
        loop {
            let next = tokio::select! {
                biased;
                () = &mut deadline => return None,
                m = self.io.recv() => m,
            };
            match next {
                Some(Ok(WsMessage::Text(t))) => {
                    self.transcript
                        .record(Direction::In, &self.channel, t.as_str());
                    match serde_json::from_str::<Value>(t.as_str()) {
                        Ok(v) => return Some(v),
                        Err(_) => return Some(json!({"type": "<not json>", "text": t.as_str()})),
                    }
                }
                Some(Ok(WsMessage::Binary(b))) => {
                    self.transcript.record(
                        Direction::In,
                        &self.channel,
                        &format!("<binary {} bytes>", b.len()),
                    );
                }
                Some(Ok(WsMessage::Close(c))) => {
                    self.transcript
                        .record(Direction::In, &self.channel, &format!("close {c:?}"));
                    self.closed = true;
                    return None;
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    self.transcript
                        .record(Direction::In, &self.channel, &format!("error: {e}"));
                    self.closed = true;
                    return None;
                }
                None => {
                    self.transcript
                        .record(Direction::In, &self.channel, "end of stream");
                    self.closed = true;
                    return None;
                }
            }
        }
    }

    /// Waits for the first frame of `frame_type` matching `pred`; other frames stay queued.
    pub async fn expect_where(
        &mut self,
        frame_type: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Result<Value, Failure> {
        let matches =
            |v: &Value| v.get("type").and_then(Value::as_str) == Some(frame_type) && pred(v);
        if let Some(pos) = self.pending.iter().position(matches) {
            return Ok(self.pending.remove(pos).unwrap_or_default());
        }
        let wait = self.wait;
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        loop {
            let v = tokio::select! {
                biased;
                () = &mut deadline => None,
                v = self.read(wait) => v,
            };
            match v {
                Some(v) if matches(&v) => return Ok(v),
                Some(v) => self.pending.push_back(v),
                None => {
                    let seen: Vec<String> = self.pending.iter().map(Value::to_string).collect();
                    fail!(
                        "{}: no `{frame_type}` frame within {} ms{} (unconsumed: [{}])",
                        self.channel,
                        wait.as_millis(),
                        if self.closed {
                            "; the socket closed"
                        } else {
                            ""
                        },
                        seen.join(", ")
                    );
                }
            }
        }
    }

    /// Waits for the first frame of `frame_type`.
    pub async fn expect(&mut self, frame_type: &str) -> Result<Value, Failure> {
        self.expect_where(frame_type, |_| true).await
    }

    /// Requires that no frame of `frame_type` matching `pred` arrives within the quiet period.
    pub async fn expect_none_where(
        &mut self,
        frame_type: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> CaseResult {
        let matches =
            |v: &Value| v.get("type").and_then(Value::as_str) == Some(frame_type) && pred(v);
        if let Some(v) = self.pending.iter().find(|v| matches(v)) {
            fail!("{}: unexpected `{frame_type}` frame {v}", self.channel);
        }
        let quiet = self.quiet;
        let deadline = tokio::time::sleep(quiet);
        tokio::pin!(deadline);
        loop {
            let v = tokio::select! {
                biased;
                () = &mut deadline => return Ok(()),
                v = self.read(quiet) => v,
            };
            match v {
                Some(v) if matches(&v) => {
                    fail!("{}: unexpected `{frame_type}` frame {v}", self.channel)
                }
                Some(v) => self.pending.push_back(v),
                None if self.closed => return Ok(()),
                None => {}
            }
        }
    }

    /// Requires that no frame of `frame_type` arrives within the quiet period.
    pub async fn expect_none(&mut self, frame_type: &str) -> CaseResult {
        self.expect_none_where(frame_type, |_| true).await
    }

    /// Whether the relay closes the socket within the wait period (queued frames are kept).
    pub async fn closes(&mut self) -> bool {
        let wait = self.wait;
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        loop {
            if self.closed {
                return true;
            }
            let v = tokio::select! {
                biased;
                () = &mut deadline => return false,
                v = self.read(wait) => v,
            };
            if let Some(v) = v {
                self.pending.push_back(v);
            }
        }
    }

    /// How many already received, not yet consumed frames are of `frame_type`.
    pub fn queued(&self, frame_type: &str) -> usize {
        self.pending
            .iter()
            .filter(|v| v.get("type").and_then(Value::as_str) == Some(frame_type))
            .count()
    }

    /// Whether the relay has closed the socket.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Sends `msg` and returns its `ack` (matched by id).
    pub async fn send_msg(&mut self, id: &str, frame: &Value) -> Result<Value, Failure> {
        self.send(frame).await?;
        self.ack(id).await
    }

    /// Waits for the `ack` of `id`; an `error` frame about `id` fails with its code.
    pub async fn ack(&mut self, id: &str) -> Result<Value, Failure> {
        let wanted = id.to_owned();
        let v = self
            .expect_where_any(&["ack", "error"], move |v| {
                v.get("id").and_then(Value::as_str) == Some(wanted.as_str())
            })
            .await?;
        if v.get("type").and_then(Value::as_str) == Some("error") {
            fail!("{}: message {id} refused: {v}", self.channel);
        }
        Ok(v)
    }

    /// The `ack` or `error` frame about message `id` within `within`, if any came (others
    /// stay queued).
    pub async fn answer_to(&mut self, id: &str, within: Duration) -> Option<Value> {
        self.first_within(
            &["ack", "error"],
            |v| v.get("id").and_then(Value::as_str) == Some(id),
            within,
        )
        .await
    }

    /// Waits for the first frame whose type is one of `types` and that matches `pred`.
    pub async fn expect_where_any(
        &mut self,
        types: &[&str],
        pred: impl Fn(&Value) -> bool,
    ) -> Result<Value, Failure> {
        let types: Vec<String> = types.iter().map(|t| (*t).to_owned()).collect();
        let matches = |v: &Value| {
            v.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| types.iter().any(|x| x == t))
                && pred(v)
        };
        if let Some(pos) = self.pending.iter().position(matches) {
            return Ok(self.pending.remove(pos).unwrap_or_default());
        }
        let wait = self.wait;
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        loop {
            let v = tokio::select! {
                biased;
                () = &mut deadline => None,
                v = self.read(wait) => v,
            };
            match v {
                Some(v) if matches(&v) => return Ok(v),
                Some(v) => self.pending.push_back(v),
                None => fail!(
                    "{}: none of {types:?} within {} ms{}",
                    self.channel,
                    wait.as_millis(),
                    if self.closed {
                        "; the socket closed"
                    } else {
                        ""
                    }
                ),
            }
        }
    }

    /// The first frame of one of `types` matching `pred` within `within` (others stay queued).
    async fn first_within(
        &mut self,
        types: &[&str],
        pred: impl Fn(&Value) -> bool,
        within: Duration,
    ) -> Option<Value> {
        let matches = |v: &Value| {
            v.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| types.contains(&t))
                && pred(v)
        };
        if let Some(pos) = self.pending.iter().position(matches) {
            return self.pending.remove(pos);
        }
        let deadline = tokio::time::sleep(within);
        tokio::pin!(deadline);
        loop {
            let v = tokio::select! {
                biased;
                () = &mut deadline => return None,
                v = self.read(within) => v,
            };
            match v {
                Some(v) if matches(&v) => return Some(v),
                Some(v) => self.pending.push_back(v),
                None if self.closed => return None,
                None => {}
            }
        }
    }

    /// Sends `frame`, which the relay must refuse (the caller then checks it was not acted
    /// on), and judges the refusal's wording at once ([`Ws::refuses`], then
    /// [`Refusal::in_our_words`]). Returns the error frame if one came.
    pub async fn expect_error_for(
        &mut self,
        frame: &Value,
        ours: Option<&str>,
    ) -> Result<Option<Value>, Failure> {
        let refusal = self.refuses(frame).await?;
        refusal.in_our_words(ours)?;
        Ok(refusal.frame)
    }

    /// Sends `frame`, which the relay must refuse, and judges what the relay did: a frame
    /// with an `id` must never be acked. PROTOCOL.md defines no error frame ("how a WS-level
    /// 429 is signalled is not determinable"), so an `error` frame of any shape, or silence,
    /// is a refusal: within the quiet period under the documents profile, within the wait
    /// under the reference profile (where our relay's error frame is looked for). The wording
    /// is judged apart ([`Refusal::in_our_words`]), once the case has checked that the frame
    /// had no effect, so a refusal in other words is never reported as the frame's effect.
    pub async fn refuses(&mut self, frame: &Value) -> Result<Refusal, Failure> {
        let id = frame.get("id").and_then(Value::as_str).map(str::to_owned);
        self.send(frame).await?;
        let about = |v: &Value| match (&id, v.get("id").and_then(Value::as_str)) {
            (Some(want), Some(got)) => want == got,
            _ => true,
        };
        let within = match self.profile {
            Profile::Documents => self.quiet,
            Profile::Reference => self.wait,
        };
        let answer = self.first_within(&["error", "ack"], about, within).await;
        if let Some(e) = &answer {
            ensure!(
                e["type"] == "error",
                "{}: the relay acked a frame it must refuse: {e}",
                self.channel
            );
        }
        Ok(Refusal {
            channel: self.channel.clone(),
            frame: answer,
            profile: self.profile,
            within,
        })
    }

    /// Whether the run holds the relay to our relay's own choices too.
    pub fn reference(&self) -> bool {
        self.profile == Profile::Reference
    }
}

/// A frame the relay refused ([`Ws::refuses`]: not acked), with the `error` frame if one came.
#[derive(Debug)]
#[must_use = "under the reference profile the refusal's wording is judged too"]
pub struct Refusal {
    channel: String,
    frame: Option<Value>,
    profile: Profile,
    within: Duration,
}

impl Refusal {
    /// The `error` frame the relay answered with, if any.
    pub fn frame(&self) -> Option<&Value> {
        self.frame.as_ref()
    }

    /// The refusal's wording: anything (or nothing) under the documents profile, which give
    /// no error frame; our relay's `{error, message}` frame under the reference profile, with
    /// code `ours` when given. A failure says the frame was refused and only the words differ.
    pub fn in_our_words(&self, ours: Option<&str>) -> CaseResult {
        if self.profile == Profile::Documents {
            return Ok(());
        }
        let Some(e) = &self.frame else {
            fail!(
                "{}: refused (not acked), but no `error` frame within {} ms (reference \
                 profile: our relay answers a refused frame with one)",
                self.channel,
                self.within.as_millis()
            );
        };
        check_error_body(e, self.profile).map_err(|r| {
            Failure::Fail(format!(
                "{}: refused (an error frame, no ack), but the frame is not our relay's \
                 (reference profile): {r}",
                self.channel
            ))
        })?;
        if let Some(code) = ours {
            ensure!(
                e.get("error").and_then(Value::as_str) == Some(code),
                "{}: refused (an error frame, no ack), but not with our relay's code {code} \
                 (reference profile): {e}",
                self.channel
            );
        }
        Ok(())
    }
}
