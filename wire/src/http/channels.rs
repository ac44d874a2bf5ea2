//! Channels and channel trades (PROTOCOL.md §1.4).

use serde::{Deserialize, Serialize};

use crate::ids::{AliasId, ChannelId, OrderId, PostId};
use crate::time::IsoTime;

/// The caller's role in a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelRole {
    /// Owns the channel; the only role that may post.
    Owner,
    /// Subscribes to it.
    Subscriber,
}

/// A channel as the caller sees it (CH1-CH3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelInfo {
    /// Channel id.
    pub id: ChannelId,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// The caller's role, absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<ChannelRole>,
    /// Whether the caller subscribes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_subscribed: Option<bool>,
    /// Whether the channel is listed for sale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_sale: Option<bool>,
    /// Price in whole USDT; present only when `for_sale` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sale_price: Option<u64>,
    /// The listing's compare-and-swap version (an extension; clients ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

/// A post's format.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum PostType {
    /// Plain text (the web client's default).
    #[default]
    Text,
    /// Markdown (the PWA's choice).
    Markdown,
}

/// A channel post (CH8 element and inside `channel_post` frames).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelPost {
    /// Post id.
    pub id: PostId,
    /// Format.
    #[serde(rename = "type")]
    pub post_type: PostType,
    /// Content (channels are public, not end-to-end encrypted).
    pub content: String,
    /// When it was posted.
    pub created_at: IsoTime,
    /// The owner who posted it.
    pub author_alias_id: AliasId,
}

fn default_true() -> bool {
    true
}

/// CH4 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateChannelRequest {
    /// Name.
    pub name: String,
    /// Description (may be empty).
    #[serde(default)]
    pub description: String,
    /// Whether search finds it (the web client's default is true).
    #[serde(default = "default_true")]
    pub is_public: bool,
}

/// CH4 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateChannelResponse {
    /// The new channel.
    pub channel_id: ChannelId,
}

/// CH7 request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatePostRequest {
    /// Format; `text` when absent.
    #[serde(rename = "type", default)]
    pub post_type: PostType,
    /// Content.
    pub content: String,
}

/// CH7 response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatePostResponse {
    /// The new post.
    pub post_id: PostId,
}

/// CH8 query (an extension: clients send none and get the newest page).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostsQuery {
    /// Only posts older than this post id.
    #[serde(default)]
    pub before: Option<PostId>,
    /// Page size, capped by the relay.
    #[serde(default)]
    pub limit: Option<u32>,
}

/// CH1 and V1 query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchQuery {
    /// The search text; absent and empty mean the same.
    #[serde(default)]
    pub q: Option<String>,
}

/// CH9 request of the web and Android clients (`POST /vanity/list-channel`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListChannelRequest {
    /// The channel to list.
    pub channel_id: ChannelId,
    /// Whole USDT, positive.
    pub price_usdt: u64,
    /// Compare-and-swap: the listing version the caller saw (an extension; when absent the relay
    /// compares against the version current when the request arrives).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
}

/// CH9 request of iOS (`PUT /channels/{id}/forsale`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForSaleRequest {
    /// Whole USDT, positive.
    pub price_usdt: u64,
    /// See [`ListChannelRequest::expected_version`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
}

/// CH9 response (clients ignore it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListChannelResponse {
    /// The channel.
    pub channel_id: ChannelId,
    /// The listed price.
    pub price_usdt: u64,
    /// The listing's new version.
    pub version: u64,
}

/// CH10 and CH11 response: a pending payment order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelTradeOrder {
    /// The order.
    pub order_id: OrderId,
    /// Whole USDT.
    pub price_usdt: u64,
    /// Receiving address.
    pub pay_to: String,
    /// When the order expires.
    pub expired_at: IsoTime,
    /// Hosted payment page (an extension, as for vanity purchases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_url: Option<String>,
}
