//! Proof-of-work challenges, auth challenges, JWT login, bearer checks and WebSocket tickets.
//!
//! Auth challenges and tickets are self-contained ([`crate::credential`]): sealed with a key
//! derived from the JWT key, checked without any memory of their issue, and marked spent
//! durably in the commit of the answer that used them, so a restart neither invalidates an
//! unused one nor lets a used one in again. Proof-of-work challenges are kept in memory only
//! (bounded; oldest evicted first): registration names the nonce, not the challenge, so the
//! relay must remember what it issued; a restart invalidates them and clients simply ask for
//! new ones (every reference client does on failure). JWTs and their revocation
//! (`current_jti` on the account) are durable.

use ed25519_dalek::{Signature, VerifyingKey};
use wire::frames::goaway_reason;
use wire::http::{
    AuthChallengeRequest, AuthChallengeResponse, AuthVerifyRequest, AuthVerifyResponse,
    PowChallengeResponse, WsTicketResponse, bearer_subprotocol, decode_body,
};
use wire::{ErrorCode, IsoTime, UnixMs, UserUuid};

use crate::credential::{Kind, Opened, Refused};
use crate::cx::Cx;
use crate::http::{ApiError, HttpRequest, HttpResponse, query_param};
use crate::limits::{
    AUTH_CHALLENGE_TTL_MS, MAX_POW_CHALLENGES_PER_ADDR, MAX_TOKEN_BYTES, POW_CHALLENGE_TTL_MS,
    WS_TICKET_TTL_MS,
};
use crate::rows::AccountRow;
use crate::shell::{Accepted, Conn, ConnId, WsConnect};
use crate::token::TokenError;

fn token_error(e: TokenError) -> ApiError {
    ApiError::with_status(401, e.code(), e.to_string())
}

