//! `relay_core::http` as a shell sees it: method names, the route name of every route (and
//! of the paths no route serves), request headers, what a request's `Debug` shows, and the
//! response and error values (status, content type, `Retry-After`).

use relay_core::http::{ROUTE_NAMES, UNKNOWN_ROUTE, route_name};
use relay_core::limits::DEFAULT_RETRY_AFTER_S;
use relay_core::{ApiError, HttpRequest, HttpResponse, Method};
use wire::ErrorCode;
use wire::http::paths;

#[test]
fn method_names_are_case_sensitive() {
    for (name, method) in [
        ("GET", Method::Get),
        ("POST", Method::Post),
        ("PUT", Method::Put),
        ("DELETE", Method::Delete),
        ("get", Method::Other),
        ("Post", Method::Other),
        ("PATCH", Method::Other),
        ("", Method::Other),
    ] {
        assert_eq!(Method::parse(name), method, "{name:?}");
    }
}

#[test]
fn every_route_has_its_template_name_and_empty_ids_route_nowhere() {
    use Method::{Delete, Get, Post, Put};
    let routes: &[(Method, &str, &str)] = &[
        (Get, paths::POW_CHALLENGE, "pow/challenge"),
        (Post, paths::POW_CHALLENGE, "pow/challenge"),
        (Post, paths::REGISTER, "register"),
        (Post, paths::AUTH_CHALLENGE, "auth/challenge"),
        (Post, paths::AUTH_VERIFY, "auth/verify"),
        (Post, paths::WS_TICKET, "ws/ticket"),
        (Get, paths::FRIENDS, "friends"),
        (Post, paths::FRIEND_REQUEST, "friends/request"),
        (Post, paths::FRIEND_ACCEPT_BODY, "friends/accept"),
        (Put, "/api/v1/friends/7/accept", "friends/{id}/accept"),
        (Post, "/api/v1/friends/7/accept", "friends/{id}/accept"),
        (Post, "/api/v1/friends/7/reject", "friends/{id}/reject"),
        (Get, "/api/v1/users/u12345678", "users/{alias}"),
        (Get, paths::ACTIVE_CONVERSATIONS, "conversations/active"),
        (Get, paths::STORAGE_ESTIMATE, "storage/estimate"),
        (Post, paths::MEDIA_INIT, "media/upload-parts/init"),
        (
            Post,
            "/api/v1/media/upload-parts/up-1/chunk",
            "media/upload-parts/{id}/chunk",
        ),
        (
            Put,
            "/api/v1/media/upload-parts/up-1/chunk",
            "media/upload-parts/{id}/chunk",
        ),
        (
            Post,
            "/api/v1/media/upload-parts/up-1/complete",
            "media/upload-parts/{id}/complete",
        ),
        (Get, paths::MEDIA_DOWNLOAD, "media/download"),
        (Get, paths::PUSH_VAPID_KEY, "push/vapid-key"),
        (Post, paths::PUSH_SUBSCRIBE, "push/subscribe"),
        (Post, paths::PUSH_REGISTER, "push/register"),
        (Post, paths::PUSH_DISABLE, "push/disable"),
        (Get, paths::ICE_CONFIG, "calls/ice-config"),
        (Get, paths::CHANNEL_SEARCH, "channels/search"),
        (Get, paths::CHANNELS_MINE, "channels/mine"),
        (Post, paths::CHANNELS, "channels"),
        (Get, "/api/v1/channels/c-1", "channels/{id}"),
        (
            Post,
            "/api/v1/channels/c-1/subscribe",
            "channels/{id}/subscribe",
        ),
        (
            Delete,
            "/api/v1/channels/c-1/subscribe",
            "channels/{id}/subscribe",
        ),
        (Post, "/api/v1/channels/c-1/posts", "channels/{id}/posts"),
        (Get, "/api/v1/channels/c-1/posts", "channels/{id}/posts"),
        (Put, "/api/v1/channels/c-1/forsale", "channels/{id}/forsale"),
        (Post, "/api/v1/channels/c-1/buy", "channels/{id}/buy"),
        (Post, paths::CHANNEL_QUOTA_BUY, "channels/quota/buy"),
        (Post, paths::LIST_CHANNEL, "vanity/list-channel"),
        (Get, paths::VANITY_SEARCH, "vanity/search"),
        (Post, paths::VANITY_PURCHASE, "vanity/purchase"),
        (Post, paths::VANITY_BIND, "vanity/bind"),
        (Post, paths::VANITY_RESERVE, "vanity/reserve"),
        (
            Get,
            "/api/v1/vanity/order/o-1/status",
            "vanity/order/{id}/status",
        ),
        (Post, paths::PAYMENT_WEBHOOK, "payments/webhook"),
    ];
    for (method, path, name) in routes {
        assert_eq!(route_name(*method, path), *name, "{method:?} {path}");
    }
    // Every name is served by some route, and the list holds nothing else.
    let mut served: Vec<&str> = routes.iter().map(|(_, _, n)| *n).collect();
    served.push(UNKNOWN_ROUTE);
    served.sort_unstable();
    served.dedup();
    let mut listed = ROUTE_NAMES.to_vec();
    listed.sort_unstable();
    assert_eq!(served, listed);
    // An empty id never names a route; nor does a method the route does not take.
    for (method, path) in [
        (Get, "/api/v1/users/"),
        (Post, "/api/v1/media/upload-parts//chunk"),
        (Post, "/api/v1/media/upload-parts//complete"),
        (Get, "/api/v1/channels/"),
        (Get, paths::REGISTER),
        (Method::Other, paths::FRIENDS),
        (Get, "/api/v1/friends/"),
        (Get, "/api/v2/friends"),
    ] {
        assert_eq!(route_name(method, path), UNKNOWN_ROUTE, "{method:?} {path}");
    }
}

