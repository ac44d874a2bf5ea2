//! Calls: K1 `calls/ice-config` and the routing of `call_*` signals.
//!
//! **K1** `GET /api/v1/calls/ice-config[?mode=relay]` (JWT). TURN credentials follow the coturn
//! REST convention (`use-auth-secret`): `username = "<expiry unix seconds>:<alias>"`,
//! `credential = base64(HMAC-SHA1(turn secret, username))`, expiry = now + `turn_ttl_s`;
//! `ttl` in the response is `turn_ttl_s`.
//! * no mode (or `mode=all`): the STUN servers (if any) plus the TURN server (if configured),
//!   `ice_transport_policy: "all"`;
//! * `mode=relay`: the TURN server only, policy `"relay"`; with no TURN configured the answer
//!   is 503 `TURN_UNAVAILABLE`: an empty server list
//!   would look like success and the caller asked precisely not to expose its address;
//! * any other mode: 400 `INVALID_FIELD`.
//!
//! **Signals** (`call_offer`, `call_answer`, `call_ice`, `call_reject`, `call_hangup`,
//! `call_invite`): routed to the live connection of `to` only when `to` is an accepted contact
//! of the sender (else error frame `NOT_A_CONTACT`), with `from` overwritten by the sender's
//! alias and `call_id`, `crypto_v`, `payload` kept. Never stored: a callee with no live
//! connection makes an error frame `PEER_OFFLINE` back to the caller. Error frames carry
//! `ref_type` (the signal type) and `id` = the `call_id`. At most
//! `MAX_CALL_FRAMES_PER_MIN_PER_CONN` signals per connection per minute (ICE bursts are
//! legitimate), excess: error frame `RATE_LIMITED`, signal dropped.

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac as _};
use sha1::Sha1;
use wire::frames::CallSignal;
use wire::http::{IceConfig, IcePolicy, IceServer};
use wire::{ErrorCode, ServerFrame, UnixMs};

use crate::cx::Cx;
use crate::http::{ApiError, HttpRequest, HttpResponse, query_param};
use crate::planted::planted;
use crate::shell::ConnId;

/// `TURN_UNAVAILABLE` (503).
fn turn_unavailable() -> ApiError {
    ApiError::with_status(
        503,
        ErrorCode::TURN_UNAVAILABLE,
        "no TURN relay is configured on this server; mode=relay cannot be served",
    )
}

/// The coturn REST credential for `username`: base64(HMAC-SHA1(secret, username)).
pub fn turn_credential(secret: &str, username: &str) -> String {
    // HMAC accepts keys of any length; the error arm is unreachable but handled.
    match <Hmac<Sha1> as KeyInit>::new_from_slice(secret.as_bytes()) {
        Ok(mut mac) => {
            mac.update(username.as_bytes());
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
        }
        Err(_) => String::new(),
    }
}

