//! Login and 409 recovery: registration (A1-A4), restoring a stored identity, and the
//! challenge/verify round both end with.
//!
//! * Registration is PoW (A1; a failed PoW fetch registers without a nonce, as every reference
//!   client) → register (A2) → challenge (A3) → verify (A4). The identity is stored only after
//!   A4 succeeded, then [`Event::Authenticated`]; the machine connects if the app asked for it.
//! * On **409** the returned `uuid` is adopted only if A3/A4 with *our* Ed25519 key succeed for
//!   it: a relay issues a token only for a signature by the account's registered key, so
//!   success proves the account is ours. Any failure ends in
//!   [`AuthFailure::RecoveryRejected`] and nothing is stored (S-10).
//! * `restore_session` re-derives the keys from the stored mnemonic and refuses keys that do
//!   not match the stored public keys.
//! * One flow at a time ([`ClientError::Busy`]). A flow the machine started itself after a
//!   refused token ([`super::connection`]) reports its failure there.

use serde_json::{Value, json};

use super::client::{Client, Method, Pending, ok_status};
use super::event::{ClientError, Event};
use crate::keys::{Identity, KeyError, SecretString, derive_identity};
use crate::pow::{POW_DEFAULT_DIFFICULTY, solve_pow};
use crate::store::{ClientStore, StoredIdentity};

impl<S: ClientStore> Client<S> {
    /// Starts registration (idempotent for the same mnemonic; see the [machine doc](crate::machine)).
    pub fn register_account(
        &mut self,
        _now_ms: u64,
        mnemonic: &str,
        nickname: &str,
    ) -> Result<(), ClientError> {
        if self.flow.is_some() {
            return Err(ClientError::Busy);
        }
        let identity = derive_identity(mnemonic, self.config.x25519_path)?;
        self.flow = Some(AuthFlow {
            identity,
            nickname: nickname.to_owned(),
            uuid: None,
            alias: None,
            recovered: false,
            reauth: false,
        });
        self.out.request(
            Method::Post,
            wire::http::paths::POW_CHALLENGE.into(),
            Some(json!({})),
            false,
            Pending::Pow,
        );
        Ok(())
    }

    /// Re-authenticates the stored identity; returns `(aliasId, nickname)` or `None` when none is stored.
    pub fn restore_session(
        &mut self,
        _now_ms: u64,
    ) -> Result<Option<(String, String)>, ClientError> {
        let Some(stored) = self.store.load_identity()? else {
            return Ok(None);
        };
        if self.flow.is_some() {
            return Err(ClientError::Busy);
        }
        let out = (stored.alias_id.clone(), stored.nickname.clone());
        self.start_auth_round(&stored, false)?;
        Ok(Some(out))
    }

    /// Challenge/verify (A3/A4) for a stored identity, after checking its keys.
    pub(super) fn start_auth_round(
        &mut self,
        stored: &StoredIdentity,
        reauth: bool,
    ) -> Result<(), ClientError> {
        let identity = derive_identity(stored.mnemonic.expose(), stored.x25519_path.into())?;
        if identity.signing_public_b64() != stored.signing_public_key
            || identity.ecdh_public_b64() != stored.ecdh_public_key
        {
            return Err(ClientError::Key(KeyError::PublicKey));
        }
        self.flow = Some(AuthFlow {
            identity,
            nickname: stored.nickname.clone(),
            uuid: Some(stored.uuid.clone()),
            alias: Some(stored.alias_id.clone()),
            recovered: false,
            reauth,
        });
        self.send_challenge(&stored.uuid);
        Ok(())
    }

    fn send_challenge(&mut self, uuid: &str) {
        self.out.request(
            Method::Post,
            wire::http::paths::AUTH_CHALLENGE.into(),
            Some(json!({ "user_uuid": uuid })),
            false,
            Pending::Challenge,
        );
    }

    fn fail_auth(&mut self, now_ms: u64, f: AuthFailure) {
        let reauth = self.flow.take().is_some_and(|f| f.reauth);
        self.auth_failed(now_ms, reauth, f);
    }

    /// An auth flow ended without a token. A re-authentication the machine started itself is
    /// retried later when the relay could not answer (transport error `0`, 408, 429, 5xx) and
    /// the app still wants to be connected; any other failure of it is terminal.
    pub(super) fn auth_failed(&mut self, now_ms: u64, reauth: bool, f: AuthFailure) {
        if reauth && self.reauth_failed(now_ms, &f) {
            return;
        }
        self.out.event(Event::AuthFailed(f));
    }

