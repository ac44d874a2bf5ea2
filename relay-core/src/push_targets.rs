//! Push targets: what an account registered to be woken by (a Web Push subscription or a
//! native token), stored per account, and how many each may keep. The rules are in `push`;
//! the writes on the working state in `state::push`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use wire::{UnixMs, UserUuid};

/// Where the shell delivers a push.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PushTarget {
    /// A Web Push subscription (RFC 8030 / 8291 / 8292): encrypt the payload for `p256dh` /
    /// `auth` (aes128gcm) and POST it to `endpoint` with a VAPID signature.
    WebPush {
        /// The push service URL (`https://…`); it is a capability: never log it.
        endpoint: String,
        /// The browser's P-256 public key, base64url as the browser sent it.
        p256dh: String,
        /// The 16-byte auth secret, base64url as the browser sent it.
        auth: String,
    },
    /// A Firebase Cloud Messaging registration token (Android): send a data message.
    Fcm {
        /// The token.
        token: String,
    },
    /// An Apple Push Notification service device token (iOS).
    Apns {
        /// The token.
        token: String,
    },
}

impl PushTarget {
    pub(crate) fn same_destination(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::WebPush { endpoint: a, .. }, Self::WebPush { endpoint: b, .. }) => a == b,
            (Self::Fcm { token: a }, Self::Fcm { token: b })
            | (Self::Apns { token: a }, Self::Apns { token: b }) => a == b,
            _ => false,
        }
    }

    /// `web_push`, `fcm` or `apns`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::WebPush { .. } => "web_push",
            Self::Fcm { .. } => "fcm",
            Self::Apns { .. } => "apns",
        }
    }
}

impl std::fmt::Debug for PushTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PushTarget::{}(<redacted>)", self.kind())
    }
}

/// The push targets of one account, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PushRow {
    pub(crate) user: UserUuid,
    pub(crate) targets: Vec<PushTarget>,
}

/// Push targets by account, and the last push per account (memory only).
#[derive(Default)]
pub(crate) struct PushState {
    pub(crate) targets: BTreeMap<UserUuid, Vec<PushTarget>>,
    pub(crate) last_push: BTreeMap<UserUuid, UnixMs>,
}

impl std::fmt::Debug for PushState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushState")
            .field("accounts", &self.targets.len())
            .finish_non_exhaustive()
    }
}
