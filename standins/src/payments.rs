//! The payment-processor stand-in: a hosted invoice page and signed webhooks to the relay.
//!
//! A real processor shows the buyer a hosted invoice page (the relay's order carries its URL,
//! `Config::payment_page_base/{order_id}`) and, once paid, POSTs a signed webhook to the relay.
//! This one:
//!
//! * `GET /invoice/{order_id}`: a small JSON page (`order_id`, `status`: `pending`/`paid`,
//!   the payments made);
//! * `POST /invoice/{order_id}/pay` with a [`WebhookPlan`] (JSON, every field optional):
//!   "pays" the order (202); [`PaymentProcessor::pay`] does the same in-process;
//! * then sends `POST /api/v1/payments/webhook` to the relay, body
//!   [`wire::http::PaymentWebhook`], header [`PAYMENT_SIGNATURE_HEADER`] = lowercase hex
//!   HMAC-SHA256(secret, raw body), following the plan's fault knobs: a delay, duplicates
//!   (identical bodies, same `payment_id`, spaced apart), forged copies (wrong signature, sent
//!   first), retries until a 2xx (a real processor retries too; a 401 is final), and
//!   optionally a progress report first (same `payment_id`, `partially_paid`, a smaller
//!   cumulative amount: the processor reports a payment's amount so far as it changes). Reordering
//!   across orders comes from per-payment delays: a later payment with a shorter delay
//!   arrives first.
//!
//! Every delivery attempt is recorded ([`PaymentProcessor::deliveries`]) for the oracles.
//! Payment ids are `pay-<n>` from a counter, so a run is deterministic. The pending work
//! lives in the shared handle, not in the host's tasks, so the handle outlives a restart of
//! the processor's host.

use std::{
    fmt, io,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use hmac::{Hmac, KeyInit as _, Mac as _};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tokio::sync::Notify;
use tracing::{debug, info, warn};
use wire::{
    OrderId,
    http::{PAYMENT_SIGNATURE_HEADER, PaymentStatus, PaymentWebhook, paths},
};

use seam::net::{Connector, Endpoint, HttpClient, HttpRequest, Network, serve};

use crate::service::lock;

/// Most payments waiting for the processor's worker; [`PaymentProcessor::pay`] refuses more.
pub const MAX_PENDING_PAYMENTS: usize = 4096;
/// Timeout of one webhook delivery attempt.
pub const WEBHOOK_TIMEOUT_MS: u64 = 5_000;

/// How one payment's webhook is delivered (the simulator's fault plan fills this in).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WebhookPlan {
    /// The verdict sent.
    pub payment_status: PaymentStatus,
    /// Whole USDT received.
    pub paid_usdt: u64,
    /// Delay before the first genuine copy, in ms.
    pub delay_ms: u64,
    /// Extra identical copies (same `payment_id`, same bytes) after the first.
    pub duplicates: u32,
    /// Spacing between copies, in ms.
    pub duplicate_spacing_ms: u64,
    /// Copies with a wrong signature, sent before the genuine ones (the relay must refuse
    /// them with 401 and change nothing).
    pub forged: u32,
    /// Attempts per copy until a 2xx (network errors and non-401 refusals are retried).
    pub max_attempts: u32,
    /// Delay between attempts of one copy, in ms.
    pub retry_delay_ms: u64,
    /// A report of the same payment before the plan's own: `partially_paid` with this
    /// cumulative amount (what a processor sends as a payment arrives in parts), at the
    /// plan's delay; the plan's copies follow `PROGRESS_LEAD_MS` (1.5 s) later.
    pub progress_usdt: Option<u64>,
}

/// How long before a payment's final report its progress report goes out.
pub(crate) const PROGRESS_LEAD_MS: u64 = 1_500;

impl Default for WebhookPlan {
    fn default() -> Self {
        Self {
            payment_status: PaymentStatus::Finished,
            paid_usdt: 0,
            delay_ms: 0,
            duplicates: 0,
            duplicate_spacing_ms: 0,
            forged: 0,
            max_attempts: 10,
            retry_delay_ms: 1_000,
            progress_usdt: None,
        }
    }
}

impl WebhookPlan {
    /// A full payment of `paid_usdt`, delivered once, at once.
    pub fn paid(paid_usdt: u64) -> Self {
        Self {
            paid_usdt,
            ..Self::default()
        }
    }
}

/// What happened to one webhook attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WebhookDelivery {
    /// The order.
    pub order_id: OrderId,
    /// The processor's payment id (duplicates share it).
    pub payment_id: String,
    /// Which copy (0 = first genuine copy, then its duplicates; forged copies are numbered
    /// before it, negative; a progress report after the duplicates).
    pub copy: i64,
    /// Whether the signature was forged.
    pub forged: bool,
    /// The verdict this copy reported.
    pub payment_status: PaymentStatus,
    /// The cumulative amount this copy reported.
    pub paid_usdt: u64,
    /// Attempt number of this copy, from 1.
    pub attempt: u32,
    /// The relay's status, or `None` when no response arrived.
    pub status: Option<u16>,
}

