//! Push delivery end to end with real cryptography, without the relay server (that is
//! `tests/push_server.rs`): the `relay-push` worker against the push-service stand-ins, over
//! loopback (the production rustls/hyper transport, speaking plain HTTP as in test mode) and
//! inside turmoil (the server's network-seam transport, `relay_server::NetPushTransport`).
//! What the stand-ins check is independent code (`standins::pushcrypto`): every Web Push
//! body is decrypted with the subscription's private key, every VAPID JWT verified against
//! the served key and the push service's origin, the FCM OAuth assertion and the APNs
//! provider token verified.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use relay_core::PushTarget;
use relay_push::{
    ApnsConfig, FcmConfig, GoneTarget, HttpsTransport, PushResponse, PushStats, PushTransport,
    PushWorker, ServiceAccount, Submitted, TransportError, VapidKey, VapidSubject, WebPushConfig,
    WorkerConfig, WorkerLimits,
};
use relay_server::NetPushTransport;
use seam::clock::{Clock, SimClock, SystemClock};
use seam::net::{Network, Tokio, Turmoil};
use standins::{ApnsService, FcmService, WebPushService, pushcrypto};
use wire::UserUuid;
use wire::http::PushPayload;

const NEW_MSG: &[u8] = br#"{"type":"new_msg"}"#;
const KEY_ID: &str = "KEYID12345";
const TEAM_ID: &str = "TEAM123456";
const BUNDLE: &str = "org.example.securechat";

fn user(n: u8) -> UserUuid {
    format!("00000000-0000-4000-8000-0000000000{n:02x}")
        .parse()
        .unwrap()
}

fn vapid_key() -> VapidKey {
    VapidKey::generate(&mut ChaCha20Rng::seed_from_u64(77))
}

fn web_config(key: &VapidKey) -> WebPushConfig {
    WebPushConfig {
        allow_http: true,
        ..WebPushConfig::new(
            key.clone(),
            VapidSubject::parse("mailto:ops@example.org").unwrap(),
        )
    }
}

/// Fast limits for tests: small backoff so retries take milliseconds.
fn limits() -> WorkerLimits {
    WorkerLimits {
        backoff_base_ms: 20,
        backoff_max_ms: 200,
        request_timeout_ms: 2_000,
        ..WorkerLimits::default()
    }
}

fn clock_fn(clock: Arc<dyn Clock>) -> relay_push::worker::WallClock {
    Arc::new(move || clock.now())
}

/// Waits (bounded) until `done` holds; the bound only keeps a broken build from hanging.
async fn until(mut done: impl FnMut() -> bool) {
    for _ in 0..2_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("condition not reached");
}

async fn settled(worker: &PushWorker, n: u64) -> PushStats {
    until(|| {
        let s = worker.stats();
        s.delivered + s.gone + s.failed + s.gave_up >= n
    })
    .await;
    worker.stats()
}

fn web_target(sub: &standins::WebPushSubscription) -> PushTarget {
    PushTarget::WebPush {
        endpoint: sub.endpoint.clone(),
        p256dh: sub.p256dh.clone(),
        auth: sub.auth.clone(),
    }
}

// ------------------------------------------------------------------ transports

/// A push service that never answers.
struct BlackHole;

impl PushTransport for BlackHole {
    async fn send(&self, _: relay_push::PushRequest) -> Result<PushResponse, TransportError> {
        std::future::pending().await
    }
}

// ------------------------------------------------------------------ loopback

async fn serve_tokio<F, Fut>(run: F) -> (SocketAddr, tokio::sync::oneshot::Sender<()>)
where
    F: FnOnce(SocketAddr, tokio::sync::oneshot::Receiver<()>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    // Bind to learn a free port, release it, and let the stand-in bind it.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(run(addr, rx));
    // Wait until it listens.
    for _ in 0..400 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return (addr, tx);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("stand-in did not start");
}

async fn start_web(service: &WebPushService) -> (String, tokio::sync::oneshot::Sender<()>) {
    let s = service.clone();
    let (addr, stop) = serve_tokio(move |addr, rx| async move {
        s.run::<Tokio>(addr, async move {
            let _ = rx.await;
        })
        .await
        .unwrap();
    })
    .await;
    (format!("http://{addr}"), stop)
}

