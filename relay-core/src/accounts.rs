//! Accounts: registration (A2), user lookup (F5), conversations (C1) and storage (C2).

use wire::http::{
    ActiveConversation, ActiveConversations, RegisterConflict, RegisterRequest, RegisterResponse,
    RegisteredKey, StorageEstimate, UserProfile, decode_body,
};
use wire::limits::NICKNAME_MAX_CHARS;
use wire::{AliasId, ErrorCode, UnixMs, UserUuid};

use crate::http::{ApiError, HttpRequest, HttpResponse};
use crate::limits::{ALIAS_ATTEMPTS, MIN_NICKNAME_CHARS, STORAGE_QUOTA_BYTES};
use crate::relay::Relay;
use crate::state::AccountRow;

/// Validates a nickname: trimmed, 1..=32 Unicode scalar values, no control characters.
pub(crate) fn check_nickname(raw: &str) -> Result<String, ApiError> {
    let nick = raw.trim();
    let n = nick.chars().count();
    if n < MIN_NICKNAME_CHARS {
        return Err(ApiError::new(
            ErrorCode::INVALID_FIELD,
            "nickname must not be empty",
        ));
    }
    if n > NICKNAME_MAX_CHARS {
        return Err(ApiError::new(
            ErrorCode::INVALID_FIELD,
            format!("nickname is {n} characters, the limit is {NICKNAME_MAX_CHARS}"),
        ));
    }
    if nick.chars().any(char::is_control) {
        return Err(ApiError::new(
            ErrorCode::INVALID_FIELD,
            "nickname must not contain control characters",
        ));
    }
    Ok(nick.to_owned())
}

impl Relay {
    /// A2. Order of checks: body, duplicate key (409, before PoW so a recovering client
    /// without a nonce is answered), nickname, rate limit (429), PoW (400), then commit (201).
    pub(crate) fn http_register(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let body: RegisterRequest = decode_body(&req.body)?;
        let existing = self
            .state
            .by_ed25519
            .get(&body.ed25519_public_key.0)
            .map(|u| (u, RegisteredKey::Ed25519))
            .or_else(|| {
                self.state
                    .by_x25519
                    .get(&body.x25519_public_key.0)
                    .map(|u| (u, RegisteredKey::X25519))
            });
        if let Some((uuid, key)) = existing
            && let Some(account) = self.state.accounts.get(uuid)
        {
            let which = match key {
                RegisteredKey::Ed25519 => "ed25519_public_key",
                RegisteredKey::X25519 => "x25519_public_key",
            };
            return Ok(HttpResponse::json(
                409,
                &RegisterConflict {
                    error: ErrorCode::ALREADY_REGISTERED,
                    message: format!(
                        "{which} is already registered; the existing account is returned"
                    ),
                    uuid: account.uuid.clone(),
                    alias_id: account.alias_id.clone(),
                    key,
                },
            ));
        }
        let nickname = check_nickname(&body.nickname)?;
        let addr = req.remote_addr.clone();
        if !self.eph.register_rate.check(now.get(), &addr) {
            return Err(ApiError::new(
                ErrorCode::RATE_LIMITED,
                "too many registrations from this address; try again later",
            ));
        }
        self.check_pow(now, &addr, body.pow_nonce.as_deref())?;
        let uuid = self.fresh_uuid();
        let alias_id = self.fresh_alias()?;
        self.eph.register_rate.record(now.get(), &addr);
        self.state.put_account(AccountRow {
            uuid: uuid.clone(),
            alias_id: alias_id.clone(),
            nickname,
            ed25519_public_key: body.ed25519_public_key,
            x25519_public_key: body.x25519_public_key,
            created_at: now,
            current_jti: None,
        });
        Ok(HttpResponse::json(
            201,
            &RegisterResponse { uuid, alias_id },
        ))
    }

    fn fresh_uuid(&mut self) -> UserUuid {
        loop {
            let u = UserUuid::from_random_bytes(self.ids.bytes());
            if !self.state.accounts.contains_key(&u) {
                return u;
            }
        }
    }

    fn fresh_alias(&mut self) -> Result<AliasId, ApiError> {
        for _ in 0..ALIAS_ATTEMPTS {
            let candidate = self.ids.alias_candidate();
            if let Ok(alias) = AliasId::parse_alias(&candidate)
                && !self.state.by_alias.contains_key(&alias)
                && !self.state.alias_spent(&alias)
            {
                return Ok(alias);
            }
        }
        Err(ApiError::with_status(
            503,
            ErrorCode::STORAGE_UNAVAILABLE,
            "could not assign a free alias; try again",
        ))
    }

    /// F5.
    pub(crate) fn http_user(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
        alias: &str,
    ) -> Result<HttpResponse, ApiError> {
        self.authenticate(now, req)?;
        let not_found =
            || ApiError::new(ErrorCode::USER_NOT_FOUND, "no account with that alias_id");
        let alias = AliasId::parse(alias).map_err(|_| not_found())?;
        let uuid = self.state.by_alias.get(&alias).ok_or_else(not_found)?;
        let a = self.state.accounts.get(uuid).ok_or_else(not_found)?;
        Ok(HttpResponse::json(
            200,
            &UserProfile {
                alias_id: a.alias_id.clone(),
                nickname: a.nickname.clone(),
                x25519_public_key: a.x25519_public_key,
                ed25519_public_key: a.ed25519_public_key,
            },
        ))
    }

    /// C1: every conversation the caller is a member of.
    pub(crate) fn http_active_conversations(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let conversations = self
            .state
            .convs_of
            .get(&user)
            .into_iter()
            .flatten()
            .map(|c| ActiveConversation { conv_id: c.clone() })
            .collect();
        Ok(HttpResponse::json(
            200,
            &ActiveConversations { conversations },
        ))
    }

    /// C2: what the relay holds for the caller (undelivered messages addressed to it).
    pub(crate) fn http_storage_estimate(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let (mut used, mut count) = (0u64, 0u64);
        let convs: Vec<wire::ConvId> = self
            .state
            .convs_of
            .get(&user)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        for conv in convs {
            if let Some(q) = self.state.queue(&user, &conv) {
                for m in q.values() {
                    used += m.payload.len() as u64;
                    count += 1;
                }
            }
        }
        used += self.media_bytes_of(&user);
        Ok(HttpResponse::json(
            200,
            &StorageEstimate {
                used_bytes: used,
                quota_bytes: STORAGE_QUOTA_BYTES,
                message_count: count,
            },
        ))
    }
}
