//! Accounts: registration (A2), user lookup (F5), conversations (C1) and storage (C2).

use wire::http::{
    ActiveConversation, ActiveConversations, RegisterConflict, RegisterRequest, RegisterResponse,
    RegisteredKey, StorageEstimate, UserProfile, decode_body,
};
use wire::limits::NICKNAME_MAX_CHARS;
use wire::{AliasId, ErrorCode, UnixMs, UserUuid};

use crate::cx::Cx;
use crate::directory::Lookup;
use crate::handoff::{Forwarded, REGISTRY_SHARD};
use crate::http::{ApiError, HttpRequest, HttpResponse};
use crate::limits::{
    ALIAS_ATTEMPTS, MAX_MEDIA_BYTES_PER_USER, MAX_NICKNAME_COMBINING_MARKS, MIN_NICKNAME_CHARS,
};
use crate::relations::Contacts;
use crate::rows::AccountRow;

/// Validates a nickname and returns the form stored: NFC-normalised, trimmed,
/// 1..=32 Unicode scalar values, words separated by ASCII spaces only, and nothing a reader
/// cannot see or that reorders what they see: no control characters, no format characters
/// (bidi controls such as U+202E, zero-width space, joiner and non-joiner, word joiner, BOM,
/// …), no other default-ignorable or blank-looking characters (Hangul fillers, variation
/// selectors, tags, U+2800), no line or paragraph separators, private-use or unassigned code
/// points, and no run of more than [`MAX_NICKNAME_COMBINING_MARKS`] combining marks (nor one at the
/// start). Emoji keep working: U+200D may join two emoji, U+FE0F may follow one, and tag
/// characters may follow U+1F3F4 (subdivision flags).
pub(crate) fn check_nickname(raw: &str) -> Result<String, ApiError> {
    use unicode_normalization::UnicodeNormalization as _;
    let nfc: String = raw.nfc().collect();
    let nick = nfc.trim();
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
    let chars: Vec<char> = nick.chars().collect();
    let mut marks = 0usize;
    for (i, &c) in chars.iter().enumerate() {
        if unicode_normalization::char::is_combining_mark(c) {
            marks += 1;
            if i == 0 || marks > MAX_NICKNAME_COMBINING_MARKS {
                return Err(ApiError::new(
                    ErrorCode::INVALID_FIELD,
                    format!(
                        "nickname must not start with a combining mark or stack more than \
                         {MAX_NICKNAME_COMBINING_MARKS} of them"
                    ),
                ));
            }
            // Variation selectors and U+034F are nonspacing marks: as invisible as the rest.
            if is_invisible(c) && !emoji_sequence_part(&chars, i) {
                return Err(invisible_error(c));
            }
            continue;
        }
        marks = 0;
        if c.is_control() {
            return Err(ApiError::new(
                ErrorCode::INVALID_FIELD,
                "nickname must not contain control characters",
            ));
        }
        if c.is_whitespace() && c != ' ' {
            return Err(ApiError::new(
                ErrorCode::INVALID_FIELD,
                format!(
                    "nickname may separate words with spaces only (U+{:04X} is not allowed)",
                    u32::from(c)
                ),
            ));
        }
        if is_invisible(c) && !emoji_sequence_part(&chars, i) {
            return Err(invisible_error(c));
        }
    }
    Ok(nick.to_owned())
}

fn invisible_error(c: char) -> ApiError {
    ApiError::new(
        ErrorCode::INVALID_FIELD,
        format!(
            "nickname must not contain invisible or direction-changing characters (U+{:04X})",
            u32::from(c)
        ),
    )
}

/// Characters that render as nothing (or as blank space) or change the order of what is
/// shown: format characters (Cf), separators, private-use and unassigned code points, and the
/// other default-ignorable or blank-looking ones.
fn is_invisible(c: char) -> bool {
    use unicode_properties::{GeneralCategory as G, UnicodeGeneralCategory as _};
    matches!(
        c.general_category(),
        G::Format
            | G::LineSeparator
            | G::ParagraphSeparator
            | G::PrivateUse
            | G::Unassigned
            | G::Surrogate
    ) || matches!(
        c,
        '\u{034F}'                        // combining grapheme joiner
            | '\u{115F}'..='\u{1160}'     // Hangul choseong / jungseong fillers
            | '\u{17B4}'..='\u{17B5}'     // Khmer inherent vowels
            | '\u{180B}'..='\u{180F}'     // Mongolian variation selectors, vowel separator
            | '\u{2800}'                   // Braille blank
            | '\u{3164}'                   // Hangul filler
            | '\u{FE00}'..='\u{FE0F}'     // variation selectors
            | '\u{FFA0}'                   // halfwidth Hangul filler
            | '\u{1D159}'                  // musical symbol null notehead
            | '\u{1D173}'..='\u{1D17A}'   // musical formatting
            | '\u{E0000}'..='\u{E0FFF}'   // tags and variation selectors supplement
    )
}

