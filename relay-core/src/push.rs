//! Push (P1-P4) and the push output.
//!
//! * **P1** `GET /api/v1/push/vapid-key` (JWT): `{"vapid_public_key"}` from
//!   [`Config::vapid_public_key`](crate::Config::vapid_public_key); when none is configured
//!   the documented placeholder [`VAPID_KEY_PLACEHOLDER`] is returned (not a valid P-256 key,
//!   so a browser's `pushManager.subscribe` fails cleanly instead of subscribing under a key
//!   no shell can sign for). The real server's configuration provides the key.
//! * **P2** `subscribe` (JWT): a Web Push subscription; `endpoint` (≤ `MAX_PUSH_ENDPOINT_BYTES`)
//!   must pass [`Config::push_destinations`](crate::Config) ([`crate::destination`]: `https://`
//!   to a public address; a host name only with the shell's resolution of it, every address
//!   public; 400 `PUSH_ENDPOINT_FORBIDDEN` / `PUSH_ENDPOINT_UNRESOLVABLE` otherwise),
//!   `keys.p256dh` base64url of 65 bytes, `keys.auth` base64url of 16 bytes. Deduplicated by
//!   endpoint (a repeat replaces the keys).
//! * **P3** `register` (JWT): a native token; `device_token` is an APNs token, `token` is an
//!   FCM token (or APNs when `platform` is `ios`); 400 `INVALID_FIELD` when neither is present.
//!   Deduplicated by token (clients retry at 0 s / 5 s / 30 s / 300 s).
//! * **P4** `disable` (JWT, any body): forgets every target of the account; idempotent.
//!
//! Each account keeps at most `MAX_PUSH_TARGETS_PER_USER` targets (a new one evicts the
//! oldest), durable in [`Table::PushTargets`](crate::store::Table::PushTargets), committed before the 200.
//!
//! **Push output**: when a `msg` is stored for a recipient with no live connection and at
//! least one target, the relay emits one [`Output::Push`] per target with the payload
//! `{"type":"new_msg"}` (nothing else: no sender, no conversation), at most once per
//! `PUSH_MIN_INTERVAL_MS` (30 s) per recipient, so a burst of messages makes one push. The
//! interval is in memory (a restart may push once more).
//!
//! **Gone targets**: [`Relay::handle_push_gone`](crate::Relay::handle_push_gone) deletes a target the push service reported
//! as gone (the shell's push worker reports it), durably and idempotently. Secrets of targets (endpoint URLs,
//! keys, tokens) are never logged: [`PushTarget`]'s `Debug` redacts them.

use base64::Engine as _;
use wire::http::{
    OkResponse, PushPayload, PushRegisterRequest, PushSubscribeRequest, VapidKeyResponse,
    decode_body,
};
use wire::{ErrorCode, UnixMs, UserUuid};

use crate::cx::Cx;
use crate::http::{ApiError, HttpRequest, HttpResponse};
use crate::limits::{
    MAX_PUSH_ENDPOINT_BYTES, MAX_PUSH_TARGETS_PER_USER, MAX_PUSH_TOKEN_BYTES, PUSH_MIN_INTERVAL_MS,
};
pub use crate::push_targets::PushTarget;
use crate::shell::Output;

/// Returned by P1 when no VAPID key is configured (see the module doc).
pub const VAPID_KEY_PLACEHOLDER: &str = "vapid-key-not-configured";

fn invalid(msg: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::INVALID_FIELD, msg)
}

/// Decodes base64url with or without padding (browsers differ).
fn b64url_len(value: &str) -> Option<usize> {
    let v = value.trim_end_matches('=');
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(v)
        .ok()
        .map(|b| b.len())
}

/// P2's endpoint check (see [`crate::destination`]): length, printable ASCII, then the
/// policy; a host given by name needs the shell's resolution of that very name when the policy
/// checks addresses, and every address it resolved to must pass.
fn check_endpoint(
    endpoint: &str,
    policy: &crate::destination::PushDestinations,
    resolved: Option<&crate::http::Resolution>,
) -> Result<(), ApiError> {
    use crate::destination::{DestinationError, Host};
    if endpoint.len() > MAX_PUSH_ENDPOINT_BYTES {
        return Err(invalid(format!(
            "endpoint is {} bytes, the limit is {MAX_PUSH_ENDPOINT_BYTES}",
            endpoint.len()
        )));
    }
    let clean = endpoint
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
    if !clean {
        return Err(invalid("endpoint must be an https:// URL with a host"));
    }
    let refuse = |e: DestinationError| ApiError::new(e.code(), e.to_string());
    let dest = policy.check_url(endpoint).map_err(refuse)?;
    if let Host::Name(name) = &dest.host
        && policy.requires_resolution()
    {
        let addrs = resolved
            .filter(|r| r.host.trim_end_matches('.').eq_ignore_ascii_case(name))
            .map(|r| r.addrs.as_slice())
            .ok_or_else(|| refuse(DestinationError::Unresolvable))?;
        policy.check_resolved(addrs).map_err(refuse)?;
    }
    Ok(())
}

