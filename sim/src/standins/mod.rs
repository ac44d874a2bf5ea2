//! Stand-ins for the outside world, runnable on either network (turmoil hosts or loopback):
//!
//! * [`PaymentProcessor`]: hosted invoice page, then signed webhooks to the relay, with fault
//!   knobs ([`WebhookPlan`]: delay, duplicates, forged signatures, retries);
//! * [`PushService`]: records every push the relay server delivers.
//!
//! Both are cheap clonable handles: run one clone inside a host
//! (`processor.clone().run::<Turmoil>(addr, shutdown)`), keep another to drive it and to read
//! what happened.

mod payments;
mod push;

pub use payments::{
    MAX_PENDING_PAYMENTS, PayError, Payment, PaymentProcessor, WEBHOOK_TIMEOUT_MS, WebhookDelivery,
    WebhookPlan, sign,
};
pub use push::{MAX_PUSH_BODY_BYTES, MAX_RECORDED_PUSHES, PushService, RecordedPush};
