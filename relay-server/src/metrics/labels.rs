//! The metrics' labels: every value is one of a closed set of fixed names (no account, alias,
//! id, token or address ever becomes a label), and the mappings from the relay's frames, error
//! codes and close reasons to them.

use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use relay_core::CloseReason;
use wire::{ClientFrame, ErrorCode, ServerFrame};

/// Declares a label whose values are a closed set of fixed names.
macro_rules! label_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
        pub enum $name {
            $(
                #[doc = concat!("`", $text, "`")]
                $variant,
            )+
        }

        impl $name {
            /// Every value, as exported.
            pub const ALL: &'static [&'static str] = &[$($text),+];

            /// The exported name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                encoder.write_str(self.as_str())
            }
        }
    };
}

label_enum! {
    /// A WebSocket frame's type (a client's unknown types are one value, never their text).
    FrameKind {
        Sync => "sync", Ping => "ping", Msg => "msg", Ack => "ack", Delivered => "delivered",
        Read => "read", Typing => "typing", Retract => "retract", Call => "call",
        ChannelPost => "channel_post", PaymentConfirmed => "payment_confirmed",
        FriendRequest => "friend_request", FriendAccepted => "friend_accepted",
        Goaway => "goaway", Error => "error", Unknown => "unknown", Undecodable => "undecodable",
    }
}

label_enum! {
    /// Why a WebSocket ended.
    CloseKind {
        Goaway => "goaway", Idle => "idle", StorageFailure => "storage_failure",
        StorageUnavailable => "storage_unavailable",
        RateLimited => "rate_limited", TooSlow => "too_slow", Shutdown => "shutdown",
        NotLeader => "not_leader", ClientGone => "client_gone",
    }
}

label_enum! {
    /// Why a `msg` was refused (its error frame's code).
    Refusal {
        NotAMember => "not_a_member", BadFrame => "bad_frame", AlreadyExists => "already_exists",
        RateLimited => "rate_limited", QueueFull => "queue_full",
        RecipientQueueFull => "recipient_queue_full", SenderQueueFull => "sender_queue_full",
        RelayQueueFull => "relay_queue_full", StorageUnavailable => "storage_unavailable",
        Other => "other",
    }
}

label_enum! {
    /// Whether a message's recipient was connected when it was accepted.
    Recipient { Online => "online", Offline => "offline" }
}

label_enum! {
    /// What a payment webhook did.
    WebhookResult {
        Applied => "applied", Duplicate => "duplicate", BadSignature => "bad_signature",
        Invalid => "invalid", UnknownOrder => "unknown_order",
    }
}

label_enum! {
    /// An HTTP status class.
    StatusClass { S2xx => "2xx", S3xx => "3xx", S4xx => "4xx", S5xx => "5xx", Other => "other" }
}

label_enum! {
    /// A WebSocket limit (HTTP routes are named by their template instead).
    WsLimit { Msg => "ws:msg", Call => "ws:call", Frames => "ws:frames" }
}

label_enum! {
    /// A store operation.
    StoreOp { Commit => "commit", Load => "load", Read => "read" }
}

label_enum! {
    /// A store error's kind.
    StoreErrorKind { Fenced => "fenced", Backend => "backend", SchemaVersion => "schema_version" }
}

label_enum! {
    /// A connection cap.
    Cap { Total => "total", PerAddress => "per_address" }
}

label_enum! {
    /// A push service.
    PushService { WebPush => "web_push", Fcm => "fcm", Apns => "apns" }
}

label_enum! {
    /// What happened to a push.
    PushResult {
        Delivered => "delivered", Gone => "gone", Failed => "failed", GaveUp => "gave_up",
        QueueFull => "queue_full", Unconfigured => "unconfigured",
        GoneReportDropped => "gone_report_dropped",
    }
}

label_enum! {
    /// How the shards a cluster node serves changed.
    ShardMove { Gained => "gained", Lost => "lost", HandedOver => "handed_over" }
}

label_enum! {
    /// What a cluster node passed on to the node serving its shard.
    PassedKind { Request => "request", Upgrade => "upgrade" }
}

