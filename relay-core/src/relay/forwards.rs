//! Requests that another shard decides: the dispatcher's side of `Crossing::Forward` and
//! `Crossing::Answered`.
//!
//! A request is decided by the shard its route names ([`Home`]): any shard, the caller's, the
//! shard of the account its body names, or the registry shard. One that reaches another shard
//! is forwarded whole; a friendship's change goes on from the caller's shard to the pair's
//! owner (`crate::contacts`). The caller's identity travels only from the caller's own shard,
//! whose check of the token's session is the one that counts (another shard's copy of the
//! account may be stale): a request for the registry that reaches a shard other than its
//! caller's goes to the caller's shard first. The shard that forwarded a request waits for its
//! answer ([`Awaiting`](crate::handoff::Awaiting)) and passes it on, to the shell or to the shard it came from; one that
//! does not come in [`FORWARD_TIMEOUT_MS`](crate::handoff::FORWARD_TIMEOUT_MS) is a 503.

use wire::{ErrorCode, UnixMs, UserUuid};

use super::Relay;
use crate::handoff::{
    Answered, Crossing, Forward, Forwarded, REGISTRY_SHARD, ReplyTo, ShardId, ShardMap,
};
use crate::http::{ApiError, Home, HttpRequest, HttpResponse, Route};
use crate::shell::{Output, RequestId};

/// The body of a request that names an account (sign-in).
#[derive(serde::Deserialize)]
struct NamesAccount {
    user_uuid: UserUuid,
}

impl Relay {
    /// The shard that decides `route` when it is another, for `req` as this shard sees it:
    /// `trusted` says the caller in `self.verified` was verified by the caller's own shard
    /// (it came with the request from there).
    pub(super) fn home_elsewhere(
        &self,
        route: &Route,
        req: &HttpRequest,
        trusted: bool,
    ) -> Option<ShardId> {
        let place = self.config.shard;
        if place.map().shards() == 1 {
            return None;
        }
        let caller = self.verified.as_ref().map(|(user, _)| user);
        let callers = caller.and_then(|user| place.elsewhere(user));
        match route.home() {
            Home::Any => None,
            Home::Caller => callers,
            Home::Named => {
                let named: NamesAccount = serde_json::from_slice(&req.body).ok()?;
                place.elsewhere(&named.user_uuid)
            }
            Home::Registry => match callers {
                Some(shard) if !trusted => Some(shard),
                _ => (place.me() != REGISTRY_SHARD).then_some(REGISTRY_SHARD),
            },
        }
    }

    /// Forwards the request being handled to shard `to` (its caller, when this is the
    /// caller's shard, goes with it); the response this returns is withheld
    /// ([`Relay::forwarded`]). A request that cannot wait for an answer is a 503.
    pub(super) fn forward_request(
        &mut self,
        to: ShardId,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let Some(id) = self.request else {
            return Err(cannot_wait());
        };
        let place = self.config.shard;
        let caller = (self.verified.clone()).filter(|(user, _)| place.elsewhere(user).is_none());
        self.stats.requests_forwarded += 1;
        self.staged.push(Output::Cross(Crossing::Forward(Forward {
            from: place.me(),
            to,
            id,
            op: Forwarded::Request {
                caller,
                req: req.clone(),
            },
        })));
        Ok(HttpResponse::json(202, &wire::http::OkResponse::OK))
    }

    /// Whether the request just handled was forwarded (a rule or the dispatcher staged its
    /// `Crossing::Forward`): its number, where its answer goes, and when, for
    /// [`Relay::end_http`].
    pub(super) fn forwarded(
        &mut self,
        now: UnixMs,
        reply: ReplyTo,
    ) -> Option<(u64, ReplyTo, UnixMs)> {
        let id = self.request.take()?;
        self.staged
            .iter()
            .any(|o| matches!(o, Output::Cross(Crossing::Forward(f)) if f.id == id))
            .then_some((id, reply, now))
    }

