//! Proptest strategies shared by the integration tests: every id respects its alphabet and length
//! limits (`ids.rs`), times stay inside what `IsoTime` can render, payloads inside their limits.
#![allow(dead_code)]
// Helpers run only inside tests; clippy.toml's allow-unwrap-in-tests does not see them as such.
#![allow(clippy::unwrap_used)]

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::{Map, Value};
use wire::frames::{
    AckFrame, CallKind, CallSignal, ChannelPostFrame, ErrorFrame, FriendAcceptedFrame,
    FriendRequestFrame, GoawayFrame, MsgDelivery, MsgFrame, PaymentConfirmedFrame, PingFrame,
    ReceiptDelivery, ReceiptFrame, RetractDelivery, RetractFrame, SyncFrame, TypingDelivery,
    TypingFrame, UnknownFrame,
};
use wire::http::{
    AcceptFriendBody, AcceptFriendResponse, ActiveConversation, ActiveConversations,
    AuthChallengeRequest, AuthChallengeResponse, AuthVerifyRequest, AuthVerifyResponse,
    BindRequest, BindResponse, ChannelInfo, ChannelPost, ChannelRole, ChannelTradeOrder,
    ChunkQuery, ChunkResponse, CompleteUploadRequest, CompleteUploadResponse, CompletedPart,
    CreateChannelRequest, CreateChannelResponse, CreatePostRequest, CreatePostResponse,
    DownloadQuery, ForSaleRequest, FriendDirection, FriendProfile, FriendRequestBody,
    FriendRequestResponse, FriendStatus, IceConfig, IceConfigQuery, IcePolicy, IceServer,
    ListChannelRequest, ListChannelResponse, OrderKind, OrderState, OrderStatusResponse,
    PaymentStatus, PaymentWebhook, PostType, PostsQuery, PowChallengeResponse, PublicKeyB64,
    PurchaseOrder, PurchaseRequest, PushKeys, PushPayload, PushRegisterRequest,
    PushSubscribeRequest, RegisterConflict, RegisterRequest, RegisterResponse, RegisteredKey,
    ReserveOrder, SearchQuery, SignatureB64, StorageEstimate, UploadInitRequest,
    UploadInitResponse, UserProfile, VanityItem, VanityTier, VapidKeyResponse, WsTicketResponse,
};
use wire::{
    AliasId, CallId, ChannelId, ClientFrame, ConvId, ErrorBody, ErrorCode, FriendshipId, IsoTime,
    MediaKey, MessageId, OrderId, PostId, Seq, ServerFrame, UnixMs, UploadId, UserUuid,
};

/// The largest instant `IsoTime` renders (9999-12-31T23:59:59.999Z).
pub(crate) const MAX_ISO_MS: u64 = 253_402_300_799_999;

/// Every `type` a client frame can have.
pub(crate) const CLIENT_TYPES: &[&str] = &[
    "sync",
    "ping",
    "msg",
    "delivered",
    "read",
    "typing",
    "retract",
    "call_offer",
    "call_answer",
    "call_ice",
    "call_reject",
    "call_hangup",
    "call_invite",
];

/// Every `type` a server frame can have.
pub(crate) const SERVER_TYPES: &[&str] = &[
    "ack",
    "msg",
    "delivered",
    "read",
    "typing",
    "retract",
    "channel_post",
    "payment_confirmed",
    "friend_request",
    "friend_accepted",
    "goaway",
    "error",
    "call_offer",
    "call_answer",
    "call_ice",
    "call_reject",
    "call_hangup",
    "call_invite",
];

// ---- scalars

/// Any text, including control characters, quotes, backslashes and non-ASCII.
pub(crate) fn text() -> impl Strategy<Value = String> {
    "(?s).{0,24}"
}

pub(crate) fn nonempty_text() -> impl Strategy<Value = String> {
    "(?s).{1,24}"
}

/// A base64-looking opaque payload (the relay never decodes it).
pub(crate) fn payload() -> impl Strategy<Value = String> {
    prop_oneof!["[A-Za-z0-9+/]{0,96}={0,2}", text(),]
}

pub(crate) fn crypto_v() -> impl Strategy<Value = Option<u32>> {
    prop_oneof![
        Just(None),
        Just(Some(1)),
        Just(Some(2)),
        any::<u32>().prop_map(Some)
    ]
}

