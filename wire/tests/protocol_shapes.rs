//! Decodes every literal frame shape quoted in PROTOCOL.md §2.5 and §3 (both directions, every
//! reference client: web TS, Android KT, iOS SW), the tolerance rules of `wire::frames`, and the
//! request/response bodies quoted in PROTOCOL.md §1.

use wire::frames::{CallKind, FrameError};
use wire::http::{
    AcceptFriendBody, AcceptFriendResponse, AuthChallengeRequest, AuthChallengeResponse,
    AuthVerifyRequest, AuthVerifyResponse, BodyError, ChannelInfo, ChannelPost, ChannelRole,
    ChunkQuery, CompleteUploadRequest, CreateChannelRequest, CreatePostRequest, Empty,
    ForSaleRequest, FriendDirection, FriendProfile, FriendRequestBody, FriendStatus, IceConfig,
    IcePolicy, ListChannelRequest, OrderState, OrderStatusResponse, PostType, PowChallengeResponse,
    PurchaseOrder, PurchaseRequest, PushRegisterRequest, PushSubscribeRequest, RegisterRequest,
    RegisterResponse, StorageEstimate, UploadInitRequest, UserProfile, VanityItem, VanityTier,
    WsTicketResponse, decode_body,
};
use wire::limits::{MAX_CALL_PAYLOAD_BYTES, MAX_FRAME_BYTES, MAX_MSG_PAYLOAD_BYTES};
use wire::{ClientFrame, ErrorCode, FriendshipId, IsoTime, Seq, ServerFrame, UnixMs};

const ED: &str = "fC5586FwH7Koaiwko/34Y0t6rYCIbAwKUm1E0j/o4Zo=";
const X: &str = "NJiwxcmC9F8mDvwpB5BKRkxowvlTRypDqFrNCtPulgM=";
const UUID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

