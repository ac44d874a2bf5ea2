//! What each client's connections carried (a [`WireTap`] per app, in the simulator and in
//! Jepsen mode): every HTTP exchange and WebSocket upgrade by route with its status, every
//! refusal with the first body that came with it, and the frames the oracles of
//! [`crate::oracles::wire`] read (`msg`, `ack`, receipts, `error`), as the socket received
//! them, before the client's own deduplication. A leaf: it imports nothing of the crate.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde_json::Value;

use client::WireTap;
use wire::http::paths;

/// How much of a refusal's body the report keeps.
const BODY_SHOWN: usize = 240;

/// A `msg` frame a client received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireMsg {
    /// The recipient (client index).
    pub client: usize,
    /// Message id.
    pub id: String,
    /// Conversation.
    pub conv: String,
    /// Its seq, if it carried one.
    pub seq: Option<u64>,
    /// When, in the order the run's sockets received the frames it taps (all clients').
    pub at: u64,
}

/// A receipt (`delivered` or `read`) a sender's socket received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireReceipt {
    /// The client that received it (the messages' sender).
    pub client: usize,
    /// `delivered` or `read`.
    pub kind: String,
    /// Conversation.
    pub conv: String,
    /// The seq it covers ("up to").
    pub seq: u64,
    /// When, in the same order as [`WireMsg::at`].
    pub at: u64,
}

/// An `ack` frame a sender received, with the conversation of the message it acks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireAck {
    /// The sender (client index).
    pub client: usize,
    /// Message id.
    pub id: String,
    /// The conversation the sender sent it in.
    pub conv: String,
    /// The seq the relay gave it.
    pub seq: u64,
}

/// What the sockets received.
#[derive(Debug, Default, Clone)]
pub struct WireSeen {
    /// Every `msg` frame, in the order each client received them.
    pub msgs: Vec<WireMsg>,
    /// Every `ack` frame whose message's conversation is known.
    pub acks: Vec<WireAck>,
    /// Every receipt with a conversation and a seq, in the order the sockets received them.
    pub receipts: Vec<WireReceipt>,
    /// Every read mark an app made (`client`: the reader; `kind`: `read`), noted just before
    /// the app sent it, in the same order as the frames ([`WireLog::marked_read`]).
    pub marks: Vec<WireReceipt>,
    /// Every `retract` frame a socket received: (the client, the message id it names).
    pub retracts: Vec<(usize, String)>,
}

/// Every route the clients use, as PROTOCOL.md writes it.
const ROUTES: &[&str] = &[
    paths::POW_CHALLENGE,
    paths::REGISTER,
    paths::AUTH_CHALLENGE,
    paths::AUTH_VERIFY,
    paths::WS_TICKET,
    paths::FRIENDS,
    paths::FRIEND_REQUEST,
    paths::FRIEND_ACCEPT,
    paths::FRIEND_ACCEPT_BODY,
    paths::FRIEND_REJECT,
    paths::USER,
    paths::ACTIVE_CONVERSATIONS,
    paths::STORAGE_ESTIMATE,
    paths::CHANNEL_SEARCH,
    paths::CHANNELS_MINE,
    paths::CHANNEL_QUOTA_BUY,
    paths::CHANNELS,
    paths::CHANNEL,
    paths::CHANNEL_SUBSCRIBE,
    paths::CHANNEL_POSTS,
    paths::CHANNEL_BUY,
    paths::LIST_CHANNEL,
    paths::VANITY_SEARCH,
    paths::VANITY_PURCHASE,
    paths::VANITY_BIND,
    paths::VANITY_RESERVE,
    paths::ORDER_STATUS,
    paths::MEDIA_INIT,
    paths::MEDIA_CHUNK,
    paths::MEDIA_COMPLETE,
    paths::MEDIA_DOWNLOAD,
    paths::PUSH_VAPID_KEY,
    paths::PUSH_SUBSCRIBE,
    paths::PUSH_REGISTER,
    paths::PUSH_DISABLE,
    paths::ICE_CONFIG,
];

