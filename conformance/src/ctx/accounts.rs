//! Accounts and contacts: the case acts as any number of genuine clients.
//!
//! * Identities come from fresh mnemonics drawn from the case's seeded RNG (spec X25519 path);
//!   mnemonics, signatures and tokens are registered as transcript secrets, never shown.
//! * Registration solves the relay's proof of work (A1, A2) and retries a rate-limited
//!   challenge (429) up to [`POW_RATE_RETRIES`] times, 5 s apart (virtual time under turmoil),
//!   then logs in (A3, A4).
//! * Contacts are made through the real friend request and accept (F2, F3); the session key is
//!   derived as a client would, so payloads are end-to-end encrypted for real.
//! * These are the cases' setup steps: a failure is an `error` naming the step
//!   ([`Failure::in_setup`]), never a failed or passed statement. A case whose statement is the
//!   step itself turns it back into a failure ([`Failure::checked`]).

use std::time::Duration;

use client_core::crypto::{SessionKey, session_key};
use client_core::keys::{Identity, X25519Path, derive_identity, new_mnemonic};
use client_core::pow::solve_pow;
use http::Method;
use serde_json::{Value, json};
use wire::http::paths;

use super::Ctx;
use super::requests::{id_text, s, u};
use crate::fail;
use crate::verdict::Failure;

/// How long a change one member made may take to show in the other member's F1 list.
pub(super) const FRIEND_VISIBLE_WITHIN_MS: u64 = 5_000;
/// How often the other member's list is read again meanwhile.
pub(super) const FRIEND_POLL_MS: u64 = 25;
/// How often account creation retries a rate-limited PoW challenge (5 s apart).
const POW_RATE_RETRIES: u32 = 24;

impl Ctx {
    /// A fresh identity from the case's seeded RNG (spec X25519 path).
    pub fn identity(&mut self) -> Result<Identity, Failure> {
        let mnemonic = new_mnemonic(&mut self.rng);
        self.transcript.secret(mnemonic.expose());
        derive_identity(mnemonic.expose(), X25519Path::Spec)
            .map_err(|e| Failure::Fail(format!("deriving an identity: {e}")))
    }