    /// A whole request forwarded by shard `from` as its number `id`: decided here (or sent on
    /// to the shard that decides it), and answered to `from` after this input's commit.
    /// Charged where it arrived; `caller` is its caller as the caller's shard verified it.
    pub(super) fn on_forwarded_request(
        &mut self,
        now: UnixMs,
        (from, id): (ShardId, u64),
        caller: Option<(UserUuid, String)>,
        req: &HttpRequest,
    ) {
        self.request = self.forwards.next_id();
        let trusted = caller.is_some();
        let result = match crate::http::route(req.method, &req.path) {
            Ok(route) => {
                self.verified = caller;
                if !trusted && route.home() != Home::Any {
                    // Verified here, for routing (and by the handler, which reuses it).
                    self.verified = self.cx().authenticate(now, req).ok();
                }
                let result = match self.home_elsewhere(&route, req, trusted) {
                    Some(to) => self.forward_request(to, req),
                    None => self.route_http(now, route, req),
                };
                self.verified = None;
                result
            }
            Err(e) => Err(e),
        };
        let reply = ReplyTo::Shard { to: from, id };
        let forwarded = self.forwarded(now, reply);
        if forwarded.is_none() {
            let response = result.unwrap_or_else(ApiError::into_response);
            self.answer(reply, response);
        }
        if self.finish().is_ok()
            && let Some((fid, reply, at)) = forwarded
        {
            self.forwards.start(fid, reply, at);
        }
    }

    /// The answer to a request this shard forwarded: the friendship it carries goes into its
    /// member's list here first (when that member is this shard's), then the response goes
    /// where the request came from, unless it timed out (then it was answered 503).
    pub(super) fn on_answered(&mut self, a: Answered) {
        if let Some((user, row)) = a.contact
            && self.config.shard.elsewhere(&user).is_none()
        {
            self.cx().take_contact(&user, &row.into(), None);
        }
        if let Some(reply) = self.forwards.answered(a.id) {
            self.answer(reply, a.response);
        }
    }

    /// Stages `response` for `reply`: to the shell, or back to the shard the request came from.
    pub(super) fn answer(&mut self, reply: ReplyTo, response: HttpResponse) {
        let out = match reply {
            ReplyTo::Http(id) => Output::Http {
                id: RequestId(id),
                response,
            },
            ReplyTo::Shard { to, id } => Output::Cross(Crossing::Answered(Answered {
                from: self.config.shard.me(),
                to,
                id,
                response,
                contact: None,
            })),
        };
        self.staged.push(out);
    }

    /// Answers 503 every forwarded request whose answer did not come by `now`.
    pub(super) fn expire_forwards(&mut self, now: UnixMs) {
        for reply in self.forwards.expired(now) {
            self.stats.forwards_timed_out += 1;
            let response = HttpResponse::error(
                503,
                &ErrorCode::STORAGE_UNAVAILABLE,
                "the shard that decides this request did not answer in time; try again",
            );
            self.answer(reply, response);
        }
    }
}

/// The shard whose core a shell hands `req` to, so that it is seldom forwarded: its caller's
/// (the subject its bearer token claims, unchecked: the core checks it), the account its
/// body names (sign-in), else the registry shard. Any core decides correctly whatever it is
/// given (it forwards); this only saves the hop.
pub fn shard_for_request(map: ShardMap, req: &HttpRequest) -> ShardId {
    if map.shards() == 1 {
        return ShardId(0);
    }
    let bearer = req.authorization.as_deref().and_then(|h| {
        let (scheme, token) = h.trim().split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then_some(token.trim())
    });
    if let Some(user) = bearer.and_then(crate::token::claimed_subject) {
        return map.of_user(&user);
    }
    if let Ok(named) = serde_json::from_slice::<NamesAccount>(&req.body) {
        return map.of_user(&named.user_uuid);
    }
    REGISTRY_SHARD
}

/// The shard whose core a shell hands a WebSocket upgrade to: the one of the account its
/// query names (`user_uuid`); `None` when it names none (any core refuses it).
pub fn shard_for_upgrade(map: ShardMap, query: &str) -> Option<ShardId> {
    let user = crate::http::query_param(query, "user_uuid")?;
    Some(map.of_user(&UserUuid::parse(user).ok()?))
}

/// The refusal of a request another shard decides when it cannot wait for the answer (a
/// shell that does not number its requests, or too many waiting).
pub(crate) fn cannot_wait() -> ApiError {
    ApiError::new(
        ErrorCode::STORAGE_UNAVAILABLE,
        "another shard decides this request and it cannot wait for it now; try again",
    )
}
