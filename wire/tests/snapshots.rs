//! Snapshots of the exact JSON of every frame (both directions, every call kind) and every HTTP
//! body. A changed snapshot is a wire change: review key order and field names before accepting.
// Value builders run only inside tests; allow-unwrap-in-tests does not see helpers as tests.
#![allow(clippy::unwrap_used)]

use serde::Serialize;
use wire::frames::{
    AckFrame, CRYPTO_V_CALL, CRYPTO_V_MESSAGE, CallKind, CallSignal, ChannelPostFrame, ErrorFrame,
    FriendAcceptedFrame, FriendRequestFrame, GoawayFrame, MsgDelivery, MsgFrame,
    PaymentConfirmedFrame, PingFrame, ReceiptDelivery, ReceiptFrame, RetractDelivery, RetractFrame,
    SyncFrame, TypingDelivery, TypingFrame, UnknownFrame, goaway_reason,
};
use wire::http::{
    AcceptFriendBody, AcceptFriendResponse, ActiveConversation, ActiveConversations,
    AuthChallengeRequest, AuthChallengeResponse, AuthVerifyRequest, AuthVerifyResponse,
    BindRequest, BindResponse, ChannelInfo, ChannelPost, ChannelRole, ChannelTradeOrder,
    ChunkQuery, ChunkResponse, CompleteUploadRequest, CompleteUploadResponse, CompletedPart,
    CreateChannelRequest, CreateChannelResponse, CreatePostRequest, CreatePostResponse,
    DownloadQuery, Empty, ForSaleRequest, FriendDirection, FriendProfile, FriendRequestBody,
    FriendRequestResponse, FriendStatus, IceConfig, IceConfigQuery, IcePolicy, IceServer,
    ListChannelRequest, ListChannelResponse, OkResponse, OrderKind, OrderState,
    OrderStatusResponse, PaymentStatus, PaymentWebhook, PostType, PostsQuery, PowChallengeResponse,
    PublicKeyB64, PurchaseOrder, PurchaseRequest, PushKeys, PushPayload, PushRegisterRequest,
    PushSubscribeRequest, RegisterConflict, RegisterRequest, RegisterResponse, RegisteredKey,
    ReserveOrder, SearchQuery, SignatureB64, StorageEstimate, UploadInitRequest,
    UploadInitResponse, UserProfile, VanityItem, VanityTier, VapidKeyResponse, WsTicketResponse,
};
use wire::{
    AliasId, CallId, ChannelId, ClientFrame, ConvId, ErrorBody, ErrorCode, FriendshipId, IsoTime,
    MediaKey, MessageId, OrderId, PostId, Seq, ServerFrame, UnixMs, UploadId, UserUuid,
};

const ED: &str = "fC5586FwH7Koaiwko/34Y0t6rYCIbAwKUm1E0j/o4Zo=";
const X: &str = "NJiwxcmC9F8mDvwpB5BKRkxowvlTRypDqFrNCtPulgM=";
const PAYLOAD: &str = "q83vEjRWeJASNFZ4kBI0VniQEjRWeJASNFZ4kA==";
const CALL_PAYLOAD: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// 2026-11-21T21:49:36.370Z
const AT: u64 = 1_795_297_776_370;

fn alias(s: &str) -> AliasId {
    AliasId::parse_alias(s).unwrap()
}

fn conv() -> ConvId {
    ConvId::parse("c-7f3a9d2e").unwrap()
}

fn mid() -> MessageId {
    MessageId::parse("local-k3j9x2m1q").unwrap()
}

fn uuid() -> UserUuid {
    UserUuid::parse("0f8fad5b-d9cb-469f-a165-70867728950e").unwrap()
}

fn key(b64: &str) -> PublicKeyB64 {
    PublicKeyB64::parse(b64).unwrap()
}

fn media_key() -> MediaKey {
    MediaKey::parse("media/9c1e4b7a2f").unwrap()
}

fn channel() -> ChannelId {
    ChannelId::parse("ch_abc123").unwrap()
}

fn order() -> OrderId {
    OrderId::parse("ord_abc123").unwrap()
}

fn time() -> IsoTime {
    IsoTime::from_ms(AT)
}