#[tokio::test]
async fn web_push_over_loopback_decrypts_to_new_msg_with_a_vapid_jwt_for_the_served_key() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let service = WebPushService::new(1, clock.clone());
    let (base, _stop) = start_web(&service).await;
    let key = vapid_key();
    service.expect_vapid_key(key.public_key_b64url());
    let sub = service.subscribe(&base);
    let config = WorkerConfig {
        web_push: Some(web_config(&key)),
        limits: limits(),
        ..WorkerConfig::default()
    };
    let transport = HttpsTransport::new().unwrap().allowing_http();
    let (worker, _gone) = PushWorker::spawn(config, transport, clock_fn(clock.clone()), [1; 32]);
    // FCM and APNs are not configured: skipped, not queued.
    assert_eq!(
        worker.submit(
            user(1),
            PushTarget::Fcm { token: "t".into() },
            PushPayload::new_msg()
        ),
        Submitted::Unconfigured
    );
    assert_eq!(
        worker.submit(user(1), web_target(&sub), PushPayload::new_msg()),
        Submitted::Queued
    );
    let stats = settled(&worker, 1).await;
    assert_eq!((stats.delivered, stats.unconfigured), (1, 1), "{stats:?}");

    let got = service.received();
    assert_eq!(got.len(), 1);
    let push = &got[0];
    assert_eq!(push.status, 201);
    assert_eq!(
        push.plaintext.as_deref(),
        Ok(NEW_MSG),
        "exactly the zero-knowledge payload"
    );
    let vapid = push.vapid.as_ref().unwrap();
    assert_eq!(vapid.aud, base);
    assert_eq!(vapid.key, key.public_key_b64url());
    assert_eq!(vapid.sub, "mailto:ops@example.org");
    assert!(pushcrypto::is_uncompressed_p256_point(
        &pushcrypto::b64url_decode(key.public_key_b64url()).unwrap()
    ));
    assert_eq!(push.content_encoding.as_deref(), Some("aes128gcm"));
    assert_eq!(push.ttl.as_deref(), Some("86400"));
    assert_eq!(push.urgency.as_deref(), Some("high"));
    assert_eq!(push.topic.as_deref(), Some("new_msg"));
}

#[tokio::test]
async fn web_push_410_and_404_are_reported_gone_and_a_wrong_key_is_refused() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let service = WebPushService::new(2, clock.clone());
    let (base, _stop) = start_web(&service).await;
    let key = vapid_key();
    let unsubscribed = service.subscribe(&base);
    service.unsubscribe(&unsubscribed.id);
    let mut unknown = web_target(&service.subscribe(&base));
    if let PushTarget::WebPush { endpoint, .. } = &mut unknown {
        *endpoint = format!("{base}/wpush/never-issued");
    }
    let config = WorkerConfig {
        web_push: Some(web_config(&key)),
        limits: limits(),
        ..WorkerConfig::default()
    };
    let transport = HttpsTransport::new().unwrap().allowing_http();
    let (worker, mut gone) = PushWorker::spawn(config, transport, clock_fn(clock), [2; 32]);
    worker.submit(user(1), web_target(&unsubscribed), PushPayload::new_msg());
    worker.submit(user(2), unknown.clone(), PushPayload::new_msg());
    let mut reports = [gone.recv().await.unwrap(), gone.recv().await.unwrap()];
    reports.sort_by(|a, b| a.user.cmp(&b.user));
    assert_eq!(
        reports,
        [
            GoneTarget {
                user: user(1),
                target: web_target(&unsubscribed)
            },
            GoneTarget {
                user: user(2),
                target: unknown
            }
        ]
    );
    let statuses: Vec<u16> = service.received().iter().map(|r| r.status).collect();
    assert_eq!(statuses.len(), 2);
    assert!(
        statuses.contains(&410) && statuses.contains(&404),
        "{statuses:?}"
    );

    // A service expecting another VAPID key refuses (401): failed, not gone, not retried.
    let other = WebPushService::new(3, Arc::new(SystemClock));
    let (base2, _stop2) = start_web(&other).await;
    other.expect_vapid_key(
        VapidKey::generate(&mut ChaCha20Rng::seed_from_u64(5)).public_key_b64url(),
    );
    let sub = other.subscribe(&base2);
    worker.submit(user(3), web_target(&sub), PushPayload::new_msg());
    let stats = settled(&worker, 3).await;
    assert_eq!(
        (stats.gone, stats.failed, stats.retries),
        (2, 1, 0),
        "{stats:?}"
    );
    let r = &other.received()[0];
    assert_eq!(r.status, 401);
    assert!(
        r.vapid.as_ref().is_err_and(|e| e.contains("served")),
        "{:?}",
        r.vapid
    );
    assert_eq!(r.plaintext.as_deref(), Ok(NEW_MSG));
}