impl Cx<'_> {
    /// K1.
    pub(crate) fn http_ice_config(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let relay_only = match query_param(&req.query, "mode") {
            None | Some("" | "all") => false,
            Some("relay") => true,
            Some(_) => {
                return Err(ApiError::new(
                    ErrorCode::INVALID_FIELD,
                    "mode must be `relay` or absent",
                ));
            }
        };
        let ttl = self.config.turn_ttl_s;
        let alias = self.alias_of(&user)?;
        let turn = match (&self.config.turn_secret, self.config.turn_urls.is_empty()) {
            (Some(secret), false) => {
                let alias = alias.map(|a| a.to_string()).unwrap_or_default();
                let expiry = (now.get() / 1000).saturating_add(ttl);
                let username = format!("{expiry}:{alias}");
                let credential = turn_credential(&secret.0, &username);
                Some(IceServer {
                    urls: self.config.turn_urls.clone(),
                    username: Some(username),
                    credential: Some(credential),
                })
            }
            _ => None,
        };
        let (policy, servers) = if relay_only {
            let turn = turn.ok_or_else(turn_unavailable)?;
            (IcePolicy::Relay, vec![turn])
        } else {
            let stun = (!self.config.stun_urls.is_empty()).then(|| IceServer {
                urls: self.config.stun_urls.clone(),
                username: None,
                credential: None,
            });
            (IcePolicy::All, stun.into_iter().chain(turn).collect())
        };
        Ok(HttpResponse::json(
            200,
            &IceConfig {
                ttl,
                ice_transport_policy: policy,
                ice_servers: servers,
            },
        ))
    }

    /// A `call_*` frame from `conn`.
    pub(crate) fn on_call(&mut self, now: UnixMs, conn: ConnId, c: CallSignal) {
        let Some(user) = self.conn_user(conn) else {
            return;
        };
        let ref_type = Some(c.kind.as_str().to_owned());
        let id = Some(c.call_id.to_string());
        // Charged once the signal's reads are done (a frame waiting for a read ahead is run
        // again: nothing may change before its reads).
        if !self.throttles().call_signal_allowed(now, conn) {
            return self.send_error(
                conn,
                ErrorCode::RATE_LIMITED,
                "too many call signals on this connection",
                ref_type,
                id,
            );
        }
        let unreadable = |relay: &mut Self, ref_type, id| {
            relay.send_error(
                conn,
                ErrorCode::STORAGE_UNAVAILABLE,
                "the relay could not read the callee's account; send the signal again",
                ref_type,
                id,
            );
        };
        let Ok(callee) = self.account_by_alias(&c.to) else {
            return unreadable(self, ref_type, id);
        };
        let Ok(from) = self.alias_of(&user) else {
            return unreadable(self, ref_type, id);
        };
        let peer = callee.map(|a| a.uuid.clone()).filter(|peer| *peer != user);
        // PLANTED BUG (CallToAnyone): the contact check is skipped, so anyone rings anyone
        // whose alias they know.
        let peer = match peer {
            Some(peer) if !planted!(self.config, CallToAnyone) => {
                match self.are_contacts(&user, &peer) {
                    Ok(true) => Some(peer),
                    Ok(false) => None,
                    Err(_) => return unreadable(self, ref_type, id),
                }
            }
            peer => peer,
        };
        self.throttles_mut().charge_call_signal(now, conn);
        let Some(peer) = peer else {
            return self.send_error(
                conn,
                ErrorCode::NOT_A_CONTACT,
                "`to` is not an accepted contact of yours",
                ref_type,
                id,
            );
        };
        self.ring((conn, &user), &peer, c, from);
    }

    /// Sends call signal `c` of `caller` (its connection and user) to `peer`, stamped with
    /// the caller's alias `from`: on the callee's connection, or through its shard when that
    /// is another (whose core sends it on or answers `PEER_OFFLINE`). A callee without a
    /// connection here (or a caller without an alias) is answered `PEER_OFFLINE`.
    fn ring(
        &mut self,
        (conn, caller): (ConnId, &wire::UserUuid),
        peer: &wire::UserUuid,
        mut c: CallSignal,
        from: Option<wire::AliasId>,
    ) {
        let offline = "the callee is not connected; call signals are never stored";
        let (ref_type, id) = (c.kind.as_str().to_owned(), c.call_id.to_string());
        let away = self.config.shard.elsewhere(peer);
        let peer_conn = self.online(peer);
        let Some(from) = from.filter(|_| away.is_some() || peer_conn.is_some()) else {
            return self.send_error(
                conn,
                ErrorCode::PEER_OFFLINE,
                offline,
                Some(ref_type),
                Some(id),
            );
        };
        // PLANTED BUG (CallFromNotStamped): a `from` the caller claimed is passed on.
        if c.from.is_none() || !planted!(self.config, CallFromNotStamped) {
            c.from = Some(from);
        }
        let frame = ServerFrame::Call(c);
        match (away, peer_conn) {
            (Some(shard), _) => {
                let reply = crate::handoff::Reply::Error {
                    code: ErrorCode::PEER_OFFLINE,
                    words: offline.into(),
                    ref_type,
                    id: Some(id),
                };
                self.signal(shard, peer, frame, Some((conn, caller, reply)));
            }
            (None, Some(peer_conn)) => self.send(peer_conn, frame),
            (None, None) => {}
        }
    }
}