fn snap_body<T: Serialize>(name: &str, body: &T) {
    insta::assert_snapshot!(name, serde_json::to_string(body).unwrap());
}

fn snap_client(name: &str, frame: &ClientFrame) {
    let text = frame.encode();
    assert_eq!(&ClientFrame::decode(&text).unwrap(), frame, "{name}");
    insta::assert_snapshot!(name, text);
}

fn snap_server(name: &str, frame: &ServerFrame) {
    let text = frame.encode();
    assert_eq!(&ServerFrame::decode(&text).unwrap(), frame, "{name}");
    insta::assert_snapshot!(name, text);
}

fn call(kind: CallKind, to: &str, from: &str) -> CallSignal {
    CallSignal {
        kind,
        to: alias(to),
        call_id: CallId::parse("5b1d7c2e-8f4a-4e6b-9a3c-1d2e3f4a5b6c").unwrap(),
        from: Some(alias(from)),
        crypto_v: Some(CRYPTO_V_CALL),
        payload: CALL_PAYLOAD.to_owned(),
    }
}

fn msg_frame() -> ClientFrame {
    ClientFrame::Msg(MsgFrame {
        id: mid(),
        to: alias("u87654321"),
        conv_id: conv(),
        crypto_v: Some(CRYPTO_V_MESSAGE),
        payload: PAYLOAD.to_owned().into(),
    })
}

// ---------------------------------------------------------------------------------------------
// client -> server

#[test]
fn client_frames() {
    snap_client(
        "client_sync",
        &ClientFrame::Sync(SyncFrame {
            crypto_v: Some(CRYPTO_V_MESSAGE),
        }),
    );
    snap_client("client_ping", &ClientFrame::Ping(PingFrame::default()));
    snap_client(
        "client_ping_crypto_v",
        &ClientFrame::Ping(PingFrame {
            crypto_v: Some(CRYPTO_V_MESSAGE),
        }),
    );
    snap_client("client_msg", &msg_frame());
    let receipt = ReceiptFrame {
        conv_id: conv(),
        seq: Seq(42),
        to: alias("u87654321"),
        crypto_v: Some(CRYPTO_V_MESSAGE),
    };
    snap_client("client_delivered", &ClientFrame::Delivered(receipt.clone()));
    snap_client("client_read", &ClientFrame::Read(receipt));
    snap_client(
        "client_typing",
        &ClientFrame::Typing(TypingFrame {
            to: alias("u87654321"),
            conv_id: conv(),
            crypto_v: Some(CRYPTO_V_MESSAGE),
        }),
    );
    snap_client(
        "client_retract",
        &ClientFrame::Retract(RetractFrame {
            id: mid(),
            to: alias("u87654321"),
            conv_id: conv(),
            crypto_v: Some(CRYPTO_V_MESSAGE),
        }),
    );
    for kind in CallKind::ALL {
        snap_client(
            &format!("client_{}", kind.as_str()),
            &ClientFrame::Call(call(kind, "u87654321", "u12345678")),
        );
    }
    let legacy = serde_json::json!({
        "type": "message", "id": "3F2504E0-4F89-11D3-9A0C-0305E82C3301", "from": "",
        "to": "u87654321", "conv_id": "c-7f3a9d2e", "text": PAYLOAD, "time": AT,
    });
    let serde_json::Value::Object(raw) = legacy else {
        unreachable!()
    };
    snap_client(
        "client_unknown",
        &ClientFrame::Unknown(UnknownFrame { raw }),
    );
}

// ---------------------------------------------------------------------------------------------
// server -> client