pub(crate) fn iso_time() -> impl Strategy<Value = IsoTime> {
    prop_oneof![
        (0..=MAX_ISO_MS).prop_map(IsoTime::from_ms),
        Just(IsoTime::from_ms(0)),
        Just(IsoTime::from_ms(MAX_ISO_MS)),
    ]
}

pub(crate) fn unix_ms() -> impl Strategy<Value = UnixMs> {
    any::<u64>().prop_map(UnixMs)
}

pub(crate) fn key() -> impl Strategy<Value = PublicKeyB64> {
    any::<[u8; 32]>().prop_map(PublicKeyB64)
}

pub(crate) fn signature() -> impl Strategy<Value = SignatureB64> {
    proptest::array::uniform::<_, 64>(any::<u8>()).prop_map(SignatureB64)
}

pub(crate) fn error_code() -> impl Strategy<Value = ErrorCode> {
    prop_oneof![
        (0..ErrorCode::ALL.len()).prop_map(|i| ErrorCode::ALL[i].0.clone()),
        "[A-Z_]{1,24}".prop_map(ErrorCode::other),
    ]
}

// ---- ids

pub(crate) fn alias() -> impl Strategy<Value = AliasId> {
    "[a-z0-9_]{3,32}".prop_map(|s| AliasId::parse(&s).unwrap())
}

const TOKEN_128: &str = "[A-Za-z0-9._:-]{1,128}";
const TOKEN_64: &str = "[A-Za-z0-9._:-]{1,64}";

pub(crate) fn conv_id() -> impl Strategy<Value = ConvId> {
    TOKEN_128.prop_map(|s| ConvId::parse(&s).unwrap())
}

pub(crate) fn message_id() -> impl Strategy<Value = MessageId> {
    TOKEN_128.prop_map(|s| MessageId::parse(&s).unwrap())
}

pub(crate) fn call_id() -> impl Strategy<Value = CallId> {
    TOKEN_128.prop_map(|s| CallId::parse(&s).unwrap())
}

pub(crate) fn upload_id() -> impl Strategy<Value = UploadId> {
    TOKEN_128.prop_map(|s| UploadId::parse(&s).unwrap())
}

pub(crate) fn channel_id() -> impl Strategy<Value = ChannelId> {
    TOKEN_64.prop_map(|s| ChannelId::parse(&s).unwrap())
}

pub(crate) fn post_id() -> impl Strategy<Value = PostId> {
    TOKEN_64.prop_map(|s| PostId::parse(&s).unwrap())
}

pub(crate) fn order_id() -> impl Strategy<Value = OrderId> {
    TOKEN_64.prop_map(|s| OrderId::parse(&s).unwrap())
}

pub(crate) fn media_key() -> impl Strategy<Value = MediaKey> {
    "[A-Za-z0-9._:/-]{1,128}".prop_map(|s| MediaKey::parse(&s).unwrap())
}

/// Generated in any case; parsing normalises to lower case.
pub(crate) fn user_uuid() -> impl Strategy<Value = UserUuid> {
    "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
        .prop_map(|s| UserUuid::parse(&s).unwrap())
}

pub(crate) fn seq() -> impl Strategy<Value = Seq> {
    any::<u64>().prop_map(Seq)
}

pub(crate) fn friendship_id() -> impl Strategy<Value = FriendshipId> {
    any::<u64>().prop_map(FriendshipId)
}

// ---- enums

pub(crate) fn call_kind() -> impl Strategy<Value = CallKind> {
    (0..CallKind::ALL.len()).prop_map(|i| CallKind::ALL[i])
}

pub(crate) fn friend_status() -> impl Strategy<Value = FriendStatus> {
    prop_oneof![
        Just(FriendStatus::Pending),
        Just(FriendStatus::Accepted),
        Just(FriendStatus::Rejected)
    ]
}

pub(crate) fn friend_direction() -> impl Strategy<Value = FriendDirection> {
    prop_oneof![Just(FriendDirection::Sent), Just(FriendDirection::Received)]
}

pub(crate) fn post_type() -> impl Strategy<Value = PostType> {
    prop_oneof![Just(PostType::Text), Just(PostType::Markdown)]
}

pub(crate) fn channel_role() -> impl Strategy<Value = ChannelRole> {
    prop_oneof![Just(ChannelRole::Owner), Just(ChannelRole::Subscriber)]
}

pub(crate) fn vanity_tier() -> impl Strategy<Value = VanityTier> {
    prop_oneof![
        Just(VanityTier::Top),
        Just(VanityTier::Premium),
        Just(VanityTier::Standard)
    ]
}

