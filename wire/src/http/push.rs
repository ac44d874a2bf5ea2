//! Push subscriptions and the push payload (PROTOCOL.md §1.7).

use serde::{Deserialize, Serialize};

/// P1 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VapidKeyResponse {
    /// The VAPID public key, base64url.
    pub vapid_public_key: String,
}

/// The keys of a Web Push subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushKeys {
    /// The browser's P-256 public key, base64url.
    pub p256dh: String,
    /// The auth secret, base64url.
    pub auth: String,
}

/// P2 request: `PushSubscription.toJSON()`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushSubscribeRequest {
    /// The push service URL.
    pub endpoint: String,
    /// Encryption keys.
    pub keys: PushKeys,
}

/// P3 request: a native token (`token` from Android, `device_token` from iOS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushRegisterRequest {
    /// FCM token (Android).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// APNs token (iOS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_token: Option<String>,
    /// `android` or `ios`.
    pub platform: String,
}

/// The only push payload the relay ever sends: `{"type":"new_msg"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushPayload {
    /// Always `new_msg`.
    #[serde(rename = "type")]
    pub kind: String,
}

impl PushPayload {
    /// `{"type":"new_msg"}`.
    pub fn new_msg() -> Self {
        Self {
            kind: "new_msg".to_owned(),
        }
    }
}