impl Cx<'_> {
    /// `credential` checked as one of `kind` presented for `bound` at `now`, and not used
    /// before (unless `reusable`: a planted bug); `None` when it is too long, forged, expired or
    /// used, each reason probed.
    fn open_unused(
        &self,
        kind: Kind,
        bound: &str,
        credential: &str,
        now: UnixMs,
        reusable: bool,
    ) -> Option<Opened> {
        if credential.len() > MAX_TOKEN_BYTES {
            return None;
        }
        let opened = match self.credentials.open(kind, bound, credential, now) {
            Ok(opened) => opened,
            Err(refused) => {
                match (kind, refused) {
                    (Kind::Challenge, Refused::Forged) => probes::probe!("challenge:forged"),
                    (Kind::Challenge, Refused::Expired) => probes::probe!("challenge:expired"),
                    (Kind::Ticket, Refused::Forged) => probes::probe!("ticket:forged"),
                    (Kind::Ticket, Refused::Expired) => probes::probe!("ticket:expired"),
                }
                return None;
            }
        };
        if !reusable && self.state.is_spent(&opened) {
            match kind {
                Kind::Challenge => probes::probe!("challenge:replayed"),
                Kind::Ticket => probes::probe!("ticket:replayed"),
            }
            return None;
        }
        Some(opened)
    }

    /// Marks the credential `opened` used, in the commit of the answer that uses it. When the
    /// relay already remembers
    /// [`Config::max_spent_credentials_per_account`](crate::config::Config::max_spent_credentials_per_account)
    /// unexpired ones of the same account it refuses (429) rather than forget one early, which
    /// would let that one in again; other accounts are not affected.
    fn spend(&mut self, opened: &Opened) -> Result<(), ApiError> {
        if self.state.spent_count_of(&opened.owner) >= self.config.max_spent_credentials_per_account
        {
            probes::probe!("credential:spent-full");
            return Err(ApiError::rate_limited(
                "too many logins and socket upgrades for this account in the last minutes; retry shortly",
                WS_TICKET_TTL_MS,
            ));
        }
        self.state.put_spent(opened);
        Ok(())
    }

    // ---------------------------------------------------------------- PoW (A1)

    pub(crate) fn http_pow_challenge(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let addr = req.remote_addr.clone();
        if !self.admission_mut().pow_rate.allow(now.get(), &addr) {
            return Err(ApiError::rate_limited(
                "too many proof-of-work challenges from this address",
                self.admission().pow_rate.retry_after_ms(now.get(), &addr),
            ));
        }
        let challenge = self.ids.challenge();
        self.admission_mut().pow.insert(
            challenge.clone(),
            addr.clone(),
            now.plus_ms(POW_CHALLENGE_TTL_MS),
        );
        let list = self.admission_mut().pow_by_addr.entry(addr).or_default();
        list.push(challenge.clone());
        if list.len() > MAX_POW_CHALLENGES_PER_ADDR {
            let oldest = list.remove(0);
            self.admission_mut().pow.remove(&oldest);
        }
        Ok(HttpResponse::json(
            200,
            &PowChallengeResponse {
                challenge_string: challenge,
                difficulty: self.config.pow_difficulty,
                expires_in: POW_CHALLENGE_TTL_MS / 1000,
            },
        ))
    }

    /// Consumes the outstanding challenge of `addr` that `nonce` solves.
    pub(crate) fn check_pow(
        &mut self,
        now: UnixMs,
        addr: &str,
        nonce: Option<&str>,
    ) -> Result<(), ApiError> {
        let difficulty = self.config.pow_difficulty;
        if difficulty == 0 {
            return Ok(());
        }
        let Some(nonce) = nonce else {
            return Err(ApiError::new(
                ErrorCode::POW_REQUIRED,
                "registration needs pow_nonce solving a challenge from /api/v1/pow/challenge",
            ));
        };
        if nonce.len() > crate::limits::MAX_POW_NONCE_BYTES {
            return Err(ApiError::new(
                ErrorCode::POW_INVALID,
                "pow_nonce is too long",
            ));
        }
        let candidates: Vec<String> = self
            .admission()
            .pow_by_addr
            .get(addr)
            .map(|l| {
                l.iter()
                    .filter(|c| self.admission().pow.get(c, now).is_some())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if candidates.is_empty() {
            return Err(ApiError::new(
                ErrorCode::POW_INVALID,
                "no outstanding proof-of-work challenge for this client (expired or already used)",
            ));
        }
        let solved = candidates
            .into_iter()
            .find(|c| crate::pow::verify(c, nonce, difficulty));
        let Some(solved) = solved else {
            return Err(ApiError::new(
                ErrorCode::POW_INVALID,
                "pow_nonce does not solve the challenge",
            ));
        };
        self.admission_mut().pow.remove(&solved);
        if let Some(list) = self.admission_mut().pow_by_addr.get_mut(addr) {
            list.retain(|c| *c != solved);
        }
        Ok(())
    }

    // ---------------------------------------------------------------- A3 / A4

    pub(crate) fn http_auth_challenge(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let body: AuthChallengeRequest = decode_body(&req.body)?;
        if self.account(&body.user_uuid)?.is_none() {
            return Err(ApiError::new(
                ErrorCode::USER_NOT_FOUND,
                "no account with that user_uuid",
            ));
        }
        if !self
            .admission_mut()
            .auth_rate
            .allow(now.get(), &body.user_uuid)
        {
            return Err(ApiError::rate_limited(
                "too many auth challenges for this account",
                self.admission()
                    .auth_rate
                    .retry_after_ms(now.get(), &body.user_uuid),
            ));
        }
        let expires = now.plus_ms(AUTH_CHALLENGE_TTL_MS);
        let challenge = self.credentials.seal(
            Kind::Challenge,
            body.user_uuid.as_str(),
            expires,
            self.ids.bytes(),
            b"",
        );
        Ok(HttpResponse::json(
            200,
            &AuthChallengeResponse {
                challenge,
                expires_at: IsoTime(expires),
            },
        ))
    }

    pub(crate) fn http_auth_verify(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let body: AuthVerifyRequest = decode_body(&req.body)?;
        let invalid = || {
            ApiError::new(
                ErrorCode::CHALLENGE_INVALID,
                "the challenge is unknown, expired, already used or issued for another account",
            )
        };
        // PLANTED BUG (AuthChallengeReusable): a used challenge is neither looked up nor
        // marked used.
        let reusable = crate::planted::planted!(self.config, AuthChallengeReusable);
        let opened = self
            .open_unused(
                Kind::Challenge,
                body.user_uuid.as_str(),
                &body.challenge,
                now,
                reusable,
            )
            .ok_or_else(invalid)?;
        let Some(account) = self.account(&body.user_uuid)? else {
            return Err(ApiError::new(
                ErrorCode::USER_NOT_FOUND,
                "no account with that user_uuid",
            ));
        };
        self.check_challenge_signature(&account, &body)?;
        if !reusable {
            self.spend(&opened)?;
        }
        let jti = self.ids.jti();
        let ttl = self.config.jwt_ttl_ms;
        let Some(token) = self
            .tokens
            .issue(account.uuid.as_str(), &jti, now.get(), ttl)
        else {
            return Err(ApiError::with_status(
                500,
                ErrorCode::BAD_REQUEST,
                "token signing failed",
            ));
        };
        // A new login revokes the previous token; its socket is told and closed.
        let mut updated = AccountRow::clone(&account);
        updated.current_jti = Some(jti);
        let user = updated.uuid.clone();
        self.state.put_account(updated);
        if let Some(conn) = self.online(&user) {
            self.goaway(conn, goaway_reason::NEW_DEVICE_LOGIN);
        }
        Ok(HttpResponse::json(
            200,
            &AuthVerifyResponse {
                token,
                expires_in: ttl / 1000,
            },
        ))
    }

    /// Whether `body` signs its challenge with `account`'s Ed25519 key (strict
    /// verification); `SIGNATURE_INVALID` otherwise.
    fn check_challenge_signature(
        &self,
        account: &AccountRow,
        body: &AuthVerifyRequest,
    ) -> Result<(), ApiError> {
        let key = VerifyingKey::from_bytes(&account.ed25519_public_key.0).map_err(|_| {
            ApiError::new(
                ErrorCode::SIGNATURE_INVALID,
                "the account's signing key is unusable",
            )
        })?;
        let sig = Signature::from_bytes(&body.signature.0);
        // PLANTED BUG (ChallengeSignatureIgnored): the signature is parsed but never checked,
        // so anyone who asks for an account's challenge logs in as it.
        if !crate::planted::planted!(self.config, ChallengeSignatureIgnored)
            && key.verify_strict(body.challenge.as_bytes(), &sig).is_err()
        {
            return Err(ApiError::new(
                ErrorCode::SIGNATURE_INVALID,
                "the signature does not verify",
            ));
        }
        Ok(())
    }

    // ---------------------------------------------------------------- bearer

    /// Checks a JWT: signature, shape, expiry against `now`, and that it is the account's
    /// current token. Returns (user, jti).
    pub(crate) fn check_token(
        &mut self,
        now: UnixMs,
        token: &str,
    ) -> Result<(UserUuid, String), ApiError> {
        let claims = match self.tokens.verify(token, now.get()) {
            Ok(claims) => claims,
            // PLANTED BUG (test-only) when `TokenSignatureIgnored`: a token whose signature does
            // not verify is read anyway.
            #[cfg(feature = "planted-bugs")]
            Err(TokenError::BadSignature)
                if crate::planted::planted!(self.config, TokenSignatureIgnored) =>
            {
                crate::token::unverified_claims(token)
                    .ok_or_else(|| token_error(TokenError::Malformed))?
            }
            Err(e) => return Err(token_error(e)),
        };
        let user = UserUuid::parse(&claims.sub).map_err(|_| token_error(TokenError::Malformed))?;
        if self.config.shard.elsewhere(&user).is_some() {
            // Another shard's account: its session is that shard's to check (this shard's
            // copy of the account may be stale), and every route a token opens is decided
            // there or reaches its shard through it (`crate::http::Home`).
            return Ok((user, claims.jti));
        }
        match self.account(&user)? {
            Some(a) if a.current_jti.as_deref() == Some(claims.jti.as_str()) => {
                Ok((user, claims.jti))
            }
            _ => Err(token_error(TokenError::Revoked)),
        }
    }

    /// Authenticates a REST request by its `Authorization: Bearer` header.
    pub(crate) fn authenticate(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<(UserUuid, String), ApiError> {
        if let Some(verified) = self.verified_caller() {
            // This request's token, verified once by the dispatcher.
            return Ok(verified.clone());
        }
        let Some(header) = req.authorization.as_deref().map(str::trim) else {
            return Err(token_error(TokenError::Missing));
        };
        let token = match header.split_once(' ') {
            Some((scheme, t)) if scheme.eq_ignore_ascii_case("bearer") => t.trim(),
            _ if header.is_empty() => return Err(token_error(TokenError::Missing)),
            _ => return Err(token_error(TokenError::Malformed)),
        };
        self.check_token(now, token)
    }

    // ---------------------------------------------------------------- A5

    pub(crate) fn http_ws_ticket(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, jti) = self.authenticate(now, req)?;
        probes::probe!("ticket:issued");
        // PLANTED BUG (TicketTtlUnits): the lifetime is taken for seconds and scaled again,
        // so a ticket announced to live 30 s lives 1,000 times longer.
        let ttl_ms = if crate::planted::planted!(self.config, TicketTtlUnits) {
            WS_TICKET_TTL_MS * 1000
        } else {
            WS_TICKET_TTL_MS
        };
        let ticket = self.credentials.seal(
            Kind::Ticket,
            user.as_str(),
            now.plus_ms(ttl_ms),
            self.ids.bytes(),
            jti.as_bytes(),
        );
        Ok(HttpResponse::json(
            200,
            &WsTicketResponse {
                ticket,
                expires_in: WS_TICKET_TTL_MS / 1000,
            },
        ))
    }

    // ---------------------------------------------------------------- WS connect

    pub(crate) fn connect(
        &mut self,
        now: UnixMs,
        conn: ConnId,
        req: &WsConnect,
    ) -> Result<Accepted, ApiError> {
        let q = req.query.as_str();
        let uuid = query_param(q, "user_uuid")
            .or_else(|| query_param(q, "uuid"))
            .filter(|u| !u.is_empty())
            .ok_or_else(|| {
                ApiError::with_status(401, ErrorCode::AUTH_REQUIRED, "user_uuid is required")
            })?;
        let user = UserUuid::parse(uuid).map_err(|e| {
            ApiError::with_status(401, ErrorCode::INVALID_FIELD, format!("user_uuid: {e}"))
        })?;
        let ticket = query_param(q, "ticket").filter(|t| !t.is_empty());
        let token = query_param(q, "token").filter(|t| !t.is_empty());
        let proto_token = req.protocol.as_deref().and_then(bearer_subprotocol);
        let (jti, subprotocol) = if let Some(ticket) = ticket {
            (self.redeem_ticket(now, &user, ticket)?, None)
        } else if let Some(token) = token {
            let (sub, jti) = self.check_token(now, token)?;
            if sub != user {
                probes::probe!("token:foreign-account");
                return Err(ApiError::with_status(
                    401,
                    ErrorCode::TOKEN_INVALID,
                    "the token belongs to another account",
                ));
            }
            (jti, None)
        } else if let Some(token) = proto_token {
            let (sub, jti) = self.check_token(now, token)?;
            if sub != user {
                probes::probe!("token:foreign-account-subprotocol");
                return Err(ApiError::with_status(
                    401,
                    ErrorCode::TOKEN_INVALID,
                    "the token belongs to another account",
                ));
            }
            (jti, Some("bearer"))
        } else {
            return Err(token_error(TokenError::Missing));
        };
        // Single session: the older socket of this account is told and closed.
        if let Some(old) = self.online(&user) {
            let same_token = self.sessions().get(old).is_some_and(|c| c.jti == jti);
            let reason = if same_token {
                goaway_reason::SESSION_REPLACED
            } else {
                goaway_reason::NEW_DEVICE_LOGIN
            };
            self.goaway(old, reason);
        }
        // A shell reusing a live ConnId: treat it as a disconnect of the old one.
        self.drop_conn(conn);
        self.sessions_mut()
            .open(conn, Conn::new(user.clone(), jti, now));
        Ok(Accepted { user, subprotocol })
    }

    /// Redeems `ticket` for `user`'s socket: the JWT id it was issued for, if that token is
    /// still the account's (a later login revokes it). The ticket is spent in this input's
    /// batch.
    fn redeem_ticket(
        &mut self,
        now: UnixMs,
        user: &UserUuid,
        ticket: &str,
    ) -> Result<String, ApiError> {
        let invalid = || {
            ApiError::new(
                ErrorCode::TICKET_INVALID,
                "the ticket is unknown, expired or already used",
            )
        };
        // PLANTED BUG (TicketReusable): a used ticket is neither looked up nor marked used.
        let reusable = crate::planted::planted!(self.config, TicketReusable);
        let opened = self
            .open_unused(Kind::Ticket, user.as_str(), ticket, now, reusable)
            .ok_or_else(invalid)?;
        let jti = String::from_utf8(opened.extra.clone()).map_err(|_| invalid())?;
        probes::probe!("ticket:redeemed");
        // The token the ticket was issued for may have been revoked since.
        if self
            .account(user)?
            .and_then(|a| a.current_jti.clone())
            .as_deref()
            != Some(jti.as_str())
        {
            return Err(token_error(TokenError::Revoked));
        }
        if !reusable {
            self.spend(&opened)?;
        }
        Ok(jti)
    }
}