/// A payment as the invoice page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Payment {
    /// The processor's payment id.
    pub payment_id: String,
    /// The order.
    pub order_id: OrderId,
    /// The plan it was made with.
    pub plan: WebhookPlan,
}

/// One copy to send.
#[derive(Debug, Clone)]
struct Copy {
    payment: Payment,
    copy: i64,
    forged: bool,
    delay_ms: u64,
    /// What it reports: the plan's verdict and amount, or a progress report's.
    report: (PaymentStatus, u64),
}

#[derive(Debug, Default)]
struct Inner {
    next_payment: u64,
    payments: Vec<Payment>,
    queue: std::collections::VecDeque<Copy>,
    deliveries: Vec<WebhookDelivery>,
}

/// Why a payment was refused.
#[derive(Debug, thiserror::Error)]
pub enum PayError {
    /// More than [`MAX_PENDING_PAYMENTS`] copies wait for the worker.
    #[error("too many pending payments")]
    QueueFull,
}

/// A handle to the payment processor; clones share its state (keep one in the simulator to
/// pay orders and read [`deliveries`](Self::deliveries)).
#[derive(Clone)]
pub struct PaymentProcessor {
    secret: Arc<Vec<u8>>,
    relay: Endpoint,
    inner: Arc<Mutex<Inner>>,
    wake: Arc<Notify>,
}

