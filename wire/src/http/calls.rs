//! Call ICE configuration (PROTOCOL.md §1.8).

use serde::{Deserialize, Deserializer, Serialize};

/// K1 query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IceConfigQuery {
    /// `relay` asks for TURN-only servers.
    #[serde(default)]
    pub mode: Option<String>,
}

/// ICE transport policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IcePolicy {
    /// Any candidate.
    All,
    /// TURN only.
    Relay,
}

/// One ICE server. `urls` is always encoded as an array; decoding also accepts a single string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IceServer {
    /// `stun:` / `turn:` / `turns:` URLs.
    #[serde(deserialize_with = "string_or_seq")]
    pub urls: Vec<String>,
    /// TURN username (coturn REST: `<expiry>:<alias>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// TURN credential (coturn REST: base64 HMAC-SHA1 of the username).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
}

fn string_or_seq<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

/// K1 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IceConfig {
    /// Seconds the credentials stay valid.
    pub ttl: u64,
    /// Policy.
    pub ice_transport_policy: IcePolicy,
    /// Servers.
    pub ice_servers: Vec<IceServer>,
}
