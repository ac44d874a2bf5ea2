//! Stand-ins for the outside world, runnable on either network (turmoil hosts or loopback):
//!
//! * [`PaymentProcessor`]: hosted invoice page, then signed webhooks to the relay, with fault
//!   knobs ([`WebhookPlan`]: delay, duplicates, forged signatures, retries);
//! * [`WebPushService`], [`FcmService`], [`ApnsService`]: the real push services' contracts
//!   with real cryptography: the Web Push one creates subscriptions, decrypts every RFC 8291
//!   body and verifies the VAPID JWT; FCM checks the OAuth grant and the data message; APNs
//!   the ES256 provider token and the request shape ([`pushcrypto`] holds the receiving
//!   side's cryptography, written independently of the relay's `relay-push`).
//!
//! Each is a cheap clonable handle: run one clone inside a host
//! (`processor.clone().run::<Turmoil>(addr, shutdown)`), keep another to drive it and to read
//! what happened. What they share (serving on either network, the lock on their state, the
//! bounded record of what they received) is in one private module, `service`.

mod apns;
mod fcm;
mod payments;
pub mod pushcrypto;
mod service;
mod webpush;

pub use apns::{
    APNS_PROVIDER_TOKEN_MAX_AGE_S, ApnsService, MAX_APNS_BODY_BYTES, MAX_RECORDED_APNS,
    ReceivedApns,
};
pub use fcm::{
    FCM_SCOPE, FCM_TEST_CLIENT_EMAIL, FCM_TEST_KEY_PEM, FCM_TEST_PROJECT, FCM_TOKEN_LIFETIME_S,
    FcmService, MAX_RECORDED_FCM, ReceivedFcm,
};
pub use payments::{
    MAX_PENDING_PAYMENTS, PayError, Payment, PaymentProcessor, WEBHOOK_TIMEOUT_MS, WebhookDelivery,
    WebhookPlan, sign,
};
pub use webpush::{
    MAX_RECORDED_WEB_PUSHES, MAX_WEB_PUSH_BODY_BYTES, ReceivedWebPush, WebPushService,
    WebPushSubscription,
};