#[test]
fn an_empty_id_is_404_no_such_route_through_the_relay() {
    let mut w = crate::world::World::new();
    let u = w.user("alice");
    for (method, path) in [
        (Method::Get, "/api/v1/users/"),
        (Method::Post, "/api/v1/media/upload-parts//chunk"),
        (Method::Post, "/api/v1/media/upload-parts//complete"),
        (Method::Get, "/api/v1/channels/"),
    ] {
        let r = w.http(
            HttpRequest::new(method, path)
                .bearer(&u.token)
                .body(b"{}".to_vec()),
        );
        assert_eq!(
            (r.status, r.error_code().as_deref()),
            (404, Some("NOT_FOUND")),
            "{path}"
        );
    }
}

#[test]
fn headers_are_found_by_any_case_first_value_first() {
    let req = HttpRequest::new(Method::Post, "/api/v1/payments/webhook?x=1")
        .header("X-Payment-Signature", "first")
        .header("x-payment-signature", "second")
        .header("Content-Type", "application/json");
    assert_eq!(req.path, paths::PAYMENT_WEBHOOK);
    assert_eq!(req.query, "x=1");
    assert_eq!(req.header_value("x-payment-signature"), Some("first"));
    assert_eq!(req.header_value("CONTENT-TYPE"), Some("application/json"));
    assert_eq!(req.header_value("x-other"), None);
    assert_eq!(req.headers.len(), 3);
}

#[test]
fn a_request_s_debug_says_whether_there_is_an_address_and_how_many_were_resolved() {
    let req = HttpRequest::new(Method::Post, paths::PUSH_SUBSCRIBE)
        .from_addr("198.51.100.23")
        .resolved(
            "secret-host.example",
            vec!["8.8.8.8".parse().unwrap(), "8.8.4.4".parse().unwrap()],
        );
    let text = format!("{req:?}");
    assert!(text.contains("remote_addr: Some(\"<redacted>\")"), "{text}");
    assert!(
        text.contains("resolved: Some(Resolution { addrs: 2, .. })"),
        "{text}"
    );
    for secret in ["198.51.100.23", "secret-host", "8.8.4.4"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    let text = format!("{:?}", HttpRequest::new(Method::Get, "/x").from_addr(""));
    assert!(text.contains("remote_addr: None"), "{text}");
    assert!(text.contains("resolved: None"), "{text}");
}

#[test]
fn responses_carry_their_content_type_and_only_a_429_gets_a_default_retry_after() {
    let r = HttpResponse::error(429, &ErrorCode::RATE_LIMITED, "slow down");
    assert_eq!(r.retry_after_s, Some(DEFAULT_RETRY_AFTER_S));
    assert_eq!(r.content_type, "application/json");
    assert_eq!(r.error_code().as_deref(), Some("RATE_LIMITED"));
    assert_eq!(r.body_json()["message"], "slow down");
    for status in [400, 403, 413, 503] {
        let r = HttpResponse::error(status, &ErrorCode::INVALID_FIELD, "no");
        assert_eq!((r.status, r.retry_after_s), (status, None));
    }
    let r = HttpResponse::bytes(200, vec![1, 2, 3]);
    assert_eq!(
        (r.content_type, r.body.as_slice(), r.retry_after_s),
        ("application/octet-stream", [1u8, 2, 3].as_slice(), None)
    );
    assert_eq!(r.body_json(), serde_json::Value::Null);
    assert_eq!(r.error_code(), None);
    let r = HttpResponse::json(201, &serde_json::json!({"ok": true}));
    assert_eq!((r.status, r.content_type), (201, "application/json"));
    assert_eq!(r.body_json(), serde_json::json!({"ok": true}));
    assert_eq!(r.error_code(), None);
}

#[test]
fn api_errors_keep_their_status_and_round_retry_after_up_to_whole_seconds() {
    let e = ApiError::with_status(401, ErrorCode::INVALID_FIELD, "user_uuid: bad");
    assert_eq!((e.status, e.code.clone()), (401, ErrorCode::INVALID_FIELD));
    let r = e.into_response();
    assert_eq!(r.status, 401);
    assert_eq!(r.error_code().as_deref(), Some("INVALID_FIELD"));
    assert_eq!(r.body_json()["message"], "user_uuid: bad");
    for (ms, s) in [
        (0, 1),
        (1, 1),
        (999, 1),
        (1_000, 1),
        (1_001, 2),
        (20_000, 20),
    ] {
        let e = ApiError::rate_limited("wait", ms);
        assert_eq!(e.retry_after_s, Some(s), "{ms} ms");
        let r = e.into_response();
        assert_eq!((r.status, r.retry_after_s), (429, Some(s)), "{ms} ms");
    }
    // A 429 built without a delay gets the default one.
    let r = ApiError::new(ErrorCode::RATE_LIMITED, "wait").into_response();
    assert_eq!(
        (r.status, r.retry_after_s),
        (429, Some(DEFAULT_RETRY_AFTER_S))
    );
}