#[tokio::test]
async fn web_push_429_and_5xx_are_retried_within_the_bound() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let service = WebPushService::new(4, clock.clone());
    let (base, _stop) = start_web(&service).await;
    let key = vapid_key();
    let sub = service.subscribe(&base);
    let config = WorkerConfig {
        web_push: Some(web_config(&key)),
        limits: WorkerLimits {
            max_attempts: 3,
            ..limits()
        },
        ..WorkerConfig::default()
    };
    let transport = HttpsTransport::new().unwrap().allowing_http();
    let (worker, _gone) = PushWorker::spawn(config, transport, clock_fn(clock), [3; 32]);

    // 503 then 429 (Retry-After: 0), then accepted on the third attempt.
    service.fail_next(&[503], None);
    service.fail_next(&[429], Some(0));
    worker.submit(user(1), web_target(&sub), PushPayload::new_msg());
    let stats = settled(&worker, 1).await;
    assert_eq!((stats.delivered, stats.retries), (1, 2), "{stats:?}");
    let statuses: Vec<u16> = service.received().iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![503, 429, 201]);

    // Failing every time: exactly max_attempts requests, then given up.
    service.fail_next(&[500; 3], None);
    worker.submit(user(1), web_target(&sub), PushPayload::new_msg());
    let stats = settled(&worker, 2).await;
    assert_eq!(stats.gave_up, 1, "{stats:?}");
    assert_eq!(service.received().len(), 3 + 3);

    // A Retry-After beyond the worker's bound is not waited for.
    let before = service.received().len();
    service.fail_next(&[429], Some(3_600));
    worker.submit(user(1), web_target(&sub), PushPayload::new_msg());
    let stats = settled(&worker, 3).await;
    assert_eq!(stats.gave_up, 2, "{stats:?}");
    assert_eq!(service.received().len(), before + 1);
}