impl fmt::Debug for PaymentProcessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PaymentProcessor")
            .field("relay", &self.relay)
            .field("secret", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl PaymentProcessor {
    /// A processor that signs with `secret` and sends webhooks to the relay at `relay`.
    pub fn new(secret: impl Into<Vec<u8>>, relay: Endpoint) -> Self {
        Self {
            secret: Arc::new(secret.into()),
            relay,
            inner: Arc::default(),
            wake: Arc::default(),
        }
    }

    /// Pays `order_id` following `plan`; returns the payment id. The webhooks go out from
    /// the processor's host (its [`run`](Self::run) / [`serve`](Self::serve) task).
    pub fn pay(&self, order_id: OrderId, plan: WebhookPlan) -> Result<String, PayError> {
        let mut inner = self.lock();
        let copies = u64::from(plan.forged)
            + 1
            + u64::from(plan.duplicates)
            + u64::from(plan.progress_usdt.is_some());
        if inner.queue.len() as u64 + copies > MAX_PENDING_PAYMENTS as u64 {
            return Err(PayError::QueueFull);
        }
        inner.next_payment += 1;
        let payment = Payment {
            payment_id: format!("pay-{}", inner.next_payment),
            order_id,
            plan,
        };
        let plan = &payment.plan;
        let report = (plan.payment_status, plan.paid_usdt);
        let mut delay_ms = plan.delay_ms;
        if let Some(progress) = plan.progress_usdt {
            inner.queue.push_back(Copy {
                payment: payment.clone(),
                copy: i64::from(plan.duplicates) + 1,
                forged: false,
                delay_ms,
                report: (PaymentStatus::PartiallyPaid, progress),
            });
            delay_ms = delay_ms.saturating_add(PROGRESS_LEAD_MS);
        }
        for i in 0..plan.forged {
            inner.queue.push_back(Copy {
                payment: payment.clone(),
                copy: i64::from(i) - i64::from(plan.forged),
                forged: true,
                delay_ms,
                report,
            });
        }
        for i in 0..=plan.duplicates {
            inner.queue.push_back(Copy {
                payment: payment.clone(),
                copy: i64::from(i),
                forged: false,
                delay_ms: delay_ms
                    .saturating_add(plan.duplicate_spacing_ms.saturating_mul(u64::from(i))),
                report,
            });
        }
        let id = payment.payment_id.clone();
        info!(order_id = %payment.order_id, payment_id = id, "order paid at the processor");
        inner.payments.push(payment);
        drop(inner);
        self.wake.notify_one();
        Ok(id)
    }

    /// Every webhook attempt so far, in the order they completed.
    pub fn deliveries(&self) -> Vec<WebhookDelivery> {
        self.lock().deliveries.clone()
    }

    /// Every payment made so far.
    pub fn payments(&self) -> Vec<Payment> {
        self.lock().payments.clone()
    }

    /// The processor's HTTP app (invoice page and pay API). The webhooks are sent by
    /// [`run`](Self::run) / [`serve`](Self::serve), which also serve this app.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/invoice/{order_id}", get(invoice))
            .route("/invoice/{order_id}/pay", post(pay_route))
            .with_state(self.clone())
    }

    /// Binds `addr` on `N` and serves until `shutdown`, sending webhooks meanwhile.
    pub async fn run<N: Network>(
        self,
        addr: SocketAddr,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> io::Result<()> {
        let listener = N::bind(addr).await?;
        self.serve::<N>(listener, shutdown).await
    }

    /// Serves on `listener` until `shutdown`, sending webhooks meanwhile.
    pub async fn serve<N: Network>(
        self,
        listener: N::Listener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> io::Result<()> {
        let worker = tokio::spawn(self.clone().send_webhooks(N::connector()));
        let served = serve(listener, self.router(), shutdown).await;
        worker.abort();
        served
    }

    /// Takes queued copies and sends each on its own task (after its delay).
    async fn send_webhooks<C: Connector>(self, connector: C) {
        let http = HttpClient::new(connector, self.relay.clone())
            .with_timeout(Duration::from_millis(WEBHOOK_TIMEOUT_MS));
        loop {
            let next = self.lock().queue.pop_front();
            match next {
                Some(copy) => {
                    tokio::spawn(self.clone().deliver(http.clone(), copy));
                }
                None => self.wake.notified().await,
            }
        }
    }

    async fn deliver<C: Connector>(self, http: HttpClient<C>, copy: Copy) {
        tokio::time::sleep(Duration::from_millis(copy.delay_ms)).await;
        let webhook = PaymentWebhook {
            payment_id: copy.payment.payment_id.clone(),
            order_id: copy.payment.order_id.clone(),
            payment_status: copy.report.0,
            paid_usdt: copy.report.1,
        };
        let Ok(body) = serde_json::to_vec(&webhook) else {
            return;
        };
        let signature = if copy.forged {
            sign(b"not-the-shared-secret", &body)
        } else {
            sign(&self.secret, &body)
        };
        let attempts = copy.payment.plan.max_attempts.max(1);
        for attempt in 1..=attempts {
            let request = HttpRequest::post(paths::PAYMENT_WEBHOOK)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(
                    http::HeaderName::from_static(PAYMENT_SIGNATURE_HEADER),
                    signature.clone(),
                )
                .body(body.clone());
            let status = match http.send(request).await {
                Ok(response) => Some(response.status.as_u16()),
                Err(error) => {
                    debug!(%error, "webhook not delivered");
                    None
                }
            };
            self.lock().deliveries.push(WebhookDelivery {
                order_id: copy.payment.order_id.clone(),
                payment_id: copy.payment.payment_id.clone(),
                copy: copy.copy,
                forged: copy.forged,
                payment_status: copy.report.0,
                paid_usdt: copy.report.1,
                attempt,
                status,
            });
            match status {
                Some(s) if (200..300).contains(&s) || s == 401 => return,
                _ => {
                    tokio::time::sleep(Duration::from_millis(copy.payment.plan.retry_delay_ms))
                        .await;
                }
            }
        }
        warn!(order_id = %copy.payment.order_id, attempts, "webhook given up");
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }
}

/// Lowercase hex HMAC-SHA256(`secret`, `body`): the webhook signature.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let Ok(mut mac) = <Hmac<Sha256>>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[derive(Serialize)]
struct InvoicePage {
    order_id: String,
    status: &'static str,
    payments: Vec<Payment>,
}

async fn invoice(State(p): State<PaymentProcessor>, Path(order_id): Path<String>) -> Response {
    let payments: Vec<Payment> = p
        .lock()
        .payments
        .iter()
        .filter(|pay| pay.order_id.as_str() == order_id)
        .cloned()
        .collect();
    let status = if payments.is_empty() {
        "pending"
    } else {
        "paid"
    };
    Json(InvoicePage {
        order_id,
        status,
        payments,
    })
    .into_response()
}

async fn pay_route(
    State(p): State<PaymentProcessor>,
    Path(order_id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let plan: WebhookPlan = match wire::http::decode_body(&body) {
        Ok(plan) => plan,
        Err(error) => return (StatusCode::BAD_REQUEST, error.to_string()).into_response(),
    };
    let Ok(order_id) = OrderId::parse(&order_id) else {
        return (StatusCode::BAD_REQUEST, "invalid order id").into_response();
    };
    match p.pay(order_id, plan) {
        Ok(payment_id) => (
            StatusCode::ACCEPTED,
            Json(serde_json::json!({ "payment_id": payment_id })),
        )
            .into_response(),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, error.to_string()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_lowercase_hex_hmac_sha256() {
        // RFC 4231 test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn pay_queues_forged_then_genuine_copies() {
        let p = PaymentProcessor::new("s", Endpoint::parse("http://relay:8080").unwrap());
        let plan = WebhookPlan {
            duplicates: 2,
            duplicate_spacing_ms: 10,
            forged: 1,
            delay_ms: 5,
            ..WebhookPlan::paid(10)
        };
        let id = p.pay(OrderId::parse("o-1").unwrap(), plan).unwrap();
        assert_eq!(id, "pay-1");
        let queue: Vec<(i64, bool, u64)> = p
            .lock()
            .queue
            .iter()
            .map(|c| (c.copy, c.forged, c.delay_ms))
            .collect();
        assert_eq!(
            queue,
            [(-1, true, 5), (0, false, 5), (1, false, 15), (2, false, 25)]
        );
    }
}