    pub(super) fn on_pow(&mut self, status: u16, v: Option<&Value>) {
        let Some(flow) = &self.flow else { return };
        // As every reference client: a failed PoW fetch registers without a nonce.
        let nonce = v.filter(|_| ok_status(status)).and_then(|v| {
            let ch = v.get("challenge_string")?.as_str()?;
            let d = v
                .get("difficulty")
                .and_then(Value::as_u64)
                .and_then(|d| u32::try_from(d).ok())
                .filter(|d| *d > 0)
                .unwrap_or(POW_DEFAULT_DIFFICULTY);
            solve_pow(ch, d).ok()
        });
        let mut body = json!({
            "ed25519_public_key": flow.identity.signing_public_b64(),
            "x25519_public_key": flow.identity.ecdh_public_b64(),
            "nickname": flow.nickname,
        });
        if let (Some(n), Some(o)) = (nonce, body.as_object_mut()) {
            o.insert("pow_nonce".into(), Value::from(n));
        }
        self.out.request(
            Method::Post,
            wire::http::paths::REGISTER.into(),
            Some(body),
            false,
            Pending::Register,
        );
    }

    pub(super) fn on_register(&mut self, now_ms: u64, status: u16, v: Option<&Value>) {
        let ids = v.and_then(|v| {
            Some((
                v.get("uuid")?.as_str()?.to_owned(),
                v.get("alias_id")?.as_str()?.to_owned(),
            ))
        });
        let recovered = status == 409;
        if !(ok_status(status) || recovered) {
            return self.fail_auth(now_ms, AuthFailure::Register(status));
        }
        let Some((uuid, alias)) = ids else {
            return self.fail_auth(
                now_ms,
                if recovered {
                    AuthFailure::RecoveryRejected
                } else {
                    AuthFailure::BadResponse
                },
            );
        };
        if let Some(f) = self.flow.as_mut() {
            f.uuid = Some(uuid.clone());
            f.alias = Some(alias);
            f.recovered = recovered;
        }
        self.send_challenge(&uuid);
    }

    pub(super) fn on_challenge(&mut self, now_ms: u64, status: u16, v: Option<&Value>) {
        let Some(flow) = &self.flow else { return };
        let recovered = flow.recovered;
        let challenge = v
            .filter(|_| ok_status(status))
            .and_then(|v| v.get("challenge")?.as_str().map(str::to_owned));
        let (Some(ch), Some(uuid)) = (challenge, flow.uuid.clone()) else {
            return self.fail_auth(
                now_ms,
                if recovered {
                    AuthFailure::RecoveryRejected
                } else {
                    AuthFailure::Auth(status)
                },
            );
        };
        let sig = flow.identity.sign_challenge(&ch);
        self.out.request(
            Method::Post,
            wire::http::paths::AUTH_VERIFY.into(),
            Some(json!({ "user_uuid": uuid, "challenge": ch, "signature": sig })),
            false,
            Pending::Verify,
        );
    }

    pub(super) fn on_verify(
        &mut self,
        now_ms: u64,
        status: u16,
        v: Option<&Value>,
    ) -> Result<(), ClientError> {
        let token = v
            .filter(|_| ok_status(status))
            .and_then(|v| v.get("token")?.as_str().map(str::to_owned));
        let Some(flow) = self.flow.take() else {
            return Ok(());
        };
        let Some(token) = token else {
            let f = if flow.recovered {
                AuthFailure::RecoveryRejected
            } else {
                AuthFailure::Auth(status)
            };
            self.auth_failed(now_ms, flow.reauth, f);
            return Ok(());
        };
        let (Some(uuid), Some(alias)) = (flow.uuid.clone(), flow.alias.clone()) else {
            self.auth_failed(now_ms, flow.reauth, AuthFailure::BadResponse);
            return Ok(());
        };
        let stored = StoredIdentity {
            uuid,
            alias_id: alias.clone(),
            nickname: flow.nickname.clone(),
            mnemonic: flow.identity.mnemonic.clone(),
            signing_public_key: flow.identity.signing_public_b64(),
            ecdh_public_key: flow.identity.ecdh_public_b64(),
            x25519_path: flow.identity.x25519_path.into(),
        };
        self.store.save_identity(&stored)?;
        self.stored = Some(stored);
        self.identity = Some(flow.identity);
        self.token = Some(SecretString::new(token));
        self.out.event(Event::Authenticated {
            alias_id: alias,
            nickname: flow.nickname,
            recovered: flow.recovered,
        });
        self.connect_if_wanted(now_ms);
        Ok(())
    }
}

/// Why authentication failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    /// Registration refused with this status.
    Register(u16),
    /// The 409 account could not be proven ours (see the [machine doc](crate::machine)).
    RecoveryRejected,
    /// Challenge or verify refused with this status.
    Auth(u16),
    /// A response body was not understood.
    BadResponse,
    /// The relay refused the token (this status, 401, on the ticket request or the WebSocket
    /// upgrade) again right after the machine re-authenticated: terminal, no reconnect.
    TokenRefused(u16),
}

#[derive(Debug)]
pub(super) struct AuthFlow {
    identity: Identity,
    nickname: String,
    uuid: Option<String>,
    alias: Option<String>,
    recovered: bool,
    /// Started by the machine after the relay refused the token (not by the app).
    reauth: bool,
}
