//! The push services of a run: the relay delivers its pushes for real
//! ([`RelayServer::with_push`](relay_server::RelayServer::with_push) over the simulated
//! network) to three stand-ins on the [`PUSH`] host that check them with real cryptography:
//!
//! | port | stand-in | clients registering there |
//! |---|---|---|
//! | [`WEB_PUSH_PORT`] | [`WebPushService`]: decrypts RFC 8291 bodies, verifies VAPID JWTs | push clients with `c % 3 == 0`: two browsers each (two subscriptions) |
//! | [`FCM_PORT`] | [`FcmService`]: OAuth grant, `messages:send` shape | `c % 3 == 1`: an Android token |
//! | [`APNS_PORT`] | [`ApnsService`]: ES256 provider token, request shape | `c % 3 == 2`: an iOS device token |
//!
//! The stand-ins check tokens against the relay's clock (the clock-jump faults move the relay's
//! idea of time, and the push services agree with it, or every JWT after a jump would be "from
//! the future") and stamp arrivals in simulated time, for the `push` oracle.
//!
//! In half of the seeds (drawn from the seed) one browser of the first Web Push client
//! **unsubscribes** when traffic starts: its push service answers `410 Gone` from then on, and
//! the relay must delete that subscription at the first `410` (the oracle checks no later push
//! reaches it). The client keeps its other subscription.

use std::sync::Arc;

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use relay_core::Config;
use relay_push::{
    ApnsConfig, FcmConfig, ServiceAccount, VapidKey, VapidSubject, WebPushConfig, WorkerConfig,
};

use crate::bounds::{PUSH, PUSH_PORT};
use crate::seeds::{TAG_PUSH, derive_seed};
use relay_server::PushDelivery;
use seam::clock::{Clock, SIM_EPOCH_BASE, SimClock};
use standins::{ApnsService, FcmService, WebPushService, WebPushSubscription};

/// Port of the Web Push stand-in on the [`PUSH`] host.
pub const WEB_PUSH_PORT: u16 = PUSH_PORT;
/// Port of the FCM stand-in on the [`PUSH`] host.
pub const FCM_PORT: u16 = WEB_PUSH_PORT + 1;
/// Port of the APNs stand-in on the [`PUSH`] host.
pub const APNS_PORT: u16 = WEB_PUSH_PORT + 2;
/// The VAPID `sub` the relay signs with.
pub const VAPID_SUBJECT: &str = "mailto:sim@example.org";
/// APNs key id, team id and bundle id of the run.
const APNS_IDS: (&str, &str, &str) = ("SIMKEY0001", "SIMTEAM001", "org.example.securechat");

/// Which push service a client registers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PushKind {
    /// Web Push (two subscriptions).
    Web,
    /// FCM (an Android token).
    Fcm,
    /// APNs (an iOS device token).
    Apns,
}

impl PushKind {
    /// The kind of client `c` (a function of the index only, so the scenario draw is untouched).
    pub fn of(c: usize) -> Self {
        match c % 3 {
            0 => Self::Web,
            1 => Self::Fcm,
            _ => Self::Apns,
        }
    }
}

/// The FCM token client `c` registers.
pub fn fcm_token(c: usize) -> String {
    format!("simfcm-c{c}")
}

/// The APNs device token client `c` registers (hex, as Apple's are).
pub fn apns_token(c: usize) -> String {
    format!("a9{c:06x}")
}

fn base(port: u16) -> String {
    format!("http://{PUSH}:{port}")
}

/// The three stand-ins and the relay's side of them.
#[derive(Clone)]
pub(super) struct PushWorld {
    pub(super) web: WebPushService,
    pub(super) fcm: FcmService,
    pub(super) apns: ApnsService,
    worker: WorkerConfig,
    seed: [u8; 32],
    /// Whether one browser of the first Web Push client unsubscribes when traffic starts.
    pub(super) revoke_one: bool,
}

impl std::fmt::Debug for PushWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushWorld")
            .field("revoke_one", &self.revoke_one)
            .finish_non_exhaustive()
    }
}

impl PushWorld {
    /// The stand-ins of run `seed`; they check tokens against `relay_clock`.
    pub(super) fn new(seed: u64, relay_clock: &Arc<dyn Clock>) -> Self {
        let mut rng = ChaCha20Rng::from_seed(derive_seed(seed, TAG_PUSH, 0));
        let stamp: Arc<dyn Clock> = Arc::new(SimClock::default());
        let web = WebPushService::new(rng.next_u64(), Arc::clone(relay_clock))
            .with_stamp_clock(Arc::clone(&stamp));
        let fcm = FcmService::new(Arc::clone(relay_clock)).with_stamp_clock(Arc::clone(&stamp));
        let (key_id, team_id, bundle) = APNS_IDS;
        let apns = ApnsService::new(
            rng.next_u64(),
            Arc::clone(relay_clock),
            key_id,
            team_id,
            bundle,
        )
        .with_stamp_clock(stamp);
        let key = VapidKey::generate(&mut rng);
        web.expect_vapid_key(key.public_key_b64url());
        let subject = VapidSubject::parse(VAPID_SUBJECT)
            .unwrap_or_else(|_| unreachable!("a static, valid subject"));
        let account = ServiceAccount::from_json(&fcm.service_account_json(&base(FCM_PORT)))
            .unwrap_or_else(|e| unreachable!("the stand-in's own key file: {e}"));
        let apns_config = ApnsConfig::new(&apns.p8_pem(), key_id, team_id, bundle)
            .unwrap_or_else(|e| unreachable!("the stand-in's own key: {e}"))
            .with_endpoint(&base(APNS_PORT));
        let worker = WorkerConfig {
            web_push: Some(WebPushConfig {
                allow_http: true,
                ..WebPushConfig::new(key, subject)
            }),
            fcm: Some(FcmConfig {
                endpoint: base(FCM_PORT),
                ..FcmConfig::new(account)
            }),
            apns: Some(apns_config),
            ..WorkerConfig::default()
        };
        let mut push_seed = [0u8; 32];
        rng.fill_bytes(&mut push_seed);
        Self {
            web,
            fcm,
            apns,
            worker,
            seed: push_seed,
            revoke_one: rng.next_u32().is_multiple_of(2),
        }
    }

