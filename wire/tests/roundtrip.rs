//! Property tests: `decode(encode(x)) == x` for every frame (both directions) and every HTTP body.
//!
//! Strategies live in `common/`; they respect each id's alphabet and length, keep `IsoTime` within
//! year 9999 and payloads within their limits. The documented normalisations (empty goaway reason,
//! `pow_nonce: ""`, `conversation_id: ""`) are excluded from the generators and tested explicitly.
// `body_round_trip` runs only inside tests; allow-unwrap-in-tests does not see helpers as tests.
#![allow(clippy::unwrap_used)]

mod common;

use std::fmt::Debug;

use common::*;
use proptest::collection::vec;
use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use wire::frames::GoawayFrame;
use wire::http::{Empty, OkResponse, RegisterRequest};
use wire::{ClientFrame, ServerFrame};

fn body_round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(value: &T) {
    let json = serde_json::to_string(value).unwrap();
    let back: T = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json}: {e}"));
    assert_eq!(&back, value, "{json}");
    // And the encoding is stable.
    assert_eq!(serde_json::to_string(&back).unwrap(), json);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn client_frames_round_trip(frame in client_frame()) {
        let text = frame.encode();
        let back = ClientFrame::decode(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        prop_assert_eq!(&back, &frame, "{}", text);
        prop_assert_eq!(back.encode(), text);
        prop_assert_eq!(back.frame_type(), frame.frame_type());
        // Binary frames carrying the same text decode the same.
        prop_assert_eq!(ClientFrame::decode_bytes(frame.encode().as_bytes()).unwrap(), frame);
    }

    #[test]
    fn server_frames_round_trip(frame in server_frame()) {
        let text = frame.encode();
        let back = ServerFrame::decode(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        prop_assert_eq!(&back, &frame, "{}", text);
        prop_assert_eq!(back.encode(), text);
        prop_assert_eq!(back.frame_type(), frame.frame_type());
    }
}

macro_rules! body_round_trips {
    ($($name:ident: $strategy:expr;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            $(
                #[test]
                fn $name(value in $strategy) {
                    body_round_trip(&value);
                }
            )*
        }
    };
}

body_round_trips! {
    pow_challenge_response_round_trips: pow_challenge_response();
    register_request_round_trips: register_request();
    register_response_round_trips: register_response();
    register_conflict_round_trips: register_conflict();
    error_body_round_trips: error_body();
    auth_challenge_request_round_trips: auth_challenge_request();
    auth_challenge_response_round_trips: auth_challenge_response();
    auth_verify_request_round_trips: auth_verify_request();
    auth_verify_response_round_trips: auth_verify_response();
    ws_ticket_response_round_trips: ws_ticket_response();
    friend_list_round_trips: vec(friend_profile(), 0..4);
    friend_request_body_round_trips: friend_request_body();
    friend_request_response_round_trips: friend_request_response();
    accept_friend_body_round_trips: accept_friend_body();
    accept_friend_response_round_trips: accept_friend_response();
    user_profile_round_trips: user_profile();
    active_conversations_round_trip: active_conversations();
    storage_estimate_round_trips: storage_estimate();
    channel_list_round_trips: vec(channel_info(), 0..4);
    channel_posts_round_trip: vec(channel_post(), 0..4);
    create_channel_request_round_trips: create_channel_request();
    create_channel_response_round_trips: create_channel_response();
    create_post_request_round_trips: create_post_request();
    create_post_response_round_trips: create_post_response();
    posts_query_round_trips: posts_query();
    search_query_round_trips: search_query();
    list_channel_request_round_trips: list_channel_request();
    for_sale_request_round_trips: for_sale_request();
    list_channel_response_round_trips: list_channel_response();
    channel_trade_order_round_trips: channel_trade_order();
    vanity_list_round_trips: vec(vanity_item(), 0..4);
    purchase_request_round_trips: purchase_request();
    purchase_order_round_trips: purchase_order();
    bind_request_round_trips: bind_request();
    bind_response_round_trips: bind_response();
    reserve_order_round_trips: reserve_order();
    order_status_response_round_trips: order_status_response();
    payment_webhook_round_trips: payment_webhook();
    upload_init_request_round_trips: upload_init_request();
    upload_init_response_round_trips: upload_init_response();
    chunk_query_round_trips: chunk_query();
    chunk_response_round_trips: chunk_response();
    complete_upload_request_round_trips: complete_upload_request();
    complete_upload_response_round_trips: complete_upload_response();
    download_query_round_trips: download_query();
    vapid_key_response_round_trips: vapid_key_response();
    push_subscribe_request_round_trips: push_subscribe_request();
    push_register_request_round_trips: push_register_request();
    push_payload_round_trips: push_payload();
    ice_config_query_round_trips: ice_config_query();
    ice_config_round_trips: ice_config();
}

#[test]
fn fieldless_bodies_round_trip() {
    body_round_trip(&Empty {});
    body_round_trip(&OkResponse::OK);
    body_round_trip(&OkResponse { ok: false });
}

// ---- documented normalisations

#[test]
fn goaway_with_an_empty_reason_decodes_as_unknown() {
    let frame = ServerFrame::Goaway(GoawayFrame {
        reason: String::new(),
    });
    let text = frame.encode();
    assert_eq!(
        text,
        r#"{"type":"goaway","reason":"","payload":{"reason":""}}"#
    );
    assert_eq!(
        ServerFrame::decode(&text).unwrap(),
        ServerFrame::Goaway(GoawayFrame {
            reason: "unknown".to_owned()
        })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn an_empty_pow_nonce_decodes_as_none(mut req in register_request()) {
        req.pow_nonce = Some(String::new());
        let json = serde_json::to_string(&req).unwrap();
        prop_assert!(json.ends_with(r#","pow_nonce":""}"#), "{}", json);
        let back: RegisterRequest = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(&back.pow_nonce, &None);
        req.pow_nonce = None;
        prop_assert_eq!(back, req);
    }

    #[test]
    fn a_pending_friend_without_conversation_encodes_empty(mut f in friend_profile()) {
        f.conversation_id = None;
        let json = serde_json::to_string(&f).unwrap();
        prop_assert!(json.contains(r#","conversation_id":"","#), "{}", json);
        body_round_trip(&f);
    }
}