#[tokio::test]
async fn a_dead_push_service_never_blocks_the_caller() {
    let key = vapid_key();
    let config = WorkerConfig {
        web_push: Some(web_config(&key)),
        limits: WorkerLimits {
            queue_capacity: 4,
            max_concurrent: 2,
            ..limits()
        },
        ..WorkerConfig::default()
    };
    let (worker, _gone) =
        PushWorker::spawn(config, BlackHole, clock_fn(Arc::new(SystemClock)), [4; 32]);
    let service = WebPushService::new(5, Arc::new(SystemClock));
    let sub = service.subscribe("http://127.0.0.1:9");
    let mut queued = 0;
    let mut full = 0;
    for _ in 0..100 {
        // `submit` is synchronous: it cannot wait on the dead service.
        match worker.submit(user(1), web_target(&sub), PushPayload::new_msg()) {
            Submitted::Queued => queued += 1,
            Submitted::QueueFull => full += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(queued + full, 100);
    // At most the queue plus what the dispatcher already took (in flight, and one waiting
    // for a permit) got in; every other push was dropped and counted.
    assert!(queued <= 4 + 2 + 1, "{queued} queued");
    let stats = worker.stats();
    assert_eq!((stats.queued, stats.queue_full), (queued, full));
    // Later, the dispatcher holds `max_concurrent` requests to the dead service and waits
    // for a permit with one more; the queue refills to its capacity and drops the rest.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let later: Vec<Submitted> = (0..20)
        .map(|_| worker.submit(user(1), web_target(&sub), PushPayload::new_msg()))
        .collect();
    let queued_later = later.iter().filter(|s| **s == Submitted::Queued).count() as u64;
    assert!(queued + queued_later <= 4 + 2 + 1, "{later:?}");
    assert_eq!(later.last(), Some(&Submitted::QueueFull));
    let stats = worker.stats();
    assert_eq!(
        stats.delivered + stats.failed + stats.gave_up,
        0,
        "{stats:?}"
    );
}

#[tokio::test]
async fn fcm_over_loopback_oauth_grant_data_message_reauth_and_unregistered() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let service = FcmService::new(clock.clone());
    let s = service.clone();
    let (addr, _stop) = serve_tokio(move |addr, rx| async move {
        s.run::<Tokio>(addr, async move {
            let _ = rx.await;
        })
        .await
        .unwrap();
    })
    .await;
    let base = format!("http://{addr}");
    let account = ServiceAccount::from_json(&service.service_account_json(&base)).unwrap();
    let fcm = FcmConfig {
        endpoint: base.clone(),
        ..FcmConfig::new(account)
    };
    assert_eq!(fcm.token_url, format!("{base}/token"));
    let config = WorkerConfig {
        fcm: Some(fcm),
        limits: limits(),
        ..WorkerConfig::default()
    };
    let transport = HttpsTransport::new().unwrap().allowing_http();
    let (worker, mut gone) = PushWorker::spawn(config, transport, clock_fn(clock), [5; 32]);
    let target = |t: &str| PushTarget::Fcm { token: t.into() };

    worker.submit(user(1), target("tok-1"), PushPayload::new_msg());
    worker.submit(user(1), target("tok-2"), PushPayload::new_msg());
    let stats = settled(&worker, 2).await;
    assert_eq!(stats.delivered, 2, "{stats:?}");
    assert_eq!(service.token_requests(), vec![Ok(())], "one grant, cached");
    for r in service.received() {
        assert_eq!(r.status, 200);
        assert!(r.authorized);
        assert_eq!(r.message["data"], serde_json::json!({"type": "new_msg"}));
        assert_eq!(r.message["android"]["priority"], "high");
        assert_eq!(r.message["android"]["collapse_key"], "new_msg");
        assert!(r.message.get("notification").is_none());
    }

    // The access token is revoked: 401, a new grant, delivered.
    service.revoke_access_tokens();
    worker.submit(user(1), target("tok-1"), PushPayload::new_msg());
    let stats = settled(&worker, 3).await;
    assert_eq!((stats.delivered, stats.retries), (3, 1), "{stats:?}");
    assert_eq!(service.token_requests(), vec![Ok(()), Ok(())]);

    // Uninstalled: UNREGISTERED → gone.
    service.unregister("tok-2");
    worker.submit(user(2), target("tok-2"), PushPayload::new_msg());
    assert_eq!(
        gone.recv().await.unwrap(),
        GoneTarget {
            user: user(2),
            target: target("tok-2")
        }
    );
}

#[tokio::test]
async fn apns_over_loopback_provider_token_request_shape_and_gone() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let service = ApnsService::new(6, clock.clone(), KEY_ID, TEAM_ID, BUNDLE);
    let s = service.clone();
    let (addr, _stop) = serve_tokio(move |addr, rx| async move {
        s.run::<Tokio>(addr, async move {
            let _ = rx.await;
        })
        .await
        .unwrap();
    })
    .await;
    let apns = ApnsConfig::new(&service.p8_pem(), KEY_ID, TEAM_ID, BUNDLE)
        .unwrap()
        .with_endpoint(&format!("http://{addr}"));
    let config = WorkerConfig {
        apns: Some(apns),
        limits: limits(),
        ..WorkerConfig::default()
    };
    let transport = HttpsTransport::new().unwrap().allowing_http();
    let (worker, mut gone) = PushWorker::spawn(config, transport, clock_fn(clock), [6; 32]);
    let target = |t: &str| PushTarget::Apns { token: t.into() };

    worker.submit(user(1), target("0a1b2c"), PushPayload::new_msg());
    let stats = settled(&worker, 1).await;
    assert_eq!(stats.delivered, 1, "{stats:?}");
    let r = &service.received()[0];
    assert_eq!(r.status, 200);
    let (kid, iss, _) = r.provider_token.clone().unwrap();
    assert_eq!((kid.as_str(), iss.as_str()), (KEY_ID, TEAM_ID));
    assert_eq!(r.topic.as_deref(), Some(BUNDLE));
    assert_eq!(r.push_type.as_deref(), Some("alert"));
    assert_eq!(r.priority.as_deref(), Some("10"));
    assert_eq!(r.collapse_id.as_deref(), Some("new_msg"));
    assert_eq!(r.body["type"], "new_msg");
    assert_eq!(r.body["aps"]["mutable-content"], 1);
    let text = r.body.to_string();
    assert!(!text.contains("0a1b2c") && !text.contains("u0"), "{text}");

    // Unregistered (410) and a token that is not hex (never sent) are gone.
    service.unregister("0a1b2c");
    worker.submit(user(1), target("0a1b2c"), PushPayload::new_msg());
    worker.submit(user(2), target("not-hex"), PushPayload::new_msg());
    let mut reports = [gone.recv().await.unwrap(), gone.recv().await.unwrap()];
    reports.sort_by(|a, b| a.user.cmp(&b.user));
    assert_eq!(reports[0].target, target("0a1b2c"));
    assert_eq!(reports[1].target, target("not-hex"));
    assert_eq!(
        service.received().len(),
        2,
        "the non-hex token was never sent"
    );
    assert_eq!(service.received()[1].status, 410);
}