#[test]
fn server_frames() {
    snap_server(
        "server_ack",
        &ServerFrame::Ack(AckFrame {
            id: mid(),
            seq: Seq(42),
        }),
    );
    snap_server(
        "server_msg",
        &ServerFrame::Msg(MsgDelivery {
            id: mid(),
            from: alias("u12345678"),
            conv_id: conv(),
            seq: Seq(42),
            at: UnixMs(AT),
            crypto_v: Some(CRYPTO_V_MESSAGE),
            payload: PAYLOAD.to_owned().into(),
        }),
    );
    let receipt = ReceiptDelivery {
        conv_id: conv(),
        seq: Seq(42),
        from: Some(alias("u87654321")),
        to: Some(alias("u12345678")),
    };
    snap_server("server_delivered", &ServerFrame::Delivered(receipt.clone()));
    snap_server("server_read", &ServerFrame::Read(receipt));
    snap_server(
        "server_typing",
        &ServerFrame::Typing(TypingDelivery {
            from: alias("u12345678"),
            conv_id: conv(),
        }),
    );
    snap_server(
        "server_retract",
        &ServerFrame::Retract(RetractDelivery {
            id: mid(),
            from: alias("u12345678"),
            conv_id: conv(),
        }),
    );
    snap_server(
        "server_channel_post",
        &ServerFrame::ChannelPost(ChannelPostFrame {
            conv_id: channel(),
            channel_id: channel(),
            post: ChannelPost {
                id: PostId::parse("post_9f8e7d").unwrap(),
                post_type: PostType::Markdown,
                content: "**Hello** subscribers".to_owned(),
                created_at: time(),
                author_alias_id: alias("u12345678"),
            },
        }),
    );
    snap_server(
        "server_payment_confirmed",
        &ServerFrame::PaymentConfirmed(PaymentConfirmedFrame {
            order_id: order(),
            ref_id: "88888888".to_owned(),
        }),
    );
    snap_server(
        "server_friend_request",
        &ServerFrame::FriendRequest(FriendRequestFrame {
            friendship_id: FriendshipId(17),
            from: alias("u12345678"),
            nickname: "Alice".to_owned(),
        }),
    );
    snap_server(
        "server_friend_accepted",
        &ServerFrame::FriendAccepted(FriendAcceptedFrame {
            friendship_id: FriendshipId(17),
            from: alias("u87654321"),
            conversation_id: conv(),
        }),
    );
    snap_server(
        "server_goaway",
        &ServerFrame::Goaway(GoawayFrame {
            reason: goaway_reason::NEW_DEVICE_LOGIN.to_owned(),
        }),
    );
    snap_server(
        "server_error",
        &ServerFrame::Error(ErrorFrame {
            error: ErrorCode::PAYLOAD_TOO_LARGE,
            message: "msg payload is 49153 bytes, the limit is 49152 bytes (MAX_MSG_PAYLOAD_BYTES)"
                .to_owned(),
            ref_type: Some("msg".to_owned()),
            id: Some(mid().into_string()),
        }),
    );
    for kind in CallKind::ALL {
        snap_server(
            &format!("server_{}", kind.as_str()),
            &ServerFrame::Call(call(kind, "u12345678", "u87654321")),
        );
    }
    let serde_json::Value::Object(raw) = serde_json::json!({"type": "pong", "t": AT}) else {
        unreachable!()
    };
    snap_server(
        "server_unknown",
        &ServerFrame::Unknown(UnknownFrame { raw }),
    );
}

// ---------------------------------------------------------------------------------------------
// exact strings the reference clients depend on

#[test]
fn msg_has_the_web_clients_key_order() {
    assert_eq!(
        msg_frame().encode(),
        format!(
            r#"{{"type":"msg","id":"local-k3j9x2m1q","to":"u87654321","conv_id":"c-7f3a9d2e","crypto_v":1,"payload":"{PAYLOAD}"}}"#
        )
    );
}