/// `PUT /api/v1/friends/{friendship_id}/accept` for `PUT /api/v1/friends/17/accept?x=1`.
pub fn route(method: &str, path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    let segments: Vec<&str> = path.split('/').collect();
    let template = ROUTES.iter().find(|t| {
        let ts: Vec<&str> = t.split('/').collect();
        ts.len() == segments.len()
            && ts
                .iter()
                .zip(&segments)
                .all(|(t, s)| t == s || (t.starts_with('{') && !s.is_empty()))
    });
    format!("{method} {}", template.copied().unwrap_or(path))
}

/// Requests and refusals of one route.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RouteCount {
    /// Exchanges (HTTP) or upgrades (WebSocket).
    pub requests: u64,
    /// Answers by status that were not 2xx (`0`: no answer; `ws` upgrades: `error`).
    pub refused: BTreeMap<String, u64>,
    /// The first refusal's body (shortened), by status.
    pub first_body: BTreeMap<String, String>,
}

/// Everything the taps of a run saw.
#[derive(Debug, Default)]
struct Log {
    routes: BTreeMap<String, RouteCount>,
    frames: BTreeMap<String, u64>,
    error_frames: BTreeMap<String, (u64, String)>,
    msgs: Vec<WireMsg>,
    acks: Vec<(usize, String, u64)>,
    receipts: u64,
    receipt_frames: Vec<WireReceipt>,
    marks: Vec<WireReceipt>,
    retracts: Vec<(usize, String)>,
    /// Tapped frames so far (the next one's `at`).
    tapped: u64,
}

/// The taps of a run's clients, sharing one log.
#[derive(Debug, Clone, Default)]
pub struct WireLog(Arc<Mutex<Log>>);

/// One client's tap.
#[derive(Debug)]
struct Tap {
    client: usize,
    log: WireLog,
}

