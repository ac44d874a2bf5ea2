//! Users and friends (PROTOCOL.md §1.2).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::PublicKeyB64;
use crate::ids::{AliasId, ConvId, FriendshipId};
use crate::time::IsoTime;

/// A friendship's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FriendStatus {
    /// Requested, not yet answered.
    Pending,
    /// Both are contacts; a conversation exists.
    Accepted,
    /// The recipient declined.
    Rejected,
}

/// Who sent the friend request, from the caller's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FriendDirection {
    /// The caller sent it.
    Sent,
    /// The caller received it.
    Received,
}

fn conv_id_or_empty<S: Serializer>(id: &Option<ConvId>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(id.as_ref().map_or("", ConvId::as_str))
}

fn conv_id_from_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ConvId>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => ConvId::parse(&s)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// F1 element: one contact as the caller sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FriendProfile {
    /// The friendship.
    pub friendship_id: FriendshipId,
    /// The other account's alias.
    pub alias_id: AliasId,
    /// The other account's nickname.
    pub nickname: String,
    /// State.
    pub status: FriendStatus,
    /// Who asked.
    pub direction: FriendDirection,
    /// The conversation once accepted; encoded as `""` before (absent, null and `""` decode to `None`).
    #[serde(
        default,
        serialize_with = "conv_id_or_empty",
        deserialize_with = "conv_id_from_empty"
    )]
    pub conversation_id: Option<ConvId>,
    /// The other account's X25519 key.
    pub x25519_public_key: PublicKeyB64,
    /// The other account's Ed25519 key.
    pub ed25519_public_key: PublicKeyB64,
    /// When the request was made.
    pub created_at: IsoTime,
}

/// F2 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FriendRequestBody {
    /// Whom to ask.
    pub to_alias_id: AliasId,
}

/// F2 response (clients ignore it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FriendRequestResponse {
    /// The new friendship.
    pub friendship_id: FriendshipId,
    /// Always `pending`.
    pub status: FriendStatus,
}

/// F3 request of iOS's `POST /friends/accept`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptFriendBody {
    /// The friendship to accept.
    pub friendship_id: FriendshipId,
}

/// F3 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptFriendResponse {
    /// The conversation both sides salt their session key with.
    pub conversation_id: ConvId,
}

/// F5 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserProfile {
    /// Alias.
    pub alias_id: AliasId,
    /// Nickname.
    pub nickname: String,
    /// X25519 key.
    pub x25519_public_key: PublicKeyB64,
    /// Ed25519 key.
    pub ed25519_public_key: PublicKeyB64,
}