#[test]
fn goaway_carries_the_reason_at_top_level_and_in_payload() {
    for reason in [
        goaway_reason::NEW_DEVICE_LOGIN,
        goaway_reason::SESSION_REPLACED,
        goaway_reason::JWT_REVOKED,
        goaway_reason::SERVER_SHUTDOWN,
    ] {
        let frame = ServerFrame::Goaway(GoawayFrame {
            reason: reason.to_owned(),
        });
        assert_eq!(
            frame.encode(),
            format!(r#"{{"type":"goaway","reason":"{reason}","payload":{{"reason":"{reason}"}}}}"#)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP bodies

#[test]
fn registration_and_auth_bodies() {
    snap_body(
        "pow_challenge_response",
        &PowChallengeResponse {
            challenge_string: "pow-3c9f1a7e5b2d4c6a".to_owned(),
            difficulty: 4,
            expires_in: 300,
        },
    );
    snap_body(
        "register_request",
        &RegisterRequest {
            ed25519_public_key: key(ED),
            x25519_public_key: key(X),
            nickname: "Alice".to_owned(),
            pow_nonce: Some("48213".to_owned()),
        },
    );
    snap_body(
        "register_request_without_nonce",
        &RegisterRequest {
            ed25519_public_key: key(ED),
            x25519_public_key: key(X),
            nickname: "Alice".to_owned(),
            pow_nonce: None,
        },
    );
    snap_body(
        "register_response",
        &RegisterResponse {
            uuid: uuid(),
            alias_id: alias("u12345678"),
        },
    );
    snap_body(
        "register_conflict",
        &RegisterConflict {
            error: ErrorCode::ALREADY_REGISTERED,
            message: "this ed25519 key is already registered".to_owned(),
            uuid: uuid(),
            alias_id: alias("u12345678"),
            key: RegisteredKey::Ed25519,
        },
    );
    snap_body(
        "error_body",
        &ErrorBody::new(
            ErrorCode::QUOTA_EXCEEDED,
            "QUOTA_EXCEEDED: the free channel quota is used up",
        ),
    );
    snap_body(
        "auth_challenge_request",
        &AuthChallengeRequest { user_uuid: uuid() },
    );
    snap_body(
        "auth_challenge_response",
        &AuthChallengeResponse {
            challenge: "auth-8d2f6b1c9e3a7f4d".to_owned(),
            expires_at: IsoTime::from_ms(AT + 300_000),
        },
    );
    snap_body(
        "auth_verify_request",
        &AuthVerifyRequest {
            user_uuid: uuid(),
            challenge: "auth-8d2f6b1c9e3a7f4d".to_owned(),
            signature: SignatureB64(core::array::from_fn(|i| i as u8)),
        },
    );
    snap_body(
        "auth_verify_response",
        &AuthVerifyResponse {
            token: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1MTIzNDU2NzgifQ.c2lnbmF0dXJl".to_owned(),
            expires_in: 86_400,
        },
    );
    snap_body(
        "ws_ticket_response",
        &WsTicketResponse {
            ticket: "tk_Zm9vYmFyYmF6cXV4".to_owned(),
            expires_in: 30,
        },
    );
    snap_body("empty", &Empty {});
    snap_body("ok_response", &OkResponse::OK);
}

#[test]
fn friend_and_user_bodies() {
    snap_body(
        "friend_profile_accepted",
        &FriendProfile {
            friendship_id: FriendshipId(17),
            alias_id: alias("u87654321"),
            nickname: "Bob".to_owned(),
            status: FriendStatus::Accepted,
            direction: FriendDirection::Sent,
            conversation_id: Some(conv()),
            x25519_public_key: key(X),
            ed25519_public_key: key(ED),
            created_at: time(),
        },
    );
    snap_body(
        "friend_profile_pending",
        &FriendProfile {
            friendship_id: FriendshipId(18),
            alias_id: alias("88888888"),
            nickname: "Carol".to_owned(),
            status: FriendStatus::Pending,
            direction: FriendDirection::Received,
            conversation_id: None,
            x25519_public_key: key(X),
            ed25519_public_key: key(ED),
            created_at: time(),
        },
    );
    snap_body(
        "friend_request_body",
        &FriendRequestBody {
            to_alias_id: alias("u87654321"),
        },
    );
    snap_body(
        "friend_request_response",
        &FriendRequestResponse {
            friendship_id: FriendshipId(17),
            status: FriendStatus::Pending,
        },
    );
    snap_body(
        "accept_friend_body",
        &AcceptFriendBody {
            friendship_id: FriendshipId(17),
        },
    );
    snap_body(
        "accept_friend_response",
        &AcceptFriendResponse {
            conversation_id: conv(),
        },
    );
    snap_body(
        "user_profile",
        &UserProfile {
            alias_id: alias("u87654321"),
            nickname: "Bob".to_owned(),
            x25519_public_key: key(X),
            ed25519_public_key: key(ED),
        },
    );
    snap_body(
        "active_conversations",
        &ActiveConversations {
            conversations: vec![ActiveConversation { conv_id: conv() }],
        },
    );
    snap_body(
        "storage_estimate",
        &StorageEstimate {
            used_bytes: 1_048_576,
            quota_bytes: 104_857_600,
            message_count: 12,
        },
    );
}

#[test]
fn channel_bodies() {
    snap_body(
        "channel_info",
        &ChannelInfo {
            id: channel(),
            name: "Rust news".to_owned(),
            description: "Weekly links".to_owned(),
            role: Some(ChannelRole::Owner),
            is_subscribed: Some(true),
            for_sale: Some(true),
            sale_price: Some(50),
            version: Some(3),
        },
    );
    snap_body(
        "channel_info_minimal",
        &ChannelInfo {
            id: channel(),
            name: "Rust news".to_owned(),
            description: String::new(),
            role: None,
            is_subscribed: None,
            for_sale: None,
            sale_price: None,
            version: None,
        },
    );
    snap_body(
        "channel_post",
        &ChannelPost {
            id: PostId::parse("post_9f8e7d").unwrap(),
            post_type: PostType::Text,
            content: "Hello subscribers".to_owned(),
            created_at: time(),
            author_alias_id: alias("u12345678"),
        },
    );
    snap_body(
        "create_channel_request",
        &CreateChannelRequest {
            name: "Rust news".to_owned(),
            description: "Weekly links".to_owned(),
            is_public: true,
        },
    );
    snap_body(
        "create_channel_response",
        &CreateChannelResponse {
            channel_id: channel(),
        },
    );
    snap_body(
        "create_post_request",
        &CreatePostRequest {
            post_type: PostType::Markdown,
            content: "# Issue 12".to_owned(),
        },
    );
    snap_body(
        "create_post_response",
        &CreatePostResponse {
            post_id: PostId::parse("post_9f8e7d").unwrap(),
        },
    );
    snap_body(
        "posts_query",
        &PostsQuery {
            before: Some(PostId::parse("post_9f8e7d").unwrap()),
            limit: Some(50),
        },
    );
    snap_body(
        "search_query",
        &SearchQuery {
            q: Some("rust".to_owned()),
        },
    );
    snap_body(
        "list_channel_request",
        &ListChannelRequest {
            channel_id: channel(),
            price_usdt: 50,
            expected_version: Some(2),
        },
    );
    snap_body(
        "for_sale_request",
        &ForSaleRequest {
            price_usdt: 50,
            expected_version: None,
        },
    );
    snap_body(
        "list_channel_response",
        &ListChannelResponse {
            channel_id: channel(),
            price_usdt: 50,
            version: 3,
        },
    );
    snap_body(
        "channel_trade_order",
        &ChannelTradeOrder {
            order_id: order(),
            price_usdt: 5,
            pay_to: "TQn9Y2khEsLJW1ChVWFMSMeRDow5KcbLSE".to_owned(),
            expired_at: IsoTime::from_ms(AT + 900_000),
            payment_url: Some("https://pay.example/ord_abc123".to_owned()),
        },
    );
}

#[test]
fn vanity_and_payment_bodies() {
    snap_body(
        "vanity_item",
        &VanityItem {
            alias_id: alias("88888888"),
            price_usdt: 888,
            tier: VanityTier::Top,
            is_featured: true,
        },
    );
    snap_body(
        "purchase_request",
        &PurchaseRequest {
            alias_id: alias("88888888"),
        },
    );
    snap_body(
        "purchase_order",
        &PurchaseOrder {
            order_id: order(),
            alias_id: alias("88888888"),
            price_usdt: 888,
            amount_usdt: 888,
            payment_url: "https://pay.example/ord_abc123".to_owned(),
            pay_to: None,
            expired_at: IsoTime::from_ms(AT + 900_000),
        },
    );
    snap_body("bind_request", &BindRequest { order_id: order() });
    snap_body(
        "bind_response",
        &BindResponse {
            alias_id: alias("88888888"),
        },
    );
    snap_body(
        "reserve_order",
        &ReserveOrder {
            order_id: order(),
            alias_id: alias("88888888"),
            price_usdt: 888,
            price: 888,
            pay_to: "TQn9Y2khEsLJW1ChVWFMSMeRDow5KcbLSE".to_owned(),
            expired_at: IsoTime::from_ms(AT + 900_000),
        },
    );
    snap_body(
        "order_status_response",
        &OrderStatusResponse {
            status: OrderState::Confirmed,
            alias_id: "88888888".to_owned(),
            kind: OrderKind::Vanity,
            ref_id: "88888888".to_owned(),
        },
    );
    snap_body(
        "payment_webhook",
        &PaymentWebhook {
            payment_id: "pay_5566".to_owned(),
            order_id: order(),
            payment_status: PaymentStatus::Finished,
            paid_usdt: 888,
        },
    );
}

#[test]
fn media_push_and_call_bodies() {
    snap_body(
        "upload_init_request",
        &UploadInitRequest {
            content_type: "application/octet-stream".to_owned(),
        },
    );
    snap_body(
        "upload_init_response",
        &UploadInitResponse {
            upload_id: UploadId::parse("up_2b7e1516").unwrap(),
            media_key: media_key(),
        },
    );
    snap_body(
        "chunk_query",
        &ChunkQuery {
            media_key: media_key(),
            part_number: 1,
        },
    );
    snap_body(
        "chunk_response",
        &ChunkResponse {
            etag: "9b2cf535f27731c974343645a3985328".to_owned(),
        },
    );
    snap_body(
        "complete_upload_request",
        &CompleteUploadRequest {
            media_key: media_key(),
            parts: vec![
                CompletedPart {
                    etag: "9b2cf535f27731c974343645a3985328".to_owned(),
                    part_number: 1,
                },
                CompletedPart {
                    etag: "6f1ed002ab5595859014ebf0951522d9".to_owned(),
                    part_number: 2,
                },
            ],
        },
    );
    snap_body(
        "complete_upload_response",
        &CompleteUploadResponse {
            media_key: media_key(),
            size: 5_242_912,
        },
    );
    snap_body("download_query", &DownloadQuery { key: media_key() });
    snap_body(
        "vapid_key_response",
        &VapidKeyResponse {
            vapid_public_key: "BEl62iUYgUivxIkv69yViEuiBIa-Ib9-SkvMeAtA3LFgDzkrxZJjSgSnfckjBJuBkr3qBUYIHBQFLXYp5Nksh8U".to_owned(),
        },
    );
    snap_body(
        "push_subscribe_request",
        &PushSubscribeRequest {
            endpoint: "https://fcm.googleapis.com/fcm/send/dpH5lCsTSSM:APA91bH".to_owned(),
            keys: PushKeys {
                p256dh: "BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM".to_owned(),
                auth: "tBHItJI5svbpez7KI4CCXg".to_owned(),
            },
        },
    );
    snap_body(
        "push_register_request_android",
        &PushRegisterRequest {
            token: Some("fcm:APA91bHun4MxP5egoKMwt2KZFBaFUH".to_owned()),
            device_token: None,
            platform: "android".to_owned(),
        },
    );
    snap_body(
        "push_register_request_ios",
        &PushRegisterRequest {
            token: None,
            device_token: Some(
                "740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad".to_owned(),
            ),
            platform: "ios".to_owned(),
        },
    );
    snap_body("push_payload", &PushPayload::new_msg());
    snap_body(
        "ice_config_query",
        &IceConfigQuery {
            mode: Some("relay".to_owned()),
        },
    );
    snap_body(
        "ice_config",
        &IceConfig {
            ttl: 600,
            ice_transport_policy: IcePolicy::All,
            ice_servers: vec![
                IceServer {
                    urls: vec!["stun:stun.l.google.com:19302".to_owned()],
                    username: None,
                    credential: None,
                },
                IceServer {
                    urls: vec![
                        "turn:turn.example.com:3478?transport=udp".to_owned(),
                        "turns:turn.example.com:5349?transport=tcp".to_owned(),
                    ],
                    username: Some("1795298376:u12345678".to_owned()),
                    credential: Some("kZ5q0Jb2q7y9bW0t8tJvQ2m6d1E=".to_owned()),
                },
            ],
        },
    );
}