fn client(text: &str) -> ClientFrame {
    ClientFrame::decode(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn server(text: &str) -> ServerFrame {
    ServerFrame::decode(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn client_err(text: &str) -> FrameError {
    ClientFrame::decode(text).expect_err(text)
}

fn server_err(text: &str) -> FrameError {
    ServerFrame::decode(text).expect_err(text)
}

fn body<T: serde::de::DeserializeOwned>(text: &str) -> T {
    decode_body(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// A response that is a bare array (F1, V1): no request body is one, so `decode_body`
/// refuses it; clients read these with plain serde.
fn array<T: serde::de::DeserializeOwned>(text: &str) -> Vec<T> {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// §2.2, §2.3, §3.1 client -> server

#[test]
fn sync_from_web_and_android() {
    let ClientFrame::Sync(f) = client(r#"{"type":"sync","crypto_v":1}"#) else {
        panic!()
    };
    assert_eq!(f.crypto_v, Some(1));
    let ClientFrame::Sync(f) = client(r#"{"type":"sync"}"#) else {
        panic!()
    };
    assert_eq!(f.crypto_v, None);
}

#[test]
fn ping_with_and_without_crypto_v() {
    // TS and SW
    let ClientFrame::Ping(f) = client(r#"{"type":"ping"}"#) else {
        panic!()
    };
    assert_eq!(f.crypto_v, None);
    // KT
    let ClientFrame::Ping(f) = client(r#"{"type":"ping","crypto_v":1}"#) else {
        panic!()
    };
    assert_eq!(f.crypto_v, Some(1));
    assert_eq!(
        client(r#"{"type":"ping","crypto_v":1}"#).encode(),
        r#"{"type":"ping","crypto_v":1}"#
    );
}

#[test]
fn msg_from_web_and_android() {
    // TS: `local-<base36>` id, key order type,id,to,conv_id,crypto_v,payload.
    let ts = r#"{"type":"msg","id":"local-k3j9x2m1q","to":"u87654321","conv_id":"c-test-conv-id","crypto_v":1,"payload":"q83vEjRWeJASNFZ4kBI0Vg=="}"#;
    let ClientFrame::Msg(m) = client(ts) else {
        panic!()
    };
    assert_eq!(m.id.as_str(), "local-k3j9x2m1q");
    assert_eq!(m.to.as_str(), "u87654321");
    assert_eq!(m.conv_id.as_str(), "c-test-conv-id");
    assert_eq!(m.crypto_v, Some(1));
    assert_eq!(m.payload, "q83vEjRWeJASNFZ4kBI0Vg==");
    assert_eq!(client(ts).encode(), ts, "byte-identical to the web client");
    // KT: lowercase UUID id; the README's vestigial `nonce` is ignored.
    let kt = r#"{"type":"msg","id":"3f2504e0-4f89-41d3-9a0c-0305e82c3301","to":"uel21oqs6","conv_id":"conv_abc123","crypto_v":1,"payload":"AAAA","nonce":"x"}"#;
    let ClientFrame::Msg(m) = client(kt) else {
        panic!()
    };
    assert_eq!(m.id.as_str(), "3f2504e0-4f89-41d3-9a0c-0305e82c3301");
    assert_eq!(m.to.as_str(), "uel21oqs6");
    // crypto_v absent is tolerated.
    let ClientFrame::Msg(m) =
        client(r#"{"type":"msg","id":"m1","to":"abc","conv_id":"c","payload":""}"#)
    else {
        panic!()
    };
    assert_eq!(m.crypto_v, None);
}

#[test]
fn receipts_from_every_client() {
    for (kind, is_read) in [("delivered", false), ("read", true)] {
        // TS/KT with crypto_v, SW without.
        for tail in [r#","crypto_v":1}"#, "}"] {
            let text = format!(
                r#"{{"type":"{kind}","conv_id":"c-test-conv-id","seq":7,"to":"u12345678"{tail}"#
            );
            let f = match (client(&text), is_read) {
                (ClientFrame::Delivered(f), false) | (ClientFrame::Read(f), true) => f,
                (other, _) => panic!("{other:?}"),
            };
            assert_eq!(f.conv_id.as_str(), "c-test-conv-id");
            assert_eq!(f.seq, Seq(7));
            assert_eq!(f.to.as_str(), "u12345678");
            assert_eq!(f.crypto_v, (tail != "}").then_some(1));
        }
        // TS omits `seq` when the incoming msg had none: the relay cannot apply that receipt.
        let err = client_err(&format!(
            r#"{{"type":"{kind}","conv_id":"c","to":"u12345678","crypto_v":1}}"#
        ));
        assert!(
            matches!(&err, FrameError::Invalid { frame_type, id: None, reason } if frame_type == kind && reason.contains("seq")),
            "{err:?}"
        );
    }
}

#[test]
fn typing_and_retract_from_every_client() {
    let ClientFrame::Typing(t) =
        client(r#"{"type":"typing","to":"u12345678","conv_id":"c-1","crypto_v":1}"#)
    else {
        panic!()
    };
    assert_eq!(
        (t.to.as_str(), t.conv_id.as_str(), t.crypto_v),
        ("u12345678", "c-1", Some(1))
    );
    let ClientFrame::Typing(t) = client(r#"{"type":"typing","to":"u12345678","conv_id":"c-1"}"#)
    else {
        panic!()
    };
    assert_eq!(t.crypto_v, None);

    let ClientFrame::Retract(r) = client(
        r#"{"type":"retract","id":"local-abc","to":"u12345678","conv_id":"c-1","crypto_v":1}"#,
    ) else {
        panic!()
    };
    assert_eq!(
        (r.id.as_str(), r.to.as_str(), r.crypto_v),
        ("local-abc", "u12345678", Some(1))
    );
    // SW: uppercase UUID ids, no crypto_v.
    let ClientFrame::Retract(r) = client(
        r#"{"type":"retract","id":"3F2504E0-4F89-11D3-9A0C-0305E82C3301","to":"u12345678","conv_id":"c-1"}"#,
    ) else {
        panic!()
    };
    assert_eq!(r.id.as_str(), "3F2504E0-4F89-11D3-9A0C-0305E82C3301");
    assert_eq!(r.crypto_v, None);
}

#[test]
fn call_envelopes_in_both_directions() {
    for kind in CallKind::ALL {
        let t = kind.as_str();
        let text = format!(
            r#"{{"type":"{t}","to":"u87654321","call_id":"5b1d7c2e-8f4a-4e6b-9a3c-1d2e3f4a5b6c","from":"u12345678","crypto_v":2,"payload":"AAEC"}}"#
        );
        for frame in [client(&text).encode(), server(&text).encode()] {
            assert_eq!(frame, text, "call envelope re-encodes byte-identically");
        }
        let ClientFrame::Call(c) = client(&text) else {
            panic!()
        };
        assert_eq!(c.kind, kind);
        assert_eq!(c.to.as_str(), "u87654321");
        assert_eq!(c.call_id.as_str(), "5b1d7c2e-8f4a-4e6b-9a3c-1d2e3f4a5b6c");
        assert_eq!(c.from.as_ref().map(|a| a.as_str()), Some("u12345678"));
        assert_eq!(c.crypto_v, Some(2));
        assert_eq!(c.payload, "AAEC");
        let ServerFrame::Call(s) = server(&text) else {
            panic!()
        };
        assert_eq!(s, c);
        // `from` is injected by the relay, so a client may omit it.
        let ClientFrame::Call(c) = client(&format!(
            r#"{{"type":"{t}","to":"u87654321","call_id":"c1","crypto_v":2,"payload":"AAEC"}}"#
        )) else {
            panic!()
        };
        assert_eq!(c.from, None);
        // The relay drops frames without call_id: they do not decode.
        let err = client_err(&format!(
            r#"{{"type":"{t}","to":"u87654321","payload":"x"}}"#
        ));
        assert!(
            matches!(&err, FrameError::Invalid { frame_type, .. } if frame_type == t),
            "{err:?}"
        );
    }
}

#[test]
fn ios_legacy_message_is_unknown_and_re_encodes_unchanged() {
    for text in [
        r#"{"type":"message","id":"3F2504E0-4F89-11D3-9A0C-0305E82C3301","from":"","to":"u87654321","conv_id":"c-1","text":"AAAA","time":1795297776370,"reply_to_id":"X"}"#,
        r#"{"type":"message","id":"A","from":"","to":"u87654321","conv_id":"c-1","text":"[img]media/k","time":1,"msg_type":"image","media_url":"[img]media/k","caption":"hi"}"#,
    ] {
        let frame = client(text);
        let ClientFrame::Unknown(u) = &frame else {
            panic!("{frame:?}")
        };
        assert_eq!(u.frame_type(), "message");
        assert_eq!(frame.frame_type(), "message");
        assert_eq!(frame.encode(), text);
    }
}

// ---------------------------------------------------------------------------------------------
// §3.2 server -> client

#[test]
fn server_ack_and_msg() {
    let ServerFrame::Ack(a) = server(r#"{"type":"ack","id":"local-k3j9x2m1q","seq":5}"#) else {
        panic!()
    };
    assert_eq!((a.id.as_str(), a.seq), ("local-k3j9x2m1q", Seq(5)));

    let text = r#"{"type":"msg","id":"local-k3j9x2m1q","from":"u12345678","conv_id":"c-1","seq":5,"at":1795297776370,"payload":"AAAA"}"#;
    let ServerFrame::Msg(m) = server(text) else {
        panic!()
    };
    assert_eq!(m.from.as_str(), "u12345678");
    assert_eq!(m.conv_id.as_str(), "c-1");
    assert_eq!(m.seq, Seq(5));
    assert_eq!(m.at, UnixMs(1_795_297_776_370));
    assert_eq!(m.crypto_v, None);
    assert_eq!(m.payload, "AAAA");
    let ServerFrame::Msg(m) = server(&text.replace(r#""payload""#, r#""crypto_v":1,"payload""#))
    else {
        panic!()
    };
    assert_eq!(m.crypto_v, Some(1));
}

#[test]
fn server_receipts_typing_retract() {
    for kind in ["delivered", "read"] {
        // §3.2 shape, and the README's with `to`.
        for text in [
            format!(r#"{{"type":"{kind}","conv_id":"c-1","seq":9}}"#),
            format!(r#"{{"type":"{kind}","conv_id":"c-1","seq":9,"to":"u12345678"}}"#),
        ] {
            let (ServerFrame::Delivered(r) | ServerFrame::Read(r)) = server(&text) else {
                panic!()
            };
            assert_eq!(server(&text).frame_type(), kind);
            assert_eq!((r.conv_id.as_str(), r.seq, r.from), ("c-1", Seq(9), None));
            assert_eq!(r.to.is_some(), text.contains("\"to\""));
        }
    }
    let ServerFrame::Typing(t) = server(r#"{"type":"typing","from":"u12345678","conv_id":"c-1"}"#)
    else {
        panic!()
    };
    assert_eq!((t.from.as_str(), t.conv_id.as_str()), ("u12345678", "c-1"));
    // KT also reads optional `ts` and `seq`: ignored here.
    let ServerFrame::Retract(r) = server(
        r#"{"type":"retract","id":"local-abc","from":"u12345678","conv_id":"c-1","ts":1795297776370,"seq":3}"#,
    ) else {
        panic!()
    };
    assert_eq!((r.id.as_str(), r.from.as_str()), ("local-abc", "u12345678"));
}

#[test]
fn server_channel_post_payment_and_friend_frames() {
    let ServerFrame::ChannelPost(p) = server(
        r#"{"type":"channel_post","conv_id":"ch_abc123","channel_id":"ch_abc123","post":{"id":"post_1","type":"markdown","content":"**hi**","created_at":"2026-11-21T21:49:36.370Z","author_alias_id":"u12345678"}}"#,
    ) else {
        panic!()
    };
    assert_eq!(p.conv_id.as_str(), "ch_abc123");
    assert_eq!(p.post.post_type, PostType::Markdown);
    assert_eq!(p.post.created_at, IsoTime::from_ms(1_795_297_776_370));
    assert_eq!(p.post.author_alias_id.as_str(), "u12345678");
    // The README's flat shape is not the one decided on (wire::frames::ChannelPostFrame).
    let err = server_err(
        r#"{"type":"channel_post","id":"post_1","author_alias_id":"u12345678","content":"x"}"#,
    );
    assert_eq!(err.frame_type(), Some("channel_post"));
    assert_eq!(err.frame_id(), Some("post_1"));

    let ServerFrame::PaymentConfirmed(p) =
        server(r#"{"type":"payment_confirmed","order_id":"ord_abc123","ref_id":"88888888"}"#)
    else {
        panic!()
    };
    assert_eq!(
        (p.order_id.as_str(), p.ref_id.as_str()),
        ("ord_abc123", "88888888")
    );

    let ServerFrame::FriendRequest(f) = server(
        r#"{"type":"friend_request","friendship_id":17,"from":"u12345678","nickname":"Alice"}"#,
    ) else {
        panic!()
    };
    assert_eq!(
        (f.friendship_id, f.nickname.as_str()),
        (FriendshipId(17), "Alice")
    );
    let ServerFrame::FriendAccepted(f) = server(
        r#"{"type":"friend_accepted","friendship_id":17,"from":"u87654321","conversation_id":"c-1"}"#,
    ) else {
        panic!()
    };
    assert_eq!(f.conversation_id.as_str(), "c-1");
}

#[test]
fn frames_no_client_handles_are_unknown() {
    for text in [
        r#"{"type":"status_change","id":"m1","status":"read"}"#,
        r#"{"type":"sync_batch","messages":[]}"#,
        r#"{"type":"friend_verified","friendship_id":1}"#,
        r#"{"type":"pong"}"#,
        r#"{"type":"message","conv_id":"c","from":"abc","id":"X","text":"t","time":1,"seq":2}"#,
    ] {
        let frame = server(text);
        assert!(matches!(frame, ServerFrame::Unknown(_)), "{frame:?}");
        assert_eq!(frame.encode(), text);
    }
}

// ---------------------------------------------------------------------------------------------
// §2.5 goaway

fn goaway_reason(text: &str) -> String {
    let ServerFrame::Goaway(g) = server(text) else {
        panic!("{text}")
    };
    g.reason
}

#[test]
fn goaway_in_every_shape() {
    assert_eq!(
        goaway_reason(r#"{"type":"goaway","reason":"server_shutdown"}"#),
        "server_shutdown"
    );
    assert_eq!(
        goaway_reason(r#"{"type":"goaway","reason":"jwt_revoked"}"#),
        "jwt_revoked"
    );
    assert_eq!(
        goaway_reason(r#"{"type":"goaway","payload":{"reason":"new_device_login"}}"#),
        "new_device_login"
    );
    // payload.reason wins, as in TS and KT.
    assert_eq!(
        goaway_reason(r#"{"type":"goaway","reason":"a","payload":{"reason":"network_reset"}}"#),
        "network_reset"
    );
    // Empty or missing reasons fall back: nested empty -> top level -> "unknown".
    assert_eq!(
        goaway_reason(r#"{"type":"goaway","reason":"a","payload":{"reason":""}}"#),
        "a"
    );
    assert_eq!(
        goaway_reason(r#"{"type":"goaway","reason":"a","payload":{}}"#),
        "a"
    );
    assert_eq!(goaway_reason(r#"{"type":"goaway"}"#), "unknown");
    assert_eq!(goaway_reason(r#"{"type":"goaway","reason":""}"#), "unknown");
    // Re-encoded with the reason in both places.
    assert_eq!(
        server(r#"{"type":"goaway","payload":{"reason":"new_device_login"}}"#).encode(),
        r#"{"type":"goaway","reason":"new_device_login","payload":{"reason":"new_device_login"}}"#
    );
    // A reason of the wrong type is an invalid frame.
    let err = server_err(r#"{"type":"goaway","reason":5}"#);
    assert!(matches!(&err, FrameError::Invalid { frame_type, .. } if frame_type == "goaway"));
}

#[test]
fn server_error_frame() {
    let ServerFrame::Error(e) = server(
        r#"{"type":"error","error":"PAYLOAD_TOO_LARGE","message":"too big","ref_type":"msg","id":"local-1"}"#,
    ) else {
        panic!()
    };
    assert_eq!(e.error, ErrorCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        (e.ref_type.as_deref(), e.id.as_deref()),
        (Some("msg"), Some("local-1"))
    );
    let ServerFrame::Error(e) = server(r#"{"type":"error","error":"SOMETHING_NEW","message":""}"#)
    else {
        panic!()
    };
    assert_eq!(e.error.as_str(), "SOMETHING_NEW");
}

// ---------------------------------------------------------------------------------------------
// tolerance rules

#[test]
fn unknown_fields_are_ignored() {
    for text in [
        r#"{"type":"sync","crypto_v":1,"cursor":5}"#,
        r#"{"type":"ping","x":{"y":[1,2]}}"#,
        r#"{"type":"msg","id":"m1","to":"abc","conv_id":"c","crypto_v":1,"payload":"","ts":1,"extra":null}"#,
        r#"{"type":"typing","to":"abc","conv_id":"c","from":"evil"}"#,
    ] {
        let frame = client(text);
        assert!(!matches!(frame, ClientFrame::Unknown(_)), "{text}");
        assert!(!frame.encode().contains("extra") && !frame.encode().contains("cursor"));
    }
    assert!(matches!(
        server(r#"{"type":"ack","id":"m1","seq":1,"server_time":3}"#),
        ServerFrame::Ack(_)
    ));
}

#[test]
fn unknown_types_are_values_that_re_encode_to_the_same_object() {
    for text in [
        r#"{"type":"hello","b":1,"a":[true,null,"x"],"c":{"z":1,"y":2}}"#,
        r#"{"type":"","z":1,"a":2}"#,
        r#"{"type":"MSG"}"#,
    ] {
        let frame = client(text);
        assert!(matches!(frame, ClientFrame::Unknown(_)), "{text}");
        assert_eq!(frame.encode(), text, "field order kept");
        assert_eq!(server(text).encode(), text);
    }
    // `type` not first: the same object, with `type` moved to the front.
    assert_eq!(
        client(r#"{"a":1,"type":"x","b":2}"#).encode(),
        r#"{"type":"x","a":1,"b":2}"#
    );
    // Known to one direction only: unknown to the other.
    assert!(matches!(
        client(r#"{"type":"ack","id":"m","seq":1}"#),
        ClientFrame::Unknown(_)
    ));
    assert!(matches!(
        server(r#"{"type":"sync"}"#),
        ServerFrame::Unknown(_)
    ));
}

#[test]
fn missing_or_non_string_type() {
    for text in [
        r#"{}"#,
        r#"{"id":"m1"}"#,
        r#"{"type":1}"#,
        r#"{"type":null}"#,
        r#"{"Type":"msg"}"#,
    ] {
        assert_eq!(client_err(text), FrameError::MissingType, "{text}");
        assert_eq!(server_err(text), FrameError::MissingType, "{text}");
    }
}

#[test]
fn not_an_object() {
    for text in [
        "",
        " ",
        "[]",
        r#"["type","msg"]"#,
        r#""msg""#,
        "1",
        "null",
        "true",
        "{",
        "{\"type\":\"ping\"}x",
        "ping",
    ] {
        let err = client_err(text);
        assert!(
            matches!(err, FrameError::NotAnObject { .. }),
            "{text}: {err:?}"
        );
        assert!(
            matches!(server_err(text), FrameError::NotAnObject { .. }),
            "{text}"
        );
    }
    let FrameError::NotAnObject { reason } = client_err("[1]") else {
        panic!()
    };
    assert_eq!(reason, "found an array");
}

#[test]
fn wrong_field_types_name_the_frame_and_the_id() {
    let err = client_err(
        r#"{"type":"msg","id":"local-1","to":"u12345678","conv_id":"c","crypto_v":1,"payload":5}"#,
    );
    let FrameError::Invalid {
        frame_type,
        id,
        reason,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (frame_type.as_str(), id.as_deref()),
        ("msg", Some("local-1"))
    );
    assert!(!reason.is_empty());
    assert_eq!(err.frame_type(), Some("msg"));
    assert_eq!(err.frame_id(), Some("local-1"));
    assert!(err.to_string().starts_with("invalid msg frame: "), "{err}");

    // A malformed id names the id kind; an id that is not a string is not reported.
    let err = client_err(r#"{"type":"msg","id":"local-1","to":"U1","conv_id":"c","payload":""}"#);
    assert!(err.to_string().contains("alias id"), "{err}");
    assert_eq!(err.frame_id(), Some("local-1"));
    let err = client_err(r#"{"type":"retract","id":7,"to":"abc","conv_id":"c"}"#);
    assert_eq!((err.frame_type(), err.frame_id()), (Some("retract"), None));
    let err = client_err(r#"{"type":"read","conv_id":"c","seq":"5","to":"abc"}"#);
    assert_eq!((err.frame_type(), err.frame_id()), (Some("read"), None));
    let err = client_err(r#"{"type":"ping","crypto_v":"1"}"#);
    assert_eq!(err.frame_type(), Some("ping"));
    let err = client_err(r#"{"type":"sync","crypto_v":-1}"#);
    assert_eq!(err.frame_type(), Some("sync"));
    let err = server_err(
        r#"{"type":"msg","id":"m9","from":"abc","conv_id":"c","seq":1,"at":"now","payload":""}"#,
    );
    assert_eq!(
        (err.frame_type(), err.frame_id()),
        (Some("msg"), Some("m9"))
    );
    assert_eq!(err.code(), ErrorCode::BAD_FRAME);
}

fn msg_with_payload(len: usize) -> String {
    format!(
        r#"{{"type":"msg","id":"local-1","to":"abc","conv_id":"c","crypto_v":1,"payload":"{}"}}"#,
        "A".repeat(len)
    )
}

#[test]
fn oversize_frames_are_too_large() {
    // Exactly MAX_FRAME_BYTES is accepted (padded with JSON whitespace).
    let ping = r#"{"type":"ping"}"#;
    let exact = format!("{ping}{}", " ".repeat(MAX_FRAME_BYTES - ping.len()));
    assert_eq!(exact.len(), MAX_FRAME_BYTES);
    assert!(matches!(client(&exact), ClientFrame::Ping(_)));
    assert!(matches!(
        ClientFrame::decode_bytes(exact.as_bytes()),
        Ok(ClientFrame::Ping(_))
    ));

    let over = format!("{exact} ");
    let expected = FrameError::TooLarge {
        len: MAX_FRAME_BYTES + 1,
        max: MAX_FRAME_BYTES,
    };
    assert_eq!(client_err(&over), expected);
    assert_eq!(server_err(&over), expected);
    assert_eq!(
        ClientFrame::decode_bytes(over.as_bytes()).unwrap_err(),
        expected
    );
    // The size check comes first, even for bytes that are not UTF-8.
    let junk = vec![0xff_u8; MAX_FRAME_BYTES + 1];
    assert!(matches!(
        ClientFrame::decode_bytes(&junk),
        Err(FrameError::TooLarge { .. })
    ));
    assert_eq!(expected.code(), ErrorCode::FRAME_TOO_LARGE);
    assert!(
        expected.to_string().contains("MAX_FRAME_BYTES"),
        "{expected}"
    );
}

#[test]
fn oversize_payloads_name_their_limit() {
    assert!(matches!(
        client(&msg_with_payload(MAX_MSG_PAYLOAD_BYTES)),
        ClientFrame::Msg(_)
    ));
    let err = client_err(&msg_with_payload(MAX_MSG_PAYLOAD_BYTES + 1));
    assert_eq!(
        err,
        FrameError::PayloadTooLarge {
            frame_type: "msg".to_owned(),
            id: Some("local-1".to_owned()),
            len: MAX_MSG_PAYLOAD_BYTES + 1,
            max: MAX_MSG_PAYLOAD_BYTES,
            limit: "MAX_MSG_PAYLOAD_BYTES",
        }
    );
    assert_eq!(err.code(), ErrorCode::PAYLOAD_TOO_LARGE);
    assert!(err.to_string().contains("MAX_MSG_PAYLOAD_BYTES"), "{err}");
    assert_eq!(
        (err.frame_type(), err.frame_id()),
        (Some("msg"), Some("local-1"))
    );

    let call = |len: usize| {
        format!(
            r#"{{"type":"call_offer","to":"abc","call_id":"k1","crypto_v":2,"payload":"{}"}}"#,
            "A".repeat(len)
        )
    };
    assert!(matches!(
        client(&call(MAX_CALL_PAYLOAD_BYTES)),
        ClientFrame::Call(_)
    ));
    let err = client_err(&call(MAX_CALL_PAYLOAD_BYTES + 1));
    assert!(
        matches!(&err, FrameError::PayloadTooLarge { limit: "MAX_CALL_PAYLOAD_BYTES", frame_type, id: None, .. } if frame_type == "call_offer"),
        "{err:?}"
    );
}

#[test]
fn binary_frames() {
    // SW may send binary messages containing UTF-8 JSON.
    let frame = ClientFrame::decode_bytes(br#"{"type":"ping"}"#).unwrap();
    assert!(matches!(frame, ClientFrame::Ping(_)));
    let frame =
        ClientFrame::decode_bytes(r#"{"type":"typing","to":"abc","conv_id":"c-é"}"#.as_bytes());
    assert!(frame.is_err(), "é is not in the conversation id alphabet");
    for bytes in [&b"\xff"[..], b"{\"type\":\"ping\"}\xc3", b"\xed\xa0\x80"] {
        let err = ClientFrame::decode_bytes(bytes).unwrap_err();
        assert_eq!(err, FrameError::NotUtf8);
        assert_eq!(err.code(), ErrorCode::BAD_FRAME);
    }
}

#[test]
fn every_frame_error_maps_to_its_code() {
    let cases = [
        (
            FrameError::TooLarge { len: 2, max: 1 },
            ErrorCode::FRAME_TOO_LARGE,
            413,
        ),
        (FrameError::NotUtf8, ErrorCode::BAD_FRAME, 400),
        (
            FrameError::NotAnObject { reason: "x".into() },
            ErrorCode::BAD_FRAME,
            400,
        ),
        (FrameError::MissingType, ErrorCode::BAD_FRAME, 400),
        (
            FrameError::Invalid {
                frame_type: "msg".into(),
                id: None,
                reason: "x".into(),
            },
            ErrorCode::BAD_FRAME,
            400,
        ),
        (
            FrameError::PayloadTooLarge {
                frame_type: "msg".into(),
                id: None,
                len: 2,
                max: 1,
                limit: "MAX_MSG_PAYLOAD_BYTES",
            },
            ErrorCode::PAYLOAD_TOO_LARGE,
            413,
        ),
    ];
    for (err, code, status) in cases {
        assert_eq!(err.code(), code, "{err:?}");
        assert_eq!(err.code().default_status(), status, "{err:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// §1 bodies

#[test]
fn registration_bodies() {
    let with = format!(
        r#"{{"ed25519_public_key":"{ED}","x25519_public_key":"{X}","nickname":"Alice","pow_nonce":"48213"}}"#
    );
    let req: RegisterRequest = body(&with);
    assert_eq!(req.pow_nonce.as_deref(), Some("48213"));
    assert_eq!(req.ed25519_public_key.to_b64(), ED);
    assert_eq!(req.x25519_public_key.to_b64(), X);
    assert_eq!(req.nickname, "Alice");
    // TS and SW omit the nonce; KT sends "" when unsolved.
    let without: RegisterRequest = body(&with.replace(r#","pow_nonce":"48213""#, ""));
    assert_eq!(without.pow_nonce, None);
    let kt: RegisterRequest = body(&with.replace("48213", ""));
    assert_eq!(kt.pow_nonce, None);
    assert_eq!(kt, without);
    // Keys must be 32 bytes of standard padded base64.
    assert!(decode_body::<RegisterRequest>(with.replace(ED, "AAAA").as_bytes()).is_err());

    // A1: TS `{}`, KT no body.
    assert_eq!(body::<Empty>("{}"), Empty {});
    assert_eq!(decode_body::<Empty>(b"").unwrap(), Empty {});
    let pow: PowChallengeResponse =
        body(r#"{"challenge_string":"abc","difficulty":4,"expires_in":300}"#);
    assert_eq!((pow.difficulty, pow.expires_in), (4, 300));

    let ok: RegisterResponse = body(&format!(r#"{{"uuid":"{UUID}","alias_id":"u12345678"}}"#));
    assert_eq!(
        (ok.uuid.as_str(), ok.alias_id.as_str()),
        (UUID, "u12345678")
    );
}

#[test]
fn auth_bodies() {
    // Upper-case uuids are accepted and normalised.
    let a3: AuthChallengeRequest = body(&format!(
        r#"{{"user_uuid":"{}"}}"#,
        UUID.to_ascii_uppercase()
    ));
    assert_eq!(a3.user_uuid.as_str(), UUID);
    let a3r: AuthChallengeResponse =
        body(r#"{"challenge":"c-123","expires_at":"2026-11-21T21:54:36.370Z"}"#);
    assert_eq!(a3r.challenge, "c-123");
    assert_eq!(
        a3r.expires_at,
        IsoTime::from_ms(1_795_297_776_370 + 300_000)
    );
    let sig = "A".repeat(86) + "==";
    let a4: AuthVerifyRequest = body(&format!(
        r#"{{"user_uuid":"{UUID}","challenge":"c-123","signature":"{sig}"}}"#
    ));
    assert_eq!(a4.signature.0, [0; 64]);
    assert_eq!(a4.challenge, "c-123");
    let a4r: AuthVerifyResponse = body(r#"{"token":"a.b.c","expires_in":86400}"#);
    assert_eq!((a4r.token.as_str(), a4r.expires_in), ("a.b.c", 86_400));
    let a5: WsTicketResponse = body(r#"{"ticket":"tk_1","expires_in":30}"#);
    assert_eq!(a5.ticket, "tk_1");
}

#[test]
fn friend_bodies() {
    let accepted = format!(
        r#"{{"friendship_id":17,"alias_id":"u87654321","nickname":"Bob","status":"accepted","direction":"sent","conversation_id":"c-1","x25519_public_key":"{X}","ed25519_public_key":"{ED}","created_at":"2026-11-21T21:49:36.370Z"}}"#
    );
    let f: FriendProfile = body(&accepted);
    assert_eq!(f.friendship_id, FriendshipId(17));
    assert_eq!(
        (f.status, f.direction),
        (FriendStatus::Accepted, FriendDirection::Sent)
    );
    assert_eq!(f.conversation_id.as_ref().map(|c| c.as_str()), Some("c-1"));
    // Pending: conversation_id empty, absent or null.
    let pending = accepted
        .replace("accepted", "pending")
        .replace("sent", "received");
    for text in [
        pending.replace(r#""c-1""#, r#""""#),
        pending.replace(r#""conversation_id":"c-1","#, ""),
        pending.replace(r#""c-1""#, "null"),
    ] {
        let f: FriendProfile = body(&text);
        assert_eq!(
            (f.status, f.direction),
            (FriendStatus::Pending, FriendDirection::Received)
        );
        assert_eq!(f.conversation_id, None, "{text}");
    }
    // F1 is a bare array.
    let list: Vec<FriendProfile> = array(&format!(
        "[{accepted},{}]",
        pending.replace(r#""c-1""#, r#""""#)
    ));
    assert_eq!(list.len(), 2);

    let f2: FriendRequestBody = body(r#"{"to_alias_id":"88888888"}"#);
    assert_eq!(f2.to_alias_id.as_str(), "88888888");
    let f3: AcceptFriendBody = body(r#"{"friendship_id":17}"#);
    assert_eq!(f3.friendship_id, FriendshipId(17));
    let f3r: AcceptFriendResponse = body(r#"{"conversation_id":"c-1"}"#);
    assert_eq!(f3r.conversation_id.as_str(), "c-1");
    let f5: UserProfile = body(&format!(
        r#"{{"alias_id":"u87654321","nickname":"Bob","x25519_public_key":"{X}","ed25519_public_key":"{ED}"}}"#
    ));
    assert_eq!(f5.alias_id.as_str(), "u87654321");
    let c2: StorageEstimate = body(r#"{"used_bytes":1,"quota_bytes":2,"message_count":3}"#);
    assert_eq!((c2.used_bytes, c2.quota_bytes, c2.message_count), (1, 2, 3));
}

#[test]
fn channel_bodies() {
    let info: ChannelInfo = body(
        r#"{"id":"ch_abc123","name":"n","description":"d","role":"owner","is_subscribed":true,"for_sale":true,"sale_price":5}"#,
    );
    assert_eq!(info.role, Some(ChannelRole::Owner));
    assert_eq!(info.sale_price, Some(5));
    let bare: ChannelInfo = body(r#"{"id":"ch_abc123","name":"n","description":""}"#);
    assert_eq!((bare.role, bare.for_sale), (None, None));
    let post: ChannelPost = body(
        r#"{"id":"p1","type":"text","content":"c","created_at":"2026-11-21T21:49:36.370Z","author_alias_id":"abc"}"#,
    );
    assert_eq!(post.post_type, PostType::Text);
    let ch4: CreateChannelRequest = body(r#"{"name":"n","description":"d","is_public":false}"#);
    assert!(!ch4.is_public);
    let ch7: CreatePostRequest = body(r#"{"type":"markdown","content":"*x*"}"#);
    assert_eq!(ch7.post_type, PostType::Markdown);
    assert_eq!(
        body::<CreatePostRequest>(r#"{"content":"x"}"#).post_type,
        PostType::Text
    );
    let ch9: ListChannelRequest = body(r#"{"channel_id":"ch_abc123","price_usdt":50}"#);
    assert_eq!((ch9.price_usdt, ch9.expected_version), (50, None));
    let sw: ForSaleRequest = body(r#"{"price_usdt":50}"#);
    assert_eq!(sw.price_usdt, 50);
    // CH5, CH10, CH11: `{}` or (KT) nothing.
    assert_eq!(decode_body::<Empty>(b"{}").unwrap(), Empty {});
}

#[test]
fn vanity_bodies() {
    let items: Vec<VanityItem> =
        array(r#"[{"alias_id":"88888888","price_usdt":888,"tier":"top","is_featured":true}]"#);
    assert_eq!(items[0].tier, VanityTier::Top);
    let v2: PurchaseRequest = body(r#"{"alias_id":"88888888"}"#);
    assert_eq!(v2.alias_id.as_str(), "88888888");
    // Our response carries the web (`price_usdt`, ISO) and Android (`amount_usdt`) names;
    // `expired_at` also decodes from Android's epoch-ms number.
    let iso: PurchaseOrder = body(
        r#"{"order_id":"ord_1","alias_id":"88888888","price_usdt":888,"amount_usdt":888,"payment_url":"https://p/1","pay_to":"T1","expired_at":"2026-11-21T21:49:36.370Z"}"#,
    );
    assert_eq!(iso.pay_to.as_deref(), Some("T1"));
    let ms: PurchaseOrder = body(
        r#"{"order_id":"ord_1","alias_id":"88888888","price_usdt":888,"amount_usdt":888,"payment_url":"https://p/1","expired_at":1795297776370}"#,
    );
    assert_eq!(ms.expired_at, iso.expired_at);
    assert_eq!(ms.pay_to, None);
    let v5: OrderStatusResponse =
        body(r#"{"status":"confirmed","alias_id":"88888888","kind":"vanity","ref_id":"88888888"}"#);
    assert_eq!(v5.status, OrderState::Confirmed);
}

#[test]
fn media_push_and_ice_bodies() {
    let m1: UploadInitRequest = body(r#"{"content_type":"application/octet-stream"}"#);
    assert_eq!(m1.content_type, "application/octet-stream");
    assert_eq!(
        body::<UploadInitRequest>("{}").content_type,
        "application/octet-stream"
    );
    // M2's query uses camelCase names.
    let q: ChunkQuery = body(r#"{"mediaKey":"media/abc","partNumber":1}"#);
    assert_eq!((q.media_key.as_str(), q.part_number), ("media/abc", 1));
    assert!(decode_body::<ChunkQuery>(br#"{"media_key":"media/abc","part_number":1}"#).is_err());
    let m3: CompleteUploadRequest =
        body(r#"{"media_key":"media/abc","parts":[{"etag":"e1","part_number":1}]}"#);
    assert_eq!(
        (m3.parts[0].etag.as_str(), m3.parts[0].part_number),
        ("e1", 1)
    );

    let android: PushRegisterRequest = body(r#"{"token":"fcm-1","platform":"android"}"#);
    assert_eq!(
        (android.token.as_deref(), android.device_token.as_deref()),
        (Some("fcm-1"), None)
    );
    assert_eq!(android.platform, "android");
    let ios: PushRegisterRequest = body(r#"{"device_token":"apns-1","platform":"ios"}"#);
    assert_eq!(
        (ios.token.as_deref(), ios.device_token.as_deref()),
        (None, Some("apns-1"))
    );
    assert_eq!(ios.platform, "ios");
    let p2: PushSubscribeRequest = body(
        r#"{"endpoint":"https://push/1","expirationTime":null,"keys":{"p256dh":"k","auth":"a"}}"#,
    );
    assert_eq!((p2.keys.p256dh.as_str(), p2.keys.auth.as_str()), ("k", "a"));

    for urls in [
        r#""stun:stun.l.google.com:19302""#,
        r#"["stun:stun.l.google.com:19302"]"#,
    ] {
        let k1: IceConfig = body(&format!(
            r#"{{"ttl":600,"ice_transport_policy":"relay","ice_servers":[{{"urls":{urls},"username":"u","credential":"c"}}]}}"#
        ));
        assert_eq!(k1.ice_transport_policy, IcePolicy::Relay);
        assert_eq!(
            k1.ice_servers[0].urls,
            vec!["stun:stun.l.google.com:19302".to_owned()]
        );
        assert_eq!(k1.ice_servers[0].username.as_deref(), Some("u"));
    }
}

#[test]
fn body_errors_map_to_codes() {
    let err = decode_body::<RegisterRequest>(br#"{"nickname":1}"#).unwrap_err();
    assert!(matches!(err, BodyError::Invalid { .. }));
    assert_eq!(err.code(), ErrorCode::INVALID_JSON);
}