pub(crate) fn order_state() -> impl Strategy<Value = OrderState> {
    prop_oneof![
        Just(OrderState::Pending),
        Just(OrderState::Confirmed),
        Just(OrderState::Expired)
    ]
}

pub(crate) fn order_kind() -> impl Strategy<Value = OrderKind> {
    prop_oneof![
        Just(OrderKind::Vanity),
        Just(OrderKind::ChannelTrade),
        Just(OrderKind::ChannelQuota)
    ]
}

pub(crate) fn payment_status() -> impl Strategy<Value = PaymentStatus> {
    prop_oneof![
        Just(PaymentStatus::Finished),
        Just(PaymentStatus::PartiallyPaid),
        Just(PaymentStatus::Failed)
    ]
}

pub(crate) fn registered_key() -> impl Strategy<Value = RegisteredKey> {
    prop_oneof![Just(RegisteredKey::Ed25519), Just(RegisteredKey::X25519)]
}

pub(crate) fn ice_policy() -> impl Strategy<Value = IcePolicy> {
    prop_oneof![Just(IcePolicy::All), Just(IcePolicy::Relay)]
}

// ---- raw JSON (unknown frames)

pub(crate) fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Floats with few significant digits: serde_json without `float_roundtrip` may parse
        // a 17-digit float one ulp off (see fuzz_corpus.rs `long_floats_...`).
        (any::<i16>(), 0..=8i32).prop_map(|(m, e)| Value::from(f64::from(m) / 2f64.powi(e))),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            vec(("(?s).{0,8}", inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// An unknown frame: `type` first (as decoding keeps it), not one of `known`, plus a few fields.
pub(crate) fn unknown_frame(known: &'static [&'static str]) -> impl Strategy<Value = UnknownFrame> {
    (
        "[a-z_]{0,16}".prop_filter("a known type", move |t| !known.contains(&t.as_str())),
        vec(("[a-z_]{1,10}", json_value()), 0..4),
    )
        .prop_map(|(t, fields)| {
            let mut raw = Map::new();
            raw.insert("type".to_owned(), Value::String(t));
            for (k, v) in fields {
                if k != "type" {
                    raw.insert(k, v);
                }
            }
            UnknownFrame { raw }
        })
}

// ---- frames

pub(crate) fn call_signal() -> impl Strategy<Value = CallSignal> {
    (
        call_kind(),
        alias(),
        call_id(),
        proptest::option::of(alias()),
        crypto_v(),
        payload(),
    )
        .prop_map(|(kind, to, call_id, from, crypto_v, payload)| CallSignal {
            kind,
            to,
            call_id,
            from,
            crypto_v,
            payload,
        })
}

pub(crate) fn receipt_frame() -> impl Strategy<Value = ReceiptFrame> {
    (conv_id(), seq(), alias(), crypto_v()).prop_map(|(conv_id, seq, to, crypto_v)| ReceiptFrame {
        conv_id,
        seq,
        to,
        crypto_v,
    })
}

pub(crate) fn client_frame() -> impl Strategy<Value = ClientFrame> {
    prop_oneof![
        crypto_v().prop_map(|crypto_v| ClientFrame::Sync(SyncFrame { crypto_v })),
        crypto_v().prop_map(|crypto_v| ClientFrame::Ping(PingFrame { crypto_v })),
        (message_id(), alias(), conv_id(), crypto_v(), payload()).prop_map(
            |(id, to, conv_id, crypto_v, payload)| ClientFrame::Msg(MsgFrame {
                id,
                to,
                conv_id,
                crypto_v,
                payload: payload.into()
            })
        ),
        receipt_frame().prop_map(ClientFrame::Delivered),
        receipt_frame().prop_map(ClientFrame::Read),
        (alias(), conv_id(), crypto_v()).prop_map(|(to, conv_id, crypto_v)| {
            ClientFrame::Typing(TypingFrame {
                to,
                conv_id,
                crypto_v,
            })
        }),
        (message_id(), alias(), conv_id(), crypto_v()).prop_map(|(id, to, conv_id, crypto_v)| {
            ClientFrame::Retract(RetractFrame {
                id,
                to,
                conv_id,
                crypto_v,
            })
        }),
        call_signal().prop_map(ClientFrame::Call),
        unknown_frame(CLIENT_TYPES).prop_map(ClientFrame::Unknown),
    ]
}

pub(crate) fn receipt_delivery() -> impl Strategy<Value = ReceiptDelivery> {
    (
        conv_id(),
        seq(),
        proptest::option::of(alias()),
        proptest::option::of(alias()),
    )
        .prop_map(|(conv_id, seq, from, to)| ReceiptDelivery {
            conv_id,
            seq,
            from,
            to,
        })
}

pub(crate) fn channel_post() -> impl Strategy<Value = ChannelPost> {
    (post_id(), post_type(), text(), iso_time(), alias()).prop_map(
        |(id, post_type, content, created_at, author_alias_id)| ChannelPost {
            id,
            post_type,
            content,
            created_at,
            author_alias_id,
        },
    )
}

pub(crate) fn server_frame() -> impl Strategy<Value = ServerFrame> {
    prop_oneof![
        (message_id(), seq()).prop_map(|(id, seq)| ServerFrame::Ack(AckFrame { id, seq })),
        (
            message_id(),
            alias(),
            conv_id(),
            seq(),
            unix_ms(),
            crypto_v(),
            payload()
        )
            .prop_map(|(id, from, conv_id, seq, at, crypto_v, payload)| {
                ServerFrame::Msg(MsgDelivery {
                    id,
                    from,
                    conv_id,
                    seq,
                    at,
                    crypto_v,
                    payload: payload.into(),
                })
            }),
        receipt_delivery().prop_map(ServerFrame::Delivered),
        receipt_delivery().prop_map(ServerFrame::Read),
        (alias(), conv_id())
            .prop_map(|(from, conv_id)| ServerFrame::Typing(TypingDelivery { from, conv_id })),
        (message_id(), alias(), conv_id()).prop_map(|(id, from, conv_id)| {
            ServerFrame::Retract(RetractDelivery { id, from, conv_id })
        }),
        (channel_id(), channel_id(), channel_post()).prop_map(|(conv_id, channel_id, post)| {
            ServerFrame::ChannelPost(ChannelPostFrame {
                conv_id,
                channel_id,
                post,
            })
        }),
        (order_id(), text()).prop_map(|(order_id, ref_id)| {
            ServerFrame::PaymentConfirmed(PaymentConfirmedFrame { order_id, ref_id })
        }),
        (friendship_id(), alias(), text()).prop_map(|(friendship_id, from, nickname)| {
            ServerFrame::FriendRequest(FriendRequestFrame {
                friendship_id,
                from,
                nickname,
            })
        }),
        (friendship_id(), alias(), conv_id()).prop_map(|(friendship_id, from, conversation_id)| {
            ServerFrame::FriendAccepted(FriendAcceptedFrame {
                friendship_id,
                from,
                conversation_id,
            })
        }),
        // An empty reason decodes as "unknown": covered by its own test.
        nonempty_text().prop_map(|reason| ServerFrame::Goaway(GoawayFrame { reason })),
        (
            error_code(),
            text(),
            proptest::option::of(text()),
            proptest::option::of(text())
        )
            .prop_map(|(error, message, ref_type, id)| {
                ServerFrame::Error(ErrorFrame {
                    error,
                    message,
                    ref_type,
                    id,
                })
            }),
        call_signal().prop_map(ServerFrame::Call),
        unknown_frame(SERVER_TYPES).prop_map(ServerFrame::Unknown),
    ]
}

// ---- bodies

pub(crate) fn pow_challenge_response() -> impl Strategy<Value = PowChallengeResponse> {
    (text(), any::<u32>(), any::<u64>()).prop_map(|(challenge_string, difficulty, expires_in)| {
        PowChallengeResponse {
            challenge_string,
            difficulty,
            expires_in,
        }
    })
}

/// `pow_nonce: Some("")` decodes as `None`, so only non-empty nonces are generated.
pub(crate) fn register_request() -> impl Strategy<Value = RegisterRequest> {
    (key(), key(), text(), proptest::option::of(nonempty_text())).prop_map(
        |(ed25519_public_key, x25519_public_key, nickname, pow_nonce)| RegisterRequest {
            ed25519_public_key,
            x25519_public_key,
            nickname,
            pow_nonce,
        },
    )
}

pub(crate) fn register_response() -> impl Strategy<Value = RegisterResponse> {
    (user_uuid(), alias()).prop_map(|(uuid, alias_id)| RegisterResponse { uuid, alias_id })
}

pub(crate) fn register_conflict() -> impl Strategy<Value = RegisterConflict> {
    (error_code(), text(), user_uuid(), alias(), registered_key()).prop_map(
        |(error, message, uuid, alias_id, key)| RegisterConflict {
            error,
            message,
            uuid,
            alias_id,
            key,
        },
    )
}

pub(crate) fn error_body() -> impl Strategy<Value = ErrorBody> {
    (error_code(), text()).prop_map(|(error, message)| ErrorBody { error, message })
}

pub(crate) fn auth_challenge_request() -> impl Strategy<Value = AuthChallengeRequest> {
    user_uuid().prop_map(|user_uuid| AuthChallengeRequest { user_uuid })
}

pub(crate) fn auth_challenge_response() -> impl Strategy<Value = AuthChallengeResponse> {
    (text(), iso_time()).prop_map(|(challenge, expires_at)| AuthChallengeResponse {
        challenge,
        expires_at,
    })
}

pub(crate) fn auth_verify_request() -> impl Strategy<Value = AuthVerifyRequest> {
    (user_uuid(), text(), signature()).prop_map(|(user_uuid, challenge, signature)| {
        AuthVerifyRequest {
            user_uuid,
            challenge,
            signature,
        }
    })
}

pub(crate) fn auth_verify_response() -> impl Strategy<Value = AuthVerifyResponse> {
    (text(), any::<u64>()).prop_map(|(token, expires_in)| AuthVerifyResponse { token, expires_in })
}

pub(crate) fn ws_ticket_response() -> impl Strategy<Value = WsTicketResponse> {
    (text(), any::<u64>()).prop_map(|(ticket, expires_in)| WsTicketResponse { ticket, expires_in })
}

pub(crate) fn friend_profile() -> impl Strategy<Value = FriendProfile> {
    (
        friendship_id(),
        alias(),
        text(),
        friend_status(),
        friend_direction(),
        proptest::option::of(conv_id()),
        key(),
        key(),
        iso_time(),
    )
        .prop_map(
            |(
                friendship_id,
                alias_id,
                nickname,
                status,
                direction,
                conversation_id,
                x25519_public_key,
                ed25519_public_key,
                created_at,
            )| FriendProfile {
                friendship_id,
                alias_id,
                nickname,
                status,
                direction,
                conversation_id,
                x25519_public_key,
                ed25519_public_key,
                created_at,
            },
        )
}

pub(crate) fn friend_request_body() -> impl Strategy<Value = FriendRequestBody> {
    alias().prop_map(|to_alias_id| FriendRequestBody { to_alias_id })
}

pub(crate) fn friend_request_response() -> impl Strategy<Value = FriendRequestResponse> {
    (friendship_id(), friend_status()).prop_map(|(friendship_id, status)| FriendRequestResponse {
        friendship_id,
        status,
    })
}

pub(crate) fn accept_friend_body() -> impl Strategy<Value = AcceptFriendBody> {
    friendship_id().prop_map(|friendship_id| AcceptFriendBody { friendship_id })
}

pub(crate) fn accept_friend_response() -> impl Strategy<Value = AcceptFriendResponse> {
    conv_id().prop_map(|conversation_id| AcceptFriendResponse { conversation_id })
}

pub(crate) fn user_profile() -> impl Strategy<Value = UserProfile> {
    (alias(), text(), key(), key()).prop_map(
        |(alias_id, nickname, x25519_public_key, ed25519_public_key)| UserProfile {
            alias_id,
            nickname,
            x25519_public_key,
            ed25519_public_key,
        },
    )
}

pub(crate) fn active_conversations() -> impl Strategy<Value = ActiveConversations> {
    vec(
        conv_id().prop_map(|conv_id| ActiveConversation { conv_id }),
        0..4,
    )
    .prop_map(|conversations| ActiveConversations { conversations })
}

pub(crate) fn storage_estimate() -> impl Strategy<Value = StorageEstimate> {
    (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
        |(used_bytes, quota_bytes, message_count)| StorageEstimate {
            used_bytes,
            quota_bytes,
            message_count,
        },
    )
}

pub(crate) fn channel_info() -> impl Strategy<Value = ChannelInfo> {
    (
        channel_id(),
        text(),
        text(),
        proptest::option::of(channel_role()),
        proptest::option::of(any::<bool>()),
        proptest::option::of(any::<bool>()),
        proptest::option::of(any::<u64>()),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(
            |(id, name, description, role, is_subscribed, for_sale, sale_price, version)| {
                ChannelInfo {
                    id,
                    name,
                    description,
                    role,
                    is_subscribed,
                    for_sale,
                    sale_price,
                    version,
                }
            },
        )
}

pub(crate) fn create_channel_request() -> impl Strategy<Value = CreateChannelRequest> {
    (text(), text(), any::<bool>()).prop_map(|(name, description, is_public)| {
        CreateChannelRequest {
            name,
            description,
            is_public,
        }
    })
}

pub(crate) fn create_channel_response() -> impl Strategy<Value = CreateChannelResponse> {
    channel_id().prop_map(|channel_id| CreateChannelResponse { channel_id })
}

pub(crate) fn create_post_request() -> impl Strategy<Value = CreatePostRequest> {
    (post_type(), text()).prop_map(|(post_type, content)| CreatePostRequest { post_type, content })
}

pub(crate) fn create_post_response() -> impl Strategy<Value = CreatePostResponse> {
    post_id().prop_map(|post_id| CreatePostResponse { post_id })
}

pub(crate) fn posts_query() -> impl Strategy<Value = PostsQuery> {
    (
        proptest::option::of(post_id()),
        proptest::option::of(any::<u32>()),
    )
        .prop_map(|(before, limit)| PostsQuery { before, limit })
}

pub(crate) fn search_query() -> impl Strategy<Value = SearchQuery> {
    proptest::option::of(text()).prop_map(|q| SearchQuery { q })
}

pub(crate) fn list_channel_request() -> impl Strategy<Value = ListChannelRequest> {
    (
        channel_id(),
        any::<u64>(),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(
            |(channel_id, price_usdt, expected_version)| ListChannelRequest {
                channel_id,
                price_usdt,
                expected_version,
            },
        )
}

pub(crate) fn for_sale_request() -> impl Strategy<Value = ForSaleRequest> {
    (any::<u64>(), proptest::option::of(any::<u64>())).prop_map(|(price_usdt, expected_version)| {
        ForSaleRequest {
            price_usdt,
            expected_version,
        }
    })
}

pub(crate) fn list_channel_response() -> impl Strategy<Value = ListChannelResponse> {
    (channel_id(), any::<u64>(), any::<u64>()).prop_map(|(channel_id, price_usdt, version)| {
        ListChannelResponse {
            channel_id,
            price_usdt,
            version,
        }
    })
}

pub(crate) fn channel_trade_order() -> impl Strategy<Value = ChannelTradeOrder> {
    (
        order_id(),
        any::<u64>(),
        text(),
        iso_time(),
        proptest::option::of(text()),
    )
        .prop_map(|(order_id, price_usdt, pay_to, expired_at, payment_url)| {
            ChannelTradeOrder {
                order_id,
                price_usdt,
                pay_to,
                expired_at,
                payment_url,
            }
        })
}

pub(crate) fn vanity_item() -> impl Strategy<Value = VanityItem> {
    (alias(), any::<u64>(), vanity_tier(), any::<bool>()).prop_map(
        |(alias_id, price_usdt, tier, is_featured)| VanityItem {
            alias_id,
            price_usdt,
            tier,
            is_featured,
        },
    )
}

pub(crate) fn purchase_request() -> impl Strategy<Value = PurchaseRequest> {
    alias().prop_map(|alias_id| PurchaseRequest { alias_id })
}

pub(crate) fn purchase_order() -> impl Strategy<Value = PurchaseOrder> {
    (
        order_id(),
        alias(),
        any::<u64>(),
        any::<u64>(),
        text(),
        proptest::option::of(text()),
        iso_time(),
    )
        .prop_map(
            |(order_id, alias_id, price_usdt, amount_usdt, payment_url, pay_to, expired_at)| {
                PurchaseOrder {
                    order_id,
                    alias_id,
                    price_usdt,
                    amount_usdt,
                    payment_url,
                    pay_to,
                    expired_at,
                }
            },
        )
}

pub(crate) fn bind_request() -> impl Strategy<Value = BindRequest> {
    order_id().prop_map(|order_id| BindRequest { order_id })
}

pub(crate) fn bind_response() -> impl Strategy<Value = BindResponse> {
    alias().prop_map(|alias_id| BindResponse { alias_id })
}

pub(crate) fn reserve_order() -> impl Strategy<Value = ReserveOrder> {
    (
        order_id(),
        alias(),
        any::<u64>(),
        any::<u64>(),
        text(),
        iso_time(),
    )
        .prop_map(
            |(order_id, alias_id, price_usdt, price, pay_to, expired_at)| ReserveOrder {
                order_id,
                alias_id,
                price_usdt,
                price,
                pay_to,
                expired_at,
            },
        )
}

pub(crate) fn order_status_response() -> impl Strategy<Value = OrderStatusResponse> {
    (order_state(), text(), order_kind(), text()).prop_map(|(status, alias_id, kind, ref_id)| {
        OrderStatusResponse {
            status,
            alias_id,
            kind,
            ref_id,
        }
    })
}

pub(crate) fn payment_webhook() -> impl Strategy<Value = PaymentWebhook> {
    (text(), order_id(), payment_status(), any::<u64>()).prop_map(
        |(payment_id, order_id, payment_status, paid_usdt)| PaymentWebhook {
            payment_id,
            order_id,
            payment_status,
            paid_usdt,
        },
    )
}

pub(crate) fn upload_init_request() -> impl Strategy<Value = UploadInitRequest> {
    text().prop_map(|content_type| UploadInitRequest { content_type })
}

pub(crate) fn upload_init_response() -> impl Strategy<Value = UploadInitResponse> {
    (upload_id(), media_key()).prop_map(|(upload_id, media_key)| UploadInitResponse {
        upload_id,
        media_key,
    })
}

pub(crate) fn chunk_query() -> impl Strategy<Value = ChunkQuery> {
    (media_key(), any::<u32>()).prop_map(|(media_key, part_number)| ChunkQuery {
        media_key,
        part_number,
    })
}

pub(crate) fn chunk_response() -> impl Strategy<Value = ChunkResponse> {
    text().prop_map(|etag| ChunkResponse { etag })
}

pub(crate) fn complete_upload_request() -> impl Strategy<Value = CompleteUploadRequest> {
    (
        media_key(),
        vec(
            (text(), any::<u32>())
                .prop_map(|(etag, part_number)| CompletedPart { etag, part_number }),
            0..4,
        ),
    )
        .prop_map(|(media_key, parts)| CompleteUploadRequest { media_key, parts })
}

pub(crate) fn complete_upload_response() -> impl Strategy<Value = CompleteUploadResponse> {
    (media_key(), any::<u64>())
        .prop_map(|(media_key, size)| CompleteUploadResponse { media_key, size })
}

pub(crate) fn download_query() -> impl Strategy<Value = DownloadQuery> {
    media_key().prop_map(|key| DownloadQuery { key })
}

pub(crate) fn vapid_key_response() -> impl Strategy<Value = VapidKeyResponse> {
    text().prop_map(|vapid_public_key| VapidKeyResponse { vapid_public_key })
}

pub(crate) fn push_subscribe_request() -> impl Strategy<Value = PushSubscribeRequest> {
    (text(), text(), text()).prop_map(|(endpoint, p256dh, auth)| PushSubscribeRequest {
        endpoint,
        keys: PushKeys { p256dh, auth },
    })
}

pub(crate) fn push_register_request() -> impl Strategy<Value = PushRegisterRequest> {
    (
        proptest::option::of(text()),
        proptest::option::of(text()),
        text(),
    )
        .prop_map(|(token, device_token, platform)| PushRegisterRequest {
            token,
            device_token,
            platform,
        })
}

pub(crate) fn push_payload() -> impl Strategy<Value = PushPayload> {
    text().prop_map(|kind| PushPayload { kind })
}

pub(crate) fn ice_config_query() -> impl Strategy<Value = IceConfigQuery> {
    proptest::option::of(text()).prop_map(|mode| IceConfigQuery { mode })
}

pub(crate) fn ice_server() -> impl Strategy<Value = IceServer> {
    (
        vec(text(), 0..3),
        proptest::option::of(text()),
        proptest::option::of(text()),
    )
        .prop_map(|(urls, username, credential)| IceServer {
            urls,
            username,
            credential,
        })
}

pub(crate) fn ice_config() -> impl Strategy<Value = IceConfig> {
    (any::<u64>(), ice_policy(), vec(ice_server(), 0..3)).prop_map(
        |(ttl, ice_transport_policy, ice_servers)| IceConfig {
            ttl,
            ice_transport_policy,
            ice_servers,
        },
    )
}