    /// A delivery for one start of the relay, and `config` made to agree with it.
    pub(super) fn delivery(&self, config: &mut Config) -> PushDelivery {
        let delivery = PushDelivery::over_network(self.worker.clone(), self.seed);
        delivery.configure(config);
        delivery
    }

    /// A new subscription at the Web Push stand-in (what a browser's `pushManager.subscribe`
    /// gets from its push service).
    pub(super) fn subscribe(&self) -> WebPushSubscription {
        self.web.subscribe(&base(WEB_PUSH_PORT))
    }

    /// Every push the stand-ins received, in simulated ms, with what the oracle needs.
    pub(super) fn seen(&self) -> Vec<SeenPush> {
        let ms = |at: wire::UnixMs| at.0.saturating_sub(SIM_EPOCH_BASE.0);
        let mut out = Vec::new();
        for r in self.web.received() {
            let payload = match (&r.plaintext, &r.vapid) {
                (Err(e), _) => Err(format!("body does not decrypt: {e}")),
                (_, Err(e)) => Err(format!("VAPID: {e}")),
                (Ok(p), Ok(_)) => Ok(String::from_utf8_lossy(p).into_owned()),
            };
            out.push(SeenPush {
                kind: PushKind::Web,
                target: r.subscription,
                at_ms: ms(r.at),
                status: r.status,
                gone: matches!(r.status, 404 | 410),
                payload,
            });
        }
        for r in self.fcm.received() {
            let payload = if r.authorized {
                Ok(r.message.to_string())
            } else {
                Err("no live OAuth token".to_owned())
            };
            out.push(SeenPush {
                kind: PushKind::Fcm,
                target: r.token.unwrap_or_default(),
                at_ms: ms(r.at),
                status: r.status,
                gone: r.status == 404,
                payload,
            });
        }
        for r in self.apns.received() {
            let payload = match &r.provider_token {
                Ok(_) => Ok(r.body.to_string()),
                Err(e) => Err(format!("provider token: {e}")),
            };
            out.push(SeenPush {
                kind: PushKind::Apns,
                target: r.device_token,
                at_ms: ms(r.at),
                status: r.status,
                gone: r.status == 410,
                payload,
            });
        }
        out.sort_by_key(|p| p.at_ms);
        out
    }
}

/// One push as a stand-in received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenPush {
    /// Which service.
    pub kind: PushKind,
    /// Subscription id (Web Push) or token.
    pub target: String,
    /// Arrival, simulated ms.
    pub at_ms: u64,
    /// What the stand-in answered.
    pub status: u16,
    /// The answer tells the relay the target is gone (Web Push 404/410, FCM `UNREGISTERED`,
    /// APNs 410).
    pub gone: bool,
    /// The payload as the device would see it (Web Push: the decrypted body; FCM: the
    /// `message` object; APNs: the body), or why the stand-in could not accept it.
    pub payload: Result<String, String>,
}

/// Whether `payload` (of a push of `kind`) is exactly the zero-knowledge one: Web Push's body
/// is `{"type":"new_msg"}` byte for byte; FCM's `message` holds its token, `data` =
/// `{"type":"new_msg"}` and `android` options without `notification` or `data`; APNs' body is
/// `{"type":"new_msg"}` plus a fixed `aps` envelope.
pub fn zero_knowledge(kind: PushKind, payload: &str) -> Result<(), String> {
    const NEW_MSG: &str = r#"{"type":"new_msg"}"#;
    let value = || -> Result<serde_json::Value, String> {
        serde_json::from_str(payload).map_err(|e| format!("not JSON: {e}"))
    };
    let new_msg = serde_json::json!({"type": "new_msg"});
    match kind {
        PushKind::Web if payload == NEW_MSG => Ok(()),
        PushKind::Web => Err("the decrypted body is not exactly {\"type\":\"new_msg\"}".into()),
        PushKind::Fcm => {
            let v = value()?;
            let keys: Vec<&str> = v
                .as_object()
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            if v["data"] != new_msg {
                return Err("FCM data is not exactly {\"type\":\"new_msg\"}".into());
            }
            if keys
                .iter()
                .any(|k| !["token", "data", "android"].contains(k))
            {
                return Err(format!("FCM message has fields {keys:?}"));
            }
            let android = v["android"].as_object();
            if android.is_some_and(|a| a.contains_key("notification") || a.contains_key("data")) {
                return Err("FCM android options carry a notification or data".into());
            }
            Ok(())
        }
        PushKind::Apns => {
            let v = value()?;
            let mut keys: Vec<&str> = v
                .as_object()
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            keys.sort_unstable();
            if keys != ["aps", "type"] || v["type"] != "new_msg" {
                return Err(format!(
                    "APNs body has fields {keys:?} / type {}",
                    v["type"]
                ));
            }
            Ok(())
        }
    }
}
