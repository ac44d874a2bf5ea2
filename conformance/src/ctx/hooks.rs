//! Hooks: what the runner can do to the relay besides speaking its API, when it was given the
//! means.
//!
//! * The payment processor: with the webhook secret the case posts HMAC-SHA256-signed webhooks
//!   ([`Ctx::pay`], [`Ctx::pay_raw`]). Without it, a case that needs it is skipped, not failed.
//! * The test clock: with `--clock-hook`, [`Ctx::advance_clock`] posts to
//!   [`ADVANCE_CLOCK_PATH`]. Without it, a case that needs it is skipped.
//! * The push probe: with `--push-probe URL` the runner is a Web Push service listening at
//!   URL ([`PushProbe`]); cases subscribe with endpoints under it and check what the relay
//!   delivers. Without it, a case that needs it is skipped.

use bytes::Bytes;
use hmac::{Hmac, KeyInit as _, Mac as _};
use http::{HeaderName, Method};
use serde_json::json;
use sha2::Sha256;
use wire::http::paths;

use super::Ctx;
use super::requests::{Resp, u};
use crate::verdict::Failure;

/// The documented test-mode clock endpoint (see README.md).
pub const ADVANCE_CLOCK_PATH: &str = "/api/v1/test/advance-clock";

impl Ctx {
    /// Acts as the payment processor: posts a signed webhook for `order_id`.
    pub async fn pay(
        &mut self,
        order_id: &str,
        status: &str,
        paid_usdt: u64,
    ) -> Result<Resp, Failure> {
        let Some(secret) = self.shared.hooks.payment_secret.clone() else {
            return Err(Failure::Skip(
                "no payment webhook secret (--payment-secret)".into(),
            ));
        };
        let payment_id = format!("pay-{}", self.uuid());
        let body = json!({"payment_id": payment_id, "order_id": order_id, "payment_status": status, "paid_usdt": paid_usdt}).to_string();
        self.pay_raw(&secret, body.into_bytes()).await
    }

    /// Posts a webhook body signed with `secret`.
    pub async fn pay_raw(&mut self, secret: &[u8], body: Vec<u8>) -> Result<Resp, Failure> {
        let mut mac = <Hmac<Sha256>>::new_from_slice(secret)
            .map_err(|e| Failure::Fail(format!("HMAC key: {e}")))?;
        mac.update(&body);
        let sig: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let header = HeaderName::from_static(wire::http::PAYMENT_SIGNATURE_HEADER);
        self.req_raw(
            Method::POST,
            paths::PAYMENT_WEBHOOK,
            None,
            Bytes::from(body),
            Some("application/json"),
            &[(header, sig)],
        )
        .await
    }

    /// The payment webhook secret (cases that forge signatures need it to exist).
    pub fn payment_secret(&self) -> Result<Vec<u8>, Failure> {
        self.shared
            .hooks
            .payment_secret
            .clone()
            .ok_or_else(|| Failure::Skip("no payment webhook secret (--payment-secret)".into()))
    }

    /// Advances the relay's test clock by `ms`; returns the relay's new `now_ms`. A later
    /// failure reason says the clock was advanced.
    pub async fn advance_clock(&mut self, ms: u64) -> Result<u64, Failure> {
        match self.shared.hooks.clock {
            None => Err(Failure::Skip("no test clock (--clock-hook)".into())),
            Some(ClockControl::Http) => {
                let now = async {
                    let v = self
                        .post(ADVANCE_CLOCK_PATH, None, &json!({"ms": ms}))
                        .await?
                        .ok()?;
                    u(&v, "now_ms")
                }
                .await
                .map_err(|f| f.in_setup("advancing the test clock"))?;
                if ms > 0 {
                    self.step(format!(
                        "the relay's clock was advanced by {}",
                        human_ms(ms)
                    ));
                }
                Ok(now)
            }
        }
    }

    /// `kill -9` of the relay process and a restart on its data directory (`--relay-cmd`); a
    /// later failure reason says so.
    pub async fn restart_relay(&mut self) -> Result<(), Failure> {
        let Some(process) = self.shared.hooks.process.clone() else {
            return Err(Failure::Skip("no relay process (--relay-cmd)".into()));
        };
        let mut p = process.lock().await;
        p.kill_and_restart().await.map_err(|e| {
            Failure::Fail(format!("the relay did not come back after kill -9: {e}"))
        })?;
        self.step("the relay was killed (kill -9) and restarted on its data directory");
        Ok(())
    }
}

impl Ctx {
    /// [`Ctx::restart_relay`], and how long it took on the wall clock: a case judging a
    /// credential whose life is real time must know whether it could have expired meanwhile.
    #[allow(
        clippy::disallowed_methods,
        reason = "only tells a case whether its object outlived the restart; the verdict comes from the relay's answers"
    )]
    pub async fn restart_relay_timed(&mut self) -> Result<std::time::Duration, Failure> {
        let start = std::time::Instant::now();
        self.restart_relay().await?;
        Ok(start.elapsed())
    }
}

/// `3600000` as `1 h`, `61000` as `61 s`, `1500` as `1500 ms`.
fn human_ms(ms: u64) -> String {
    match ms {
        m if m % 3_600_000 == 0 => format!("{} h", m / 3_600_000),
        m if m % 60_000 == 0 => format!("{} min", m / 60_000),
        m if m % 1_000 == 0 => format!("{} s", m / 1_000),
        m => format!("{m} ms"),
    }
}

/// How the runner advances the relay's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockControl {
    /// `POST /api/v1/test/advance-clock` on the relay (see README.md); the embedded relay
    /// serves it too (test mode).
    Http,
}

/// The runner acting as a Web Push service (`--push-probe URL`): it creates subscriptions
/// under `base` (`{base}/wpush/{id}`), decrypts every RFC 8291 body it receives with the
/// subscription's private key and verifies the VAPID JWT (`standins::WebPushService`).
#[derive(Debug, Clone)]
pub struct PushProbe {
    /// `http://host:port` as the relay reaches the probe.
    pub base: String,
    /// The service (shared with its listener task).
    pub service: standins::WebPushService,
}

impl Ctx {
    /// The push probe, or a skip.
    pub fn push_probe(&self) -> Result<PushProbe, Failure> {
        self.shared
            .hooks
            .push_probe
            .clone()
            .ok_or_else(|| Failure::Skip("no push probe (--push-probe URL)".into()))
    }

    /// How long to wait for something expected (`--wait-ms`).
    pub fn wait(&self) -> std::time::Duration {
        self.shared.wait
    }
}

/// Optional hooks the runner was given.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    /// The relay process the runner started (`--relay-cmd`): the DURABILITY cases kill and
    /// restart it.
    pub process: Option<std::sync::Arc<tokio::sync::Mutex<crate::process::RelayProcess>>>,
    /// The push probe: the runner is a Web Push service the relay delivers to.
    pub push_probe: Option<PushProbe>,
    /// The payment webhook's HMAC secret: the runner acts as the payment processor.
    pub payment_secret: Option<Vec<u8>>,
    /// The test clock, if the relay offers one.
    pub clock: Option<ClockControl>,
}