// ------------------------------------------------------------------ turmoil

const WEB: &str = "webpush";
const FCM: &str = "fcm";
const APNS: &str = "apns";
const PORT: u16 = 443;

fn host<S, F, Fut>(sim: &mut turmoil::Sim<'_>, name: &str, service: S, run: F)
where
    S: Clone + 'static,
    F: Fn(S, SocketAddr) -> Fut + 'static,
    Fut: Future<Output = std::io::Result<()>> + 'static,
{
    sim.host(name, move || {
        let fut = run(
            service.clone(),
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, PORT)),
        );
        async move {
            fut.await?;
            Ok(())
        }
    });
}

/// Every kind on turmoil through the network seam, from a seed: delivered with real
/// cryptography, a 503 retried, a partition survived by retrying, 410 / UNREGISTERED gone.
#[test]
fn every_kind_on_turmoil() {
    let mut sim = turmoil::Builder::new()
        .rng_seed(12)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(10))
        .simulation_duration(Duration::from_secs(120))
        .build();
    let clock: Arc<dyn Clock> = Arc::new(SimClock::default());
    let web = WebPushService::new(7, clock.clone());
    let fcm = FcmService::new(clock.clone());
    let apns = ApnsService::new(8, clock.clone(), KEY_ID, TEAM_ID, BUNDLE);
    host(&mut sim, WEB, web.clone(), |s: WebPushService, a| {
        s.run::<Turmoil>(a, std::future::pending())
    });
    host(&mut sim, FCM, fcm.clone(), |s: FcmService, a| {
        s.run::<Turmoil>(a, std::future::pending())
    });
    host(&mut sim, APNS, apns.clone(), |s: ApnsService, a| {
        s.run::<Turmoil>(a, std::future::pending())
    });

    let key = vapid_key();
    web.expect_vapid_key(key.public_key_b64url());
    let base = format!("http://{WEB}:{PORT}");
    let sub = web.subscribe(&base);
    let dropped = web.subscribe(&base);
    web.unsubscribe(&dropped.id);
    let fcm_base = format!("http://{FCM}:{PORT}");
    let account = ServiceAccount::from_json(&fcm.service_account_json(&fcm_base)).unwrap();
    let config = WorkerConfig {
        web_push: Some(web_config(&key)),
        fcm: Some(FcmConfig {
            endpoint: fcm_base,
            ..FcmConfig::new(account)
        }),
        apns: Some(
            ApnsConfig::new(&apns.p8_pem(), KEY_ID, TEAM_ID, BUNDLE)
                .unwrap()
                .with_endpoint(&format!("http://{APNS}:{PORT}")),
        ),
        limits: WorkerLimits {
            backoff_base_ms: 500,
            backoff_max_ms: 5_000,
            max_attempts: 5,
            ..WorkerLimits::default()
        },
    };
    fcm.unregister("fcm-gone");
    web.fail_next(&[503], None);

    sim.client("relay", async move {
        let (worker, mut gone) = PushWorker::spawn(
            config,
            NetPushTransport::new(Turmoil::connector()),
            clock_fn(Arc::new(SimClock::default())),
            [9; 32],
        );
        worker.submit(user(1), web_target(&sub), PushPayload::new_msg());
        worker.submit(
            user(1),
            PushTarget::Fcm {
                token: "fcm-1".into(),
            },
            PushPayload::new_msg(),
        );
        worker.submit(
            user(1),
            PushTarget::Apns {
                token: "ab12".into(),
            },
            PushPayload::new_msg(),
        );
        let stats = settled(&worker, 3).await;
        assert_eq!(stats.delivered, 3, "{stats:?}");
        assert_eq!(stats.retries, 1, "the 503 was retried: {stats:?}");

        // The push services are unreachable for a while: retried until the link returns.
        for h in [WEB, FCM, APNS] {
            turmoil::partition("relay", h);
        }
        worker.submit(user(2), web_target(&sub), PushPayload::new_msg());
        worker.submit(
            user(2),
            PushTarget::Apns {
                token: "cd34".into(),
            },
            PushPayload::new_msg(),
        );
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        for h in [WEB, FCM, APNS] {
            turmoil::repair("relay", h);
        }
        let stats = settled(&worker, 5).await;
        assert_eq!(stats.delivered, 5, "{stats:?}");

        // Gone targets come back on the channel, exactly as submitted.
        worker.submit(user(3), web_target(&dropped), PushPayload::new_msg());
        worker.submit(
            user(3),
            PushTarget::Fcm {
                token: "fcm-gone".into(),
            },
            PushPayload::new_msg(),
        );
        let mut reports = [gone.recv().await.unwrap(), gone.recv().await.unwrap()];
        reports.sort_by_key(|r| r.target.kind());
        assert_eq!(
            reports[0].target,
            PushTarget::Fcm {
                token: "fcm-gone".into()
            }
        );
        assert_eq!(reports[1].target, web_target(&dropped));
        Ok(())
    });
    sim.run().unwrap();

    // Every delivered Web Push decrypted to exactly the payload and carried a VAPID JWT for
    // the served key and this service's origin; nothing else reached any service.
    let pushes = web.received();
    let delivered: Vec<_> = pushes.iter().filter(|p| p.status == 201).collect();
    assert_eq!(delivered.len(), 2);
    for p in &delivered {
        assert_eq!(p.plaintext.as_deref(), Ok(NEW_MSG));
        let v = p.vapid.as_ref().unwrap();
        assert_eq!(
            (v.aud.as_str(), v.key.as_str()),
            (base.as_str(), key.public_key_b64url())
        );
    }
    assert!(pushes.iter().any(|p| p.status == 503) && pushes.iter().any(|p| p.status == 410));
    assert!(
        fcm.received()
            .iter()
            .all(|r| r.authorized && r.message["data"] == serde_json::json!({"type": "new_msg"}))
    );
    assert_eq!(fcm.token_requests(), vec![Ok(())]);
    let apns_ok: Vec<_> = apns
        .received()
        .into_iter()
        .filter(|r| r.status == 200)
        .collect();
    assert_eq!(apns_ok.len(), 2);
    assert!(
        apns_ok
            .iter()
            .all(|r| r.provider_token.is_ok() && r.body["type"] == "new_msg")
    );
}