impl WireLog {
    /// The tap of client `client`.
    pub fn tap(&self, client: usize) -> Arc<dyn WireTap> {
        Arc::new(Tap {
            client,
            log: self.clone(),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut Log) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Requests and refusals by route, HTTP and WebSocket (`error` frames by code).
    pub fn routes(&self) -> BTreeMap<String, RouteCount> {
        self.with(|l| {
            let mut out = l.routes.clone();
            for (code, (n, body)) in &l.error_frames {
                let r = out.entry("WS error frame".to_owned()).or_default();
                r.refused.insert(code.clone(), *n);
                r.first_body.insert(code.clone(), body.clone());
            }
            out
        })
    }

    /// Frames received, by type.
    pub fn frames(&self) -> BTreeMap<String, u64> {
        self.with(|l| l.frames.clone())
    }

    /// Receipts (`delivered`, `read`) the senders' sockets received.
    pub fn receipts(&self) -> u64 {
        self.with(|l| l.receipts)
    }

    /// Notes that app `client` marked `conv` read up to `seq` (call it before the app sends the
    /// receipt, so that every `read` the relay forwards comes after the mark it stems from).
    pub fn marked_read(&self, client: usize, conv: &str, seq: u64) {
        self.with(|l| {
            let at = l.tapped;
            l.tapped += 1;
            l.marks.push(WireReceipt {
                client,
                kind: "read".to_owned(),
                conv: conv.to_owned(),
                seq,
                at,
            });
        });
    }

    /// What the oracles read: the acks are placed in the conversation their message was sent
    /// in (`conv_of`: message id → conversation).
    pub fn seen(&self, conv_of: &BTreeMap<String, String>) -> WireSeen {
        self.with(|l| WireSeen {
            msgs: l.msgs.clone(),
            receipts: l.receipt_frames.clone(),
            marks: l.marks.clone(),
            retracts: l.retracts.clone(),
            acks: l
                .acks
                .iter()
                .filter_map(|(client, id, seq)| {
                    conv_of.get(id).map(|conv| WireAck {
                        client: *client,
                        id: id.clone(),
                        conv: conv.clone(),
                        seq: *seq,
                    })
                })
                .collect(),
        })
    }

    /// One line per route with refusals: `PUT /api/v1/friends/{friendship_id}/accept: 40 of 40 refused (405 ×40: {…})`.
    pub fn refusal_lines(&self) -> Vec<String> {
        self.routes()
            .iter()
            .filter(|(_, r)| !r.refused.is_empty())
            .map(|(route, r)| {
                let total: u64 = r.refused.values().sum();
                let by: Vec<String> = r
                    .refused
                    .iter()
                    .map(|(status, n)| {
                        let body = r.first_body.get(status).map_or("", String::as_str);
                        format!("{status} ×{n}: {body}")
                    })
                    .collect();
                if route == "WS error frame" {
                    format!("{route}: {total} ({})", by.join("; "))
                } else {
                    format!(
                        "{route}: {total} of {} refused ({})",
                        r.requests,
                        by.join("; ")
                    )
                }
            })
            .collect()
    }
}

fn shown(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut out: String = text.chars().take(BODY_SHOWN).collect();
    if text.chars().count() > BODY_SHOWN {
        out.push('…');
    }
    out
}

impl WireTap for Tap {
    fn http(&self, method: &http::Method, path: &str, status: u16, body: &[u8]) {
        let route = route(method.as_str(), path);
        self.log.with(|l| {
            let r = l.routes.entry(route).or_default();
            r.requests += 1;
            if !(200..300).contains(&status) {
                let key = if status == 0 {
                    "no answer".to_owned()
                } else {
                    status.to_string()
                };
                *r.refused.entry(key.clone()).or_default() += 1;
                r.first_body.entry(key).or_insert_with(|| shown(body));
            }
        });
    }

    fn upgrade_failed(&self, why: &str) {
        self.log.with(|l| {
            let r = l.routes.entry("GET /ws (upgrade)".to_owned()).or_default();
            r.requests += 1;
            *r.refused.entry("refused".to_owned()).or_default() += 1;
            r.first_body
                .entry("refused".to_owned())
                .or_insert_with(|| shown(why.as_bytes()));
        });
    }

    fn frame_in(&self, text: &str) {
        let Ok(v) = serde_json::from_str::<Value>(text) else {
            self.log
                .with(|l| *l.frames.entry("<not JSON>".to_owned()).or_default() += 1);
            return;
        };
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("<no type>");
        let id = v.get("id").and_then(Value::as_str);
        let seq = v.get("seq").and_then(Value::as_u64);
        let conv = v.get("conv_id").and_then(Value::as_str).unwrap_or_default();
        self.log.with(|l| {
            *l.frames.entry(kind.to_owned()).or_default() += 1;
            let at = l.tapped;
            l.tapped += 1;
            match (kind, id, seq) {
                ("msg", Some(id), seq) => l.msgs.push(WireMsg {
                    client: self.client,
                    id: id.to_owned(),
                    conv: conv.to_owned(),
                    seq,
                    at,
                }),
                ("ack", Some(id), Some(seq)) => l.acks.push((self.client, id.to_owned(), seq)),
                ("retract", Some(id), _) => l.retracts.push((self.client, id.to_owned())),
                ("delivered" | "read", _, seq) => {
                    l.receipts += 1;
                    if let Some(seq) = seq.filter(|_| !conv.is_empty()) {
                        l.receipt_frames.push(WireReceipt {
                            client: self.client,
                            kind: kind.to_owned(),
                            conv: conv.to_owned(),
                            seq,
                            at,
                        });
                    }
                }
                ("error", _, _) => {
                    let code = error_code(&v);
                    let e = l
                        .error_frames
                        .entry(code)
                        .or_insert((0, shown(text.as_bytes())));
                    e.0 += 1;
                }
                _ => {}
            }
        });
    }
}

/// The code of an error frame (in `error` or `code`), else `<no code>`.
fn error_code(v: &Value) -> String {
    ["error", "code"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .unwrap_or("<no code>")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::route;

    #[test]
    fn paths_become_their_routes() {
        assert_eq!(
            route("PUT", "/api/v1/friends/17/accept"),
            "PUT /api/v1/friends/{friendship_id}/accept"
        );
        assert_eq!(
            route("GET", "/api/v1/vanity/search?q=8"),
            "GET /api/v1/vanity/search"
        );
        assert_eq!(
            route("POST", "/api/v1/channels/quota/buy"),
            "POST /api/v1/channels/quota/buy"
        );
        assert_eq!(route("GET", "/nope"), "GET /nope");
    }
}