fn check_token(field: &str, token: &str) -> Result<String, ApiError> {
    let t = token.trim();
    if t.is_empty() || t.len() > MAX_PUSH_TOKEN_BYTES || !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(format!(
            "{field} must be 1..={MAX_PUSH_TOKEN_BYTES} printable ASCII characters"
        )));
    }
    Ok(t.to_owned())
}

impl Cx<'_> {
    /// P1.
    pub(crate) fn http_push_vapid_key(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        self.authenticate(now, req)?;
        let key = self
            .config
            .vapid_public_key
            .clone()
            .unwrap_or_else(|| VAPID_KEY_PLACEHOLDER.to_owned());
        Ok(HttpResponse::json(
            200,
            &VapidKeyResponse {
                vapid_public_key: key,
            },
        ))
    }

    /// P2.
    pub(crate) fn http_push_subscribe(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let body: PushSubscribeRequest = decode_body(&req.body)?;
        check_endpoint(
            &body.endpoint,
            &self.config.push_destinations,
            req.resolved.as_ref(),
        )?;
        if b64url_len(&body.keys.p256dh) != Some(65) {
            return Err(invalid(
                "keys.p256dh must be a base64url P-256 public key (65 bytes)",
            ));
        }
        if b64url_len(&body.keys.auth) != Some(16) {
            return Err(invalid("keys.auth must be a base64url 16-byte secret"));
        }
        self.add_push_target(
            &user,
            PushTarget::WebPush {
                endpoint: body.endpoint,
                p256dh: body.keys.p256dh,
                auth: body.keys.auth,
            },
        );
        Ok(HttpResponse::json(200, &OkResponse::OK))
    }

    /// P3.
    pub(crate) fn http_push_register(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let body: PushRegisterRequest = decode_body(&req.body)?;
        let ios = body.platform.eq_ignore_ascii_case("ios");
        let target = match (&body.device_token, &body.token) {
            (Some(t), _) => PushTarget::Apns {
                token: check_token("device_token", t)?,
            },
            (None, Some(t)) if ios => PushTarget::Apns {
                token: check_token("token", t)?,
            },
            (None, Some(t)) => PushTarget::Fcm {
                token: check_token("token", t)?,
            },
            (None, None) => {
                return Err(invalid(
                    "either `token` (FCM) or `device_token` (APNs) is required",
                ));
            }
        };
        self.add_push_target(&user, target);
        Ok(HttpResponse::json(200, &OkResponse::OK))
    }

    /// P4.
    pub(crate) fn http_push_disable(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        probes::probe!("push:disabled");
        self.state.put_push_targets(&user, Vec::new());
        Ok(HttpResponse::json(200, &OkResponse::OK))
    }

    fn add_push_target(&mut self, user: &UserUuid, target: PushTarget) {
        let mut targets = self
            .state
            .push()
            .targets
            .get(user)
            .cloned()
            .unwrap_or_default();
        if targets.contains(&target) {
            probes::probe!("push:subscribe-repeated");
            return; // a retry: nothing to write
        }
        probes::probe!("push:subscribed");
        targets.retain(|t| !t.same_destination(&target));
        targets.push(target);
        if targets.len() > MAX_PUSH_TARGETS_PER_USER {
            let excess = targets.len() - MAX_PUSH_TARGETS_PER_USER;
            targets.drain(..excess);
        }
        self.state.put_push_targets(user, targets);
    }

    /// Called when a message was stored for `recipient`: pushes `{"type":"new_msg"}` to every
    /// target if the recipient has no live connection and was not pushed in the last
    /// `PUSH_MIN_INTERVAL_MS`. The outputs are staged, so they follow the message's commit.
    pub(crate) fn push_new_msg(&mut self, now: UnixMs, recipient: &UserUuid) {
        if self.online(recipient).is_some() {
            return;
        }
        let Some(targets) = self.state.push().targets.get(recipient).cloned() else {
            return;
        };
        if let Some(last) = self.state.push().last_push.get(recipient)
            && now < last.plus_ms(PUSH_MIN_INTERVAL_MS)
        {
            return;
        }
        self.state.last_push().insert(recipient.clone(), now);
        for target in targets {
            self.stage(Output::Push {
                user: recipient.clone(),
                target,
                payload: PushPayload::new_msg(),
            });
        }
    }

    /// The push service said `target` of `user` no longer exists: the target is deleted
    /// (recorded in the input's batch). An unknown account or a target already gone (deleted,
    /// replaced by a newer subscription with other keys, or evicted) changes nothing; matching
    /// is exact, so a report about old keys never deletes a re-subscription to the endpoint.
    pub(crate) fn forget_push_target(&mut self, user: &UserUuid, target: &PushTarget) {
        if let Some(targets) = self.state.push().targets.get(user)
            && targets.contains(target)
        {
            let kept: Vec<PushTarget> = targets.iter().filter(|t| *t != target).cloned().collect();
            self.state.put_push_targets(user, kept);
        }
    }

    /// Forgets push intervals that ended (memory bound).
    pub(crate) fn sweep_push(&mut self, now: UnixMs) {
        self.state
            .last_push()
            .retain(|_, at| now < at.plus_ms(PUSH_MIN_INTERVAL_MS));
    }
}