label_enum! {
    /// Whether the node it was passed on to answered (`no_answer`: refused 503 here).
    PassedResult { Answered => "answered", NoAnswer => "no_answer" }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct MoveLabels {
    pub(super) change: ShardMove,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PassedLabels {
    pub(super) kind: PassedKind,
    pub(super) result: PassedResult,
}

/// Every label value the metrics can carry: the enums above, route templates
/// ([`relay_core::http::ROUTE_NAMES`]) and the build's version.
pub const LABEL_VALUES: &[&[&str]] = &[
    FrameKind::ALL,
    CloseKind::ALL,
    Refusal::ALL,
    Recipient::ALL,
    WebhookResult::ALL,
    StatusClass::ALL,
    WsLimit::ALL,
    StoreOp::ALL,
    StoreErrorKind::ALL,
    Cap::ALL,
    PushService::ALL,
    PushResult::ALL,
    ShardMove::ALL,
    PassedKind::ALL,
    PassedResult::ALL,
    relay_core::http::ROUTE_NAMES,
    &[env!("CARGO_PKG_VERSION")],
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct FrameLabels {
    pub(super) frame: FrameKind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CloseLabels {
    pub(super) reason: CloseKind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RefusalLabels {
    pub(super) reason: Refusal,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RecipientLabels {
    pub(super) recipient: Recipient,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct WebhookLabels {
    pub(super) result: WebhookResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct HttpLabels {
    pub(super) route: &'static str,
    pub(super) status: StatusClass,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LimitLabels {
    pub(super) route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct StoreErrorLabels {
    pub(super) op: StoreOp,
    pub(super) kind: StoreErrorKind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CapLabels {
    pub(super) cap: Cap,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PushLabels {
    pub(super) service: PushService,
    pub(super) result: PushResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ServiceLabels {
    pub(super) service: PushService,
}

/// A core's shard (below the relay's shard count: a bounded set, never about anyone).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ShardLabels {
    pub(super) shard: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct VersionLabels {
    pub(super) version: &'static str,
}

/// The families the server updates as it runs.
pub(super) fn client_kind(frame: &ClientFrame) -> FrameKind {
    match frame {
        ClientFrame::Sync(_) => FrameKind::Sync,
        ClientFrame::Ping(_) => FrameKind::Ping,
        ClientFrame::Msg(_) => FrameKind::Msg,
        ClientFrame::Delivered(_) => FrameKind::Delivered,
        ClientFrame::Read(_) => FrameKind::Read,
        ClientFrame::Typing(_) => FrameKind::Typing,
        ClientFrame::Retract(_) => FrameKind::Retract,
        ClientFrame::Call(_) => FrameKind::Call,
        ClientFrame::Unknown(_) => FrameKind::Unknown,
    }
}

pub(super) fn server_kind(frame: &ServerFrame) -> FrameKind {
    match frame {
        ServerFrame::Ack(_) => FrameKind::Ack,
        ServerFrame::Msg(_) => FrameKind::Msg,
        ServerFrame::Delivered(_) => FrameKind::Delivered,
        ServerFrame::Read(_) => FrameKind::Read,
        ServerFrame::Typing(_) => FrameKind::Typing,
        ServerFrame::Retract(_) => FrameKind::Retract,
        ServerFrame::ChannelPost(_) => FrameKind::ChannelPost,
        ServerFrame::PaymentConfirmed(_) => FrameKind::PaymentConfirmed,
        ServerFrame::FriendRequest(_) => FrameKind::FriendRequest,
        ServerFrame::FriendAccepted(_) => FrameKind::FriendAccepted,
        ServerFrame::Goaway(_) => FrameKind::Goaway,
        ServerFrame::Error(_) => FrameKind::Error,
        ServerFrame::Call(_) => FrameKind::Call,
        ServerFrame::Unknown(_) => FrameKind::Unknown,
    }
}

pub(super) fn refusal(code: &ErrorCode) -> Refusal {
    [
        (ErrorCode::NOT_A_MEMBER, Refusal::NotAMember),
        (ErrorCode::BAD_FRAME, Refusal::BadFrame),
        (ErrorCode::ALREADY_EXISTS, Refusal::AlreadyExists),
        (ErrorCode::RATE_LIMITED, Refusal::RateLimited),
        (ErrorCode::QUEUE_FULL, Refusal::QueueFull),
        (ErrorCode::RECIPIENT_QUEUE_FULL, Refusal::RecipientQueueFull),
        (ErrorCode::SENDER_QUEUE_FULL, Refusal::SenderQueueFull),
        (ErrorCode::RELAY_QUEUE_FULL, Refusal::RelayQueueFull),
        (ErrorCode::STORAGE_UNAVAILABLE, Refusal::StorageUnavailable),
    ]
    .into_iter()
    .find_map(|(c, r)| (c == *code).then_some(r))
    .unwrap_or(Refusal::Other)
}

/// The close reason of a relay output, as a label.
pub(crate) fn close_kind(reason: CloseReason) -> CloseKind {
    match reason {
        CloseReason::Goaway => CloseKind::Goaway,
        CloseReason::Idle => CloseKind::Idle,
        CloseReason::StorageFailure => CloseKind::StorageFailure,
        CloseReason::RateLimited => CloseKind::RateLimited,
        CloseReason::StorageUnavailable => CloseKind::StorageUnavailable,
    }
}