/// Whether the invisible character at `i` is part of an emoji sequence: U+200D between two
/// emoji, U+FE0F after an emoji, a tag character after U+1F3F4 (or another tag).
fn emoji_sequence_part(chars: &[char], i: usize) -> bool {
    use unicode_properties::UnicodeEmoji as _;
    // ASCII digits, `#` and `*` have the emoji property (keycaps) but are not pictures.
    let emoji = |c: char| !c.is_ascii() && c.is_emoji_char();
    let modifier = |c: char| c == '\u{FE0F}' || ('\u{1F3FB}'..='\u{1F3FF}').contains(&c);
    let before = chars[..i].iter().rev().find(|c| !modifier(**c)).copied();
    match chars[i] {
        '\u{200D}' => before.is_some_and(emoji) && chars.get(i + 1).is_some_and(|c| emoji(*c)),
        '\u{FE0F}' => i > 0 && emoji(chars[i - 1]),
        '\u{E0020}'..='\u{E007F}' => {
            i > 0
                && (chars[i - 1] == '\u{1F3F4}'
                    || ('\u{E0020}'..='\u{E007F}').contains(&chars[i - 1]))
        }
        _ => false,
    }
}

/// X25519 u-coordinates of small order (and their non-canonical encodings, u + p), compared
/// with the top bit cleared as RFC 7748 decoding does: a Diffie-Hellman with any of them gives
/// an all-zero or attacker-known shared secret. The list libsodium rejects.
const X25519_LOW_ORDER: [[u8; 32]; 7] = [
    // 0
    [0; 32],
    // 1
    [
        1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0,
    ],
    // 325606250916557431795983626356110631294008115727848805560023387167927233504 (order 8)
    [
        0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4,
        0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49,
        0xb8, 0x00,
    ],
    // 39382357235489614581723060781553021112529911719440698176882885853963445705823 (order 8)
    [
        0x5f, 0x9c, 0x95, 0xbc, 0xa3, 0x50, 0x8c, 0x24, 0xb1, 0xd0, 0xb1, 0x55, 0x9c, 0x83, 0xef,
        0x5b, 0x04, 0x44, 0x5c, 0xc4, 0x58, 0x1c, 0x8e, 0x86, 0xd8, 0x22, 0x4e, 0xdd, 0xd0, 0x9f,
        0x11, 0x57,
    ],
    // p - 1
    [
        0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0x7f,
    ],
    // p (= 0)
    [
        0xed, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0x7f,
    ],
    // p + 1 (= 1)
    [
        0xee, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0x7f,
    ],
];

/// Whether `u` (an X25519 public key) is one of the small-order points.
pub(crate) fn x25519_is_low_order(u: &[u8; 32]) -> bool {
    let mut masked = *u;
    masked[31] &= 0x7f;
    X25519_LOW_ORDER.contains(&masked)
}

/// 400 `INVALID_KEY` unless the Ed25519 key is a valid point of large order and the X25519 key
/// is not a small-order point.
fn check_keys(body: &RegisterRequest) -> Result<(), ApiError> {
    let ed = ed25519_dalek::VerifyingKey::from_bytes(&body.ed25519_public_key.0).map_err(|_| {
        ApiError::new(
            ErrorCode::INVALID_KEY,
            "ed25519_public_key is not a valid Ed25519 point",
        )
    })?;
    if ed.is_weak() {
        return Err(ApiError::new(
            ErrorCode::INVALID_KEY,
            "ed25519_public_key is a small-order point",
        ));
    }
    if x25519_is_low_order(&body.x25519_public_key.0) {
        return Err(ApiError::new(
            ErrorCode::INVALID_KEY,
            "x25519_public_key is a small-order point (all-zero keys included)",
        ));
    }
    Ok(())
}