    /// A2 body for `identity` with a solved proof of work (from A1).
    pub async fn register_body(
        &mut self,
        identity: &Identity,
        nickname: &str,
    ) -> Result<Value, Failure> {
        // A relay may rate-limit challenges per address: wait politely (virtual time under turmoil).
        let mut pow = self
            .req(Method::POST, paths::POW_CHALLENGE, None, Some(&json!({})))
            .await?;
        for _ in 0..POW_RATE_RETRIES {
            if pow.status != 429 {
                break;
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
            pow = self
                .req(Method::POST, paths::POW_CHALLENGE, None, Some(&json!({})))
                .await?;
        }
        let pow = pow.ok()?;
        let challenge = s(&pow, "challenge_string")?.to_owned();
        let difficulty = u32::try_from(u(&pow, "difficulty")?).unwrap_or(u32::MAX);
        let mut body = json!({
            "ed25519_public_key": identity.signing_public_b64(),
            "x25519_public_key": identity.ecdh_public_b64(),
            "nickname": nickname,
        });
        if difficulty > 0 {
            let nonce = solve_pow(&challenge, difficulty)
                .map_err(|e| Failure::Fail(format!("solving PoW difficulty {difficulty}: {e}")))?;
            body["pow_nonce"] = Value::from(nonce);
        }
        Ok(body)
    }

    /// A3 + A4 for `uuid`: a fresh JWT.
    pub async fn login(&mut self, uuid: &str, identity: &Identity) -> Result<String, Failure> {
        let ch = self
            .post(paths::AUTH_CHALLENGE, None, &json!({"user_uuid": uuid}))
            .await?
            .ok()?;
        let challenge = s(&ch, "challenge")?.to_owned();
        let signature = identity.sign_challenge(&challenge);
        self.transcript.secret(&signature);
        let v = self
            .post(
                paths::AUTH_VERIFY,
                None,
                &json!({"user_uuid": uuid, "challenge": challenge, "signature": signature}),
            )
            .await?
            .ok()?;
        let token = s(&v, "token")?.to_owned();
        self.transcript.secret(&token);
        Ok(token)
    }

    /// Registers and logs in a fresh account (a setup step).
    pub async fn account(&mut self) -> Result<Account, Failure> {
        self.account_unchecked()
            .await
            .map_err(|f| f.in_setup("registering and logging in an account"))
    }

    async fn account_unchecked(&mut self) -> Result<Account, Failure> {
        let identity = self.identity()?;
        self.nick += 1;
        let nickname = format!("conf{}{}", self.word(), self.nick);
        let body = self.register_body(&identity, &nickname).await?;
        let reg = self.post(paths::REGISTER, None, &body).await?;
        let reg = reg.ok()?;
        let uuid = s(&reg, "uuid")?.to_owned();
        let alias = s(&reg, "alias_id")?.to_owned();
        let token = self.login(&uuid, &identity).await?;
        Ok(Account {
            uuid,
            alias,
            token,
            nickname,
            identity,
        })
    }

    /// The F1 entry `acct` sees for `other`, if any.
    pub async fn friend_entry(
        &mut self,
        acct: &Account,
        other: &str,
    ) -> Result<Option<Value>, Failure> {
        let list = self.get(paths::FRIENDS, Some(&acct.token)).await?.ok()?;
        let Some(items) = list.as_array() else {
            fail!("GET /api/v1/friends: expected a JSON array, got {list}");
        };
        Ok(items
            .iter()
            .find(|f| f.get("alias_id").and_then(Value::as_str) == Some(other))
            .cloned())
    }

    /// The F1 entry `acct` sees for `other` once `holds` holds for it, read again every
    /// 25 ms for about 5 s; else the last entry read
    /// (the case then says what it saw). What one member did shows in the other member's list
    /// a little later on a relay of several processes, as the other member's client learns it
    /// from an event and reads its list then; neither document asks for it at once.
    pub async fn friend_entry_once(
        &mut self,
        acct: &Account,
        other: &str,
        holds: impl Fn(&Value) -> bool,
    ) -> Result<Option<Value>, Failure> {
        // Counted in pauses, not read off a clock (the reads' own time only lengthens it).
        let mut pauses = FRIEND_VISIBLE_WITHIN_MS / FRIEND_POLL_MS;
        loop {
            let entry = self.friend_entry(acct, other).await?;
            if entry.as_ref().is_some_and(&holds) || pauses == 0 {
                return Ok(entry);
            }
            pauses -= 1;
            tokio::time::sleep(Duration::from_millis(FRIEND_POLL_MS)).await;
        }
    }

    /// `a` asks `b`; returns the friendship id as `b` sees it (a setup step).
    pub async fn request_friend(&mut self, a: &Account, b: &Account) -> Result<Value, Failure> {
        self.request_friend_unchecked(a, b)
            .await
            .map_err(|f| f.in_setup("a friend request (F2) and the recipient's list (F1)"))
    }

    async fn request_friend_unchecked(
        &mut self,
        a: &Account,
        b: &Account,
    ) -> Result<Value, Failure> {
        self.post(
            paths::FRIEND_REQUEST,
            Some(&a.token),
            &json!({"to_alias_id": b.alias}),
        )
        .await?
        .ok()?;
        let Some(entry) = self.friend_entry_once(b, &a.alias, |_| true).await? else {
            fail!("the recipient's friends list has no entry for the requester");
        };
        entry
            .get("friendship_id")
            .cloned()
            .ok_or_else(|| Failure::Fail(format!("no friendship_id in {entry}")))
    }

    /// F3 (PUT, no body): `b` accepts; returns the conversation id (a setup step).
    pub async fn accept(&mut self, b: &Account, friendship_id: &Value) -> Result<String, Failure> {
        let path = format!("/api/v1/friends/{}/accept", id_text(friendship_id));
        async {
            let v = self
                .req(Method::PUT, &path, Some(&b.token), None)
                .await?
                .ok()?;
            Ok(s(&v, "conversation_id")?.to_owned())
        }
        .await
        .map_err(|f: Failure| f.in_setup("accepting a friend request (F3, PUT)"))
    }

    /// Makes `a` and `b` contacts.
    pub async fn befriend(&mut self, a: Account, b: Account) -> Result<Pair, Failure> {
        let friendship_id = self.request_friend(&a, &b).await?;
        let conv = self.accept(&b, &friendship_id).await?;
        let key = session_key(
            &a.identity.ecdh_key,
            &b.identity.ecdh_key.public_key(),
            &conv,
        );
        Ok(Pair {
            a,
            b,
            conv,
            friendship_id,
            key,
        })
    }

    /// Two fresh accounts that are contacts.
    pub async fn pair(&mut self) -> Result<Pair, Failure> {
        let a = self.account().await?;
        let b = self.account().await?;
        self.befriend(a, b).await
    }

    /// A `msg` frame from `from` to `to` in `conv` with `text` encrypted under `key`.
    pub fn msg(
        &mut self,
        key: &SessionKey,
        to: &Account,
        conv: &str,
        text: &str,
    ) -> (String, Value) {
        let id = self.uuid();
        let payload = self.encrypt(key, text);
        let frame = json!({"type": "msg", "id": id, "to": to.alias, "conv_id": conv, "crypto_v": 1, "payload": payload});
        (id, frame)
    }
}

/// A registered, logged-in account.
#[derive(Debug, Clone)]
pub struct Account {
    /// Account id.
    pub uuid: String,
    /// Alias.
    pub alias: String,
    /// Current JWT.
    pub token: String,
    /// Nickname.
    pub nickname: String,
    /// Keys (derived from a fresh mnemonic on the spec's X25519 path).
    pub identity: Identity,
}

impl Account {
    /// Base64 Ed25519 public key.
    pub fn ed_b64(&self) -> String {
        self.identity.signing_public_b64()
    }
    /// Base64 X25519 public key.
    pub fn x_b64(&self) -> String {
        self.identity.ecdh_public_b64()
    }
}

/// Two accounts that are accepted contacts, with their conversation and session key.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The requester.
    pub a: Account,
    /// The one who accepted.
    pub b: Account,
    /// The conversation id from the accept.
    pub conv: String,
    /// The friendship id.
    pub friendship_id: Value,
    /// Session key as `a` derives it (equal to `b`'s when the relay is honest about keys).
    pub key: SessionKey,
}