impl Cx<'_> {
    /// A2. Order of checks: body, public keys (400 `INVALID_KEY`), duplicate key (409, before PoW so a recovering client
    /// without a nonce is answered), nickname, rate limit (429), PoW (400), then commit (201).
    pub(crate) fn http_register(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let body: RegisterRequest = decode_body(&req.body)?;
        check_keys(&body)?;
        let existing = match self.account_by(Lookup::Ed25519(&body.ed25519_public_key.0))? {
            Some(a) => Some((a, RegisteredKey::Ed25519)),
            None => self
                .account_by(Lookup::X25519(&body.x25519_public_key.0))?
                .map(|a| (a, RegisteredKey::X25519)),
        };
        if let Some((account, key)) = existing {
            // A refusal that still answers with the account, so not an `ApiError`.
            probes::refusal(ErrorCode::ALREADY_REGISTERED.as_str());
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
        if !self.admission().register_rate.check(now.get(), &addr) {
            return Err(ApiError::rate_limited(
                "too many registrations from this address; try again later",
                self.admission()
                    .register_rate
                    .retry_after_ms(now.get(), &addr),
            ));
        }
        // The new ids are checked against the store before the proof of work is used up: a
        // failed read (503) leaves the client's solved challenge valid for its retry.
        let uuid = self.fresh_uuid()?;
        let alias_id = self.fresh_alias()?;
        self.check_pow(now, &addr, body.pow_nonce.as_deref())?;
        self.admission_mut().register_rate.record(now.get(), &addr);
        self.state.put_account(AccountRow {
            uuid: uuid.clone(),
            alias_id: alias_id.clone(),
            nickname,
            ed25519_public_key: body.ed25519_public_key,
            x25519_public_key: body.x25519_public_key,
            created_at: now,
            current_jti: None,
            alias_at: UnixMs(0),
            former_aliases: Vec::new(),
        });
        Ok(HttpResponse::json(
            201,
            &RegisterResponse { uuid, alias_id },
        ))
    }

    fn fresh_uuid(&mut self) -> Result<UserUuid, ApiError> {
        loop {
            let u = UserUuid::from_random_bytes(self.ids.bytes());
            if self.account(&u)?.is_none() {
                return Ok(u);
            }
        }
    }

    fn fresh_alias(&mut self) -> Result<AliasId, ApiError> {
        for _ in 0..ALIAS_ATTEMPTS {
            let candidate = self.ids.alias_candidate();
            // A catalog alias is merchandise (an operator's catalog may hold aliases of the
            // registration form): never handed out at registration, held or not.
            if let Ok(alias) = AliasId::parse_alias(&candidate)
                && self.account_by_alias(&alias)?.is_none()
                && !self.state.alias_spent(&alias)
                && !self.config.vanity_catalog.contains(&alias)
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
        let a = self.account_by_alias(&alias)?.ok_or_else(not_found)?;
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
            .with_contacts(&user, Contacts::conversations)?
            .into_iter()
            .map(|conv_id| ActiveConversation { conv_id })
            .collect();
        Ok(HttpResponse::json(
            200,
            &ActiveConversations { conversations },
        ))
    }

    /// C2: what the relay holds for the caller (undelivered messages addressed to it, as the
    /// queue bounds count them, and its media, unfinished and completed) against its quota
    /// (see [`MAX_MEDIA_BYTES_PER_USER`]). The caller's shard counts its queues; the registry
    /// shard, which holds the media, answers (forwarded there with the queues' count).
    pub(crate) fn http_storage_estimate(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        // The messages waiting for the caller as the queue bounds count them (the queue
        // index: nothing is read), in the units of the queue bound in `quota_bytes`.
        let (bytes, msgs) = (self.state.queued().of(&user))
            .map(|(_, e)| e.summary)
            .fold((0u64, 0u64), |(b, n), s| (b + s.bytes, n + s.msgs));
        let place = self.config.shard;
        if place.map().shards() > 1 && place.me() != REGISTRY_SHARD {
            let op = Forwarded::Storage {
                user,
                queued_bytes: bytes,
                queued_msgs: msgs,
            };
            return self.forward_op(REGISTRY_SHARD, op);
        }
        Ok(self.storage_estimate(&user, (bytes, msgs)))
    }

    /// The storage estimate of `user`, whose queues hold `queued` (bytes as the queue bounds
    /// count them, messages), with its media as this shard holds them (all of them at the
    /// registry shard).
    pub(crate) fn storage_estimate(&self, user: &UserUuid, queued: (u64, u64)) -> HttpResponse {
        HttpResponse::json(
            200,
            &StorageEstimate {
                used_bytes: queued.0 + self.media_bytes_of(user),
                quota_bytes: MAX_MEDIA_BYTES_PER_USER
                    .saturating_add(self.config.max_offline_queue_bytes_per_recipient),
                message_count: queued.1,
            },
        )
    }
}
