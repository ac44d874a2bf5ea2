//! The delivery worker: a bounded queue in front of bounded concurrency, retries with
//! backoff, and a channel of targets that turned out to be gone.
//!
//! ```text
//!  relay shell ── submit() (try_send, never waits) ──► queue (WorkerLimits::queue_capacity)
//!                                                        │ dispatcher: one permit per request
//!                                                        ▼ (WorkerLimits::max_concurrent)
//!                        build request (sans-IO) ─► PushTransport::send (timeout) ─► classify
//!                                                        │
//!   Delivered: counted · Failed: logged (status, service code) · Retry: backoff, again
//!   Gone: GoneTarget on the gone channel ─► the shell turns it into Relay::handle_push_gone
//! ```
//!
//! * **Never blocks the caller**: [`PushWorker::submit`] is `try_send`; a full queue drops the
//!   push and counts it ([`PushStats::queue_full`]). Pushes are best effort: the message
//!   itself waits in the relay for the next `sync`.
//! * **A dead push service** costs at most `max_concurrent` requests in flight, each bounded
//!   by `request_timeout_ms`; a job waiting to retry gives its permit back and holds one of
//!   `max_retrying` slots instead (none free: it gives up). Message routing never waits on
//!   any of it.
//! * **Retries**: 429, 5xx and transport failures, at most `max_attempts` attempts, waiting
//!   `Retry-After` (delta-seconds) when the service sent it, else exponential backoff from
//!   `backoff_base_ms` with jitter, never longer than `backoff_max_ms` (a longer
//!   `Retry-After` gives up instead of waiting past the bound).
//! * **Credentials**: an FCM access token (fetched through the same transport, one fetch at a
//!   time) and an APNs provider token are cached; a 401 / `ExpiredProviderToken` drops the
//!   cached one and retries once with a new one.
//! * **Unconfigured kinds** are skipped: one warning at [`PushWorker::spawn`], then only a
//!   counter ([`PushStats::unconfigured`]).
//! * **Logs** name the target kind, the attempt, the HTTP status and the service's error code;
//!   never a user, endpoint, key, token, JWT or payload.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use relay_core::PushTarget;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tracing::{Instrument as _, debug, info, info_span, warn};
use wire::http::PushPayload;
use wire::{UnixMs, UserUuid};

use crate::apns::{self, ApnsConfig, ApnsError, ProviderToken};
use crate::fcm::{self, AccessToken, FcmConfig};
use crate::outcome::Outcome;
use crate::transport::{PushRequest, PushResponse, PushTransport, TransportError};
use crate::vapid::VapidSigner;
use crate::webpush::{self, WebPushConfig, WebPushError};

/// Default of [`WorkerLimits::queue_capacity`]: pushes waiting for a permit.
pub const PUSH_QUEUE_CAPACITY: usize = 1024;
/// Default of [`WorkerLimits::max_concurrent`]: requests in flight.
pub const MAX_CONCURRENT_PUSHES: usize = 32;
/// Default of [`WorkerLimits::max_retrying`]: pushes waiting to retry.
pub const MAX_RETRYING_PUSHES: usize = 256;
/// Default of [`WorkerLimits::max_attempts`]: attempts per push, the first included.
pub const PUSH_MAX_ATTEMPTS: u32 = 4;
/// Default of [`WorkerLimits::backoff_base_ms`]: the wait before the second attempt.
pub const PUSH_BACKOFF_BASE_MS: u64 = 1_000;
/// Default of [`WorkerLimits::backoff_max_ms`]: the longest wait between attempts.
pub const PUSH_BACKOFF_MAX_MS: u64 = 30_000;
/// Default of [`WorkerLimits::request_timeout_ms`]: one request, connect to last byte.
pub const PUSH_REQUEST_TIMEOUT_MS: u64 = 10_000;
/// Capacity of the gone channel; when the shell lags, reports are dropped and counted
/// ([`PushStats::gone_dropped`]): the next push to that target reports it again.
pub const GONE_CHANNEL_CAPACITY: usize = 256;

/// The worker's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerLimits {
    /// Pushes waiting for a permit; past it `submit` drops.
    pub queue_capacity: usize,
    /// Requests in flight at once.
    pub max_concurrent: usize,
    /// Pushes waiting between attempts.
    pub max_retrying: usize,
    /// Attempts per push (≥ 1).
    pub max_attempts: u32,
    /// First backoff, in ms.
    pub backoff_base_ms: u64,
    /// Longest backoff or honoured `Retry-After`, in ms.
    pub backoff_max_ms: u64,
    /// Timeout of one request, in ms.
    pub request_timeout_ms: u64,
}

impl Default for WorkerLimits {
    fn default() -> Self {
        Self {
            queue_capacity: PUSH_QUEUE_CAPACITY,
            max_concurrent: MAX_CONCURRENT_PUSHES,
            max_retrying: MAX_RETRYING_PUSHES,
            max_attempts: PUSH_MAX_ATTEMPTS,
            backoff_base_ms: PUSH_BACKOFF_BASE_MS,
            backoff_max_ms: PUSH_BACKOFF_MAX_MS,
            request_timeout_ms: PUSH_REQUEST_TIMEOUT_MS,
        }
    }
}

/// What the worker can deliver to; a kind left `None` is skipped.
#[derive(Debug, Clone, Default)]
pub struct WorkerConfig {
    /// Web Push (VAPID key and subject).
    pub web_push: Option<WebPushConfig>,
    /// FCM (service account).
    pub fcm: Option<FcmConfig>,
    /// APNs (signing key and ids).
    pub apns: Option<ApnsConfig>,
    /// Bounds.
    pub limits: WorkerLimits,
}

/// The wall clock, as epoch milliseconds (JWT `iat`/`exp` must be real time: the shell passes
/// its system clock, or the simulation's clock on turmoil).
pub type WallClock = Arc<dyn Fn() -> UnixMs + Send + Sync>;

/// A target the push service said no longer exists; the shell feeds it back to the relay
/// (`Relay::handle_push_gone`), which deletes it durably. `Debug` redacts the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoneTarget {
    /// The account.
    pub user: UserUuid,
    /// The target, exactly as the relay emitted it.
    pub target: PushTarget,
}

/// What [`PushWorker::submit`] did with a push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// Queued for delivery.
    Queued,
    /// No credentials for this target kind: skipped (warned once at startup).
    Unconfigured,
    /// The queue is full: dropped.
    QueueFull,
    /// The worker stopped: dropped.
    Closed,
}

/// Counters since the worker started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PushStats {
    /// Pushes queued.
    pub queued: u64,
    /// Dropped at submit: queue full.
    pub queue_full: u64,
    /// Skipped at submit: kind not configured.
    pub unconfigured: u64,
    /// Accepted by the push service.
    pub delivered: u64,
    /// Reported gone.
    pub gone: u64,
    /// Gone reports dropped because the gone channel was full or closed.
    pub gone_dropped: u64,
    /// Refused for good (4xx other than gone, or a request that could not be built).
    pub failed: u64,
    /// Attempts after the first (retries and re-authentications).
    pub retries: u64,
    /// Given up after `max_attempts`, a too-long `Retry-After` or no retry slot.
    pub gave_up: u64,
}

impl PushStats {
    fn plus(self, o: &Self) -> Self {
        Self {
            queued: self.queued + o.queued,
            queue_full: self.queue_full + o.queue_full,
            unconfigured: self.unconfigured + o.unconfigured,
            delivered: self.delivered + o.delivered,
            gone: self.gone + o.gone,
            gone_dropped: self.gone_dropped + o.gone_dropped,
            failed: self.failed + o.failed,
            retries: self.retries + o.retries,
            gave_up: self.gave_up + o.gave_up,
        }
    }
}

/// How full the worker is right now ([`PushWorker::occupancy`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// Pushes in the queue (bound: [`WorkerLimits::queue_capacity`]).
    pub queued: usize,
    /// Requests in flight (bound: [`WorkerLimits::max_concurrent`]).
    pub in_flight: usize,
    /// Pushes waiting between attempts (bound: [`WorkerLimits::max_retrying`]).
    pub retrying: usize,
}

#[derive(Debug, Default)]
struct Counters {
    queued: AtomicU64,
    queue_full: AtomicU64,
    unconfigured: AtomicU64,
    delivered: AtomicU64,
    gone: AtomicU64,
    gone_dropped: AtomicU64,
    failed: AtomicU64,
    retries: AtomicU64,
    gave_up: AtomicU64,
}

fn bump(counter: &AtomicU64) -> u64 {
    counter.fetch_add(1, Ordering::Relaxed) + 1
}

struct Job {
    user: UserUuid,
    target: PushTarget,
    payload: PushPayload,
}

/// The handle of a running worker; clones share it. Dropping every clone stops the worker
/// once the queued pushes are done.
#[derive(Clone)]
pub struct PushWorker {
    tx: mpsc::Sender<Job>,
    counters: Arc<[Counters; 3]>,
    enabled: [bool; 3],
    permits: Arc<Semaphore>,
    retry_slots: Arc<Semaphore>,
    limits: WorkerLimits,
}

impl std::fmt::Debug for PushWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushWorker")
            .field("web_push", &self.enabled[0])
            .field("fcm", &self.enabled[1])
            .field("apns", &self.enabled[2])
            .field("stats", &self.stats())
            .finish()
    }
}

/// The kinds' names in [`kind_index`] order ([`PushTarget::kind`]).
const KIND_NAMES: [&str; 3] = ["web_push", "fcm", "apns"];

fn kind_index(target: &PushTarget) -> usize {
    match target {
        PushTarget::WebPush { .. } => 0,
        PushTarget::Fcm { .. } => 1,
        PushTarget::Apns { .. } => 2,
    }
}

impl PushWorker {
    /// Starts the worker on the current tokio runtime. `transport` sends every request;
    /// `clock` gives wall time for JWTs; `rng_seed` seeds the CSPRNG of the RFC 8291
    /// ephemeral keys and salts and of the backoff jitter (production: 32 bytes from the OS;
    /// simulation: from the run's seed). Returns the handle and the gone channel.
    pub fn spawn<T: PushTransport>(
        config: WorkerConfig,
        transport: T,
        clock: WallClock,
        rng_seed: [u8; 32],
    ) -> (Self, mpsc::Receiver<GoneTarget>) {
        let limits = WorkerLimits {
            queue_capacity: config.limits.queue_capacity.max(1),
            max_concurrent: config.limits.max_concurrent.max(1),
            max_attempts: config.limits.max_attempts.max(1),
            ..config.limits
        };
        let signer = config.web_push.as_ref().and_then(|w| {
            let signer = VapidSigner::new(w.key.clone(), w.subject.clone());
            if signer.is_err() {
                warn!("push: the VAPID key cannot sign; Web Push targets are skipped");
            }
            signer.ok()
        });
        let enabled = [
            signer.is_some(),
            config.fcm.is_some(),
            config.apns.is_some(),
        ];
        if config.web_push.is_none() {
            warn!(
                "push: Web Push not configured (no VAPID subject); browser subscriptions are skipped"
            );
        }
        if !enabled[1] {
            warn!("push: FCM not configured (no credentials); Android targets are skipped");
        }
        if !enabled[2] {
            warn!("push: APNs not configured (no signing key); iOS targets are skipped");
        }
        let counters: Arc<[Counters; 3]> = Arc::default();
        let permits = Arc::new(Semaphore::new(limits.max_concurrent));
        let retry_slots = Arc::new(Semaphore::new(limits.max_retrying));
        let (tx, rx) = mpsc::channel(limits.queue_capacity);
        let (gone_tx, gone_rx) = mpsc::channel(GONE_CHANNEL_CAPACITY);
        let ctx = Arc::new(Ctx {
            transport,
            clock,
            limits,
            web: config.web_push.zip(signer).map(|(config, signer)| Web {
                config,
                signer: Mutex::new(signer),
            }),
            fcm: config.fcm.map(|config| Fcm {
                config,
                token: tokio::sync::Mutex::new(None),
            }),
            apns: config.apns.map(|config| Apns {
                config,
                token: Mutex::new(None),
            }),
            rng: Mutex::new(ChaCha20Rng::from_seed(rng_seed)),
            permits: Arc::clone(&permits),
            retry_slots: Arc::clone(&retry_slots),
            gone: gone_tx,
            counters: counters.clone(),
        });
        tokio::spawn(dispatch(ctx, rx).instrument(info_span!("push")));
        (
            Self {
                tx,
                counters,
                enabled,
                permits,
                retry_slots,
                limits,
            },
            gone_rx,
        )
    }

    /// Queues `payload` for `target` of `user`; never waits (see [`Submitted`]).
    pub fn submit(&self, user: UserUuid, target: PushTarget, payload: PushPayload) -> Submitted {
        let counters = &self.counters[kind_index(&target)];
        if !self.enabled[kind_index(&target)] {
            bump(&counters.unconfigured);
            return Submitted::Unconfigured;
        }
        match self.tx.try_send(Job {
            user,
            target,
            payload,
        }) {
            Ok(()) => {
                bump(&counters.queued);
                Submitted::Queued
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                let n = bump(&counters.queue_full);
                if n.is_power_of_two() {
                    warn!(dropped = n, "push queue full: push dropped (best effort)");
                }
                Submitted::QueueFull
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Submitted::Closed,
        }
    }

    /// Whether targets of this kind are delivered (credentials configured).
    pub fn delivers(&self, target: &PushTarget) -> bool {
        self.enabled[kind_index(target)]
    }

    /// The counters, over every kind.
    pub fn stats(&self) -> PushStats {
        self.stats_by_kind()
            .iter()
            .fold(PushStats::default(), |sum, (_, s)| sum.plus(s))
    }

    /// The counters of each kind, named as [`PushTarget::kind`] names them (`web_push`,
    /// `fcm`, `apns`).
    pub fn stats_by_kind(&self) -> [(&'static str, PushStats); 3] {
        let of = |c: &Counters| {
            let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
            PushStats {
                queued: get(&c.queued),
                queue_full: get(&c.queue_full),
                unconfigured: get(&c.unconfigured),
                delivered: get(&c.delivered),
                gone: get(&c.gone),
                gone_dropped: get(&c.gone_dropped),
                failed: get(&c.failed),
                retries: get(&c.retries),
                gave_up: get(&c.gave_up),
            }
        };
        [
            (KIND_NAMES[0], of(&self.counters[0])),
            (KIND_NAMES[1], of(&self.counters[1])),
            (KIND_NAMES[2], of(&self.counters[2])),
        ]
    }

    /// Pushes waiting in the queue now, in flight now, and waiting to retry now.
    pub fn occupancy(&self) -> Occupancy {
        let used = |sem: &Semaphore, of: usize| of.saturating_sub(sem.available_permits());
        Occupancy {
            queued: self.tx.max_capacity().saturating_sub(self.tx.capacity()),
            in_flight: used(&self.permits, self.limits.max_concurrent),
            retrying: used(&self.retry_slots, self.limits.max_retrying),
        }
    }

    /// The worker's bounds (as started: zeros raised to one).
    pub fn limits(&self) -> WorkerLimits {
        self.limits
    }
}

struct Web {
    config: WebPushConfig,
    signer: Mutex<VapidSigner>,
}

struct Fcm {
    config: FcmConfig,
    /// Held across the token fetch, so concurrent pushes wait for one fetch.
    token: tokio::sync::Mutex<Option<AccessToken>>,
}

struct Apns {
    config: ApnsConfig,
    token: Mutex<Option<ProviderToken>>,
}

struct Ctx<T> {
    transport: T,
    clock: WallClock,
    limits: WorkerLimits,
    web: Option<Web>,
    fcm: Option<Fcm>,
    apns: Option<Apns>,
    rng: Mutex<ChaCha20Rng>,
    permits: Arc<Semaphore>,
    retry_slots: Arc<Semaphore>,
    gone: mpsc::Sender<GoneTarget>,
    counters: Arc<[Counters; 3]>,
}

fn lock<V>(m: &Mutex<V>) -> std::sync::MutexGuard<'_, V> {
    // Every value behind these locks is valid after any partial update (caches and an RNG).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn dispatch<T: PushTransport>(ctx: Arc<Ctx<T>>, mut rx: mpsc::Receiver<Job>) {
    while let Some(job) = rx.recv().await {
        let Ok(permit) = ctx.permits.clone().acquire_owned().await else {
            return;
        };
        let ctx = ctx.clone();
        tokio::spawn(
            async move { ctx.deliver(job, permit).await }.instrument(tracing::Span::current()),
        );
    }
}

/// Why one attempt produced no response to classify.
enum AttemptError {
    /// Decided without a response (e.g. the target's data is unusable, a token fetch failed).
    Decided(Outcome),
}

impl<T: PushTransport> Ctx<T> {
    async fn deliver(&self, job: Job, permit: OwnedSemaphorePermit) {
        let kind = job.target.kind();
        let counters = &self.counters[kind_index(&job.target)];
        let mut permit = permit;
        let mut attempt: u32 = 1;
        let mut reauthed = false;
        loop {
            let outcome = self.attempt(&job).await;
            let outcome = match outcome {
                Outcome::Reauth if reauthed => Outcome::Failed {
                    status: 0,
                    reason: "credentials_refused".into(),
                },
                other => other,
            };
            match outcome {
                Outcome::Delivered => {
                    bump(&counters.delivered);
                    debug!(kind, attempt, "push delivered");
                    return;
                }
                Outcome::Gone => {
                    bump(&counters.gone);
                    info!(kind, "push target gone: reported for deletion");
                    let report = GoneTarget {
                        user: job.user,
                        target: job.target,
                    };
                    if self.gone.try_send(report).is_err() {
                        bump(&counters.gone_dropped);
                        warn!(kind, "gone report dropped: the relay is not reading them");
                    }
                    return;
                }
                Outcome::Failed { status, reason } => {
                    bump(&counters.failed);
                    warn!(kind, attempt, status, reason, "push refused");
                    return;
                }
                Outcome::Reauth => {
                    reauthed = true;
                    self.invalidate(&job.target);
                    bump(&counters.retries);
                    debug!(kind, attempt, "push credential refused: renewing it");
                }
                Outcome::Retry { after } => {
                    if attempt >= self.limits.max_attempts {
                        bump(&counters.gave_up);
                        warn!(kind, attempt, "push not delivered: attempts exhausted");
                        return;
                    }
                    let delay = match after {
                        Some(after) => after,
                        None => self.backoff(attempt),
                    };
                    if delay > Duration::from_millis(self.limits.backoff_max_ms) {
                        bump(&counters.gave_up);
                        warn!(
                            kind,
                            attempt,
                            retry_after_s = delay.as_secs(),
                            "push not delivered: Retry-After beyond the worker's bound"
                        );
                        return;
                    }
                    let Ok(slot) = self.retry_slots.clone().try_acquire_owned() else {
                        bump(&counters.gave_up);
                        warn!(
                            kind,
                            attempt, "push not delivered: too many pushes retrying"
                        );
                        return;
                    };
                    drop(permit);
                    bump(&counters.retries);
                    debug!(kind, attempt, delay_ms = delay.as_millis(), "push retry");
                    tokio::time::sleep(delay).await;
                    permit = match self.permits.clone().acquire_owned().await {
                        Ok(p) => p,
                        Err(_) => return,
                    };
                    drop(slot);
                    attempt += 1;
                }
            }
        }
    }

    /// `backoff_base_ms · 2^(attempt-1)`, capped, with jitter in [½, 1] of it.
    fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .limits
            .backoff_base_ms
            .saturating_mul(1u64 << attempt.saturating_sub(1).min(20))
            .min(self.limits.backoff_max_ms);
        let half = exp / 2;
        let jitter = if half == 0 {
            0
        } else {
            lock(&self.rng).next_u64() % (half + 1)
        };
        Duration::from_millis(exp - half + jitter)
    }

    fn invalidate(&self, target: &PushTarget) {
        match target {
            PushTarget::Fcm { .. } => {
                if let Some(fcm) = &self.fcm
                    && let Ok(mut t) = fcm.token.try_lock()
                {
                    *t = None;
                }
            }
            PushTarget::Apns { .. } => {
                if let Some(apns) = &self.apns {
                    *lock(&apns.token) = None;
                }
            }
            PushTarget::WebPush { .. } => {}
        }
    }

    async fn attempt(&self, job: &Job) -> Outcome {
        let request = match self.build(job).await {
            Ok(request) => request,
            Err(AttemptError::Decided(outcome)) => return outcome,
        };
        let response = match self.send(request).await {
            Ok(response) => response,
            Err(error @ (TransportError::Refused(_) | TransportError::SchemeNotAllowed)) => {
                // Never reachable under the destination policy: no retry. A Web Push
                // subscription is the subscriber's choice, so it is deleted; a service URL
                // is the operator's, so it is only reported.
                warn!(kind = job.target.kind(), %error, "push destination refused");
                return match &job.target {
                    PushTarget::WebPush { .. } => Outcome::Gone,
                    PushTarget::Fcm { .. } | PushTarget::Apns { .. } => Outcome::Failed {
                        status: 0,
                        reason: "destination_refused".into(),
                    },
                };
            }
            Err(error) => {
                debug!(kind = job.target.kind(), %error, "push request failed");
                return Outcome::Retry { after: None };
            }
        };
        match &job.target {
            PushTarget::WebPush { .. } => webpush::classify(&response),
            PushTarget::Fcm { .. } => fcm::classify(&response),
            PushTarget::Apns { .. } => apns::classify(&response),
        }
    }

    async fn send(&self, request: PushRequest) -> Result<PushResponse, TransportError> {
        let timeout = Duration::from_millis(self.limits.request_timeout_ms);
        tokio::time::timeout(timeout, self.transport.send(request))
            .await
            .unwrap_or_else(|_| Err(TransportError::Exchange("timed out".into())))
    }

    async fn build(&self, job: &Job) -> Result<PushRequest, AttemptError> {
        let now = (self.clock)();
        let unconfigured = || {
            AttemptError::Decided(Outcome::Failed {
                status: 0,
                reason: "not_configured".into(),
            })
        };
        match &job.target {
            PushTarget::WebPush {
                endpoint,
                p256dh,
                auth,
            } => {
                let web = self.web.as_ref().ok_or_else(unconfigured)?;
                let plaintext = serde_json::to_vec(&job.payload).map_err(|_| unconfigured())?;
                let mut rng = lock(&self.rng);
                let mut signer = lock(&web.signer);
                webpush::build_request(
                    &mut signer,
                    &web.config.options,
                    web.config.allow_http,
                    endpoint,
                    p256dh,
                    auth,
                    &plaintext,
                    now,
                    &mut *rng,
                )
                .map_err(|e| match e {
                    // The subscription itself is unusable: it can never be delivered.
                    WebPushError::BadEndpoint | WebPushError::Keys(_) => {
                        warn!(kind = "web_push", error = %e, "push target unusable");
                        AttemptError::Decided(Outcome::Gone)
                    }
                    WebPushError::Sign(_) => AttemptError::Decided(Outcome::Failed {
                        status: 0,
                        reason: "vapid_sign_failed".into(),
                    }),
                })
            }
            PushTarget::Fcm { token } => {
                let fcm = self.fcm.as_ref().ok_or_else(unconfigured)?;
                let access = self.fcm_token(fcm, now).await?;
                fcm::send_request(&fcm.config, &access, token, &job.payload).map_err(|_| {
                    AttemptError::Decided(Outcome::Failed {
                        status: 0,
                        reason: "bad_request".into(),
                    })
                })
            }
            PushTarget::Apns { token } => {
                let apns = self.apns.as_ref().ok_or_else(unconfigured)?;
                let provider = {
                    let mut cached = lock(&apns.token);
                    match cached.as_ref().filter(|t| t.is_fresh(now)) {
                        Some(t) => t.clone(),
                        None => {
                            let t = apns::provider_token(&apns.config, now).map_err(|_| {
                                AttemptError::Decided(Outcome::Failed {
                                    status: 0,
                                    reason: "apns_sign_failed".into(),
                                })
                            })?;
                            *cached = Some(t.clone());
                            t
                        }
                    }
                };
                apns::send_request(&apns.config, &provider, token, &job.payload, now).map_err(|e| {
                    match e {
                        ApnsError::BadDeviceToken => {
                            warn!(
                                kind = "apns",
                                "push target unusable: device token is not hex"
                            );
                            AttemptError::Decided(Outcome::Gone)
                        }
                        ApnsError::Sign | ApnsError::BadEndpoint => {
                            AttemptError::Decided(Outcome::Failed {
                                status: 0,
                                reason: "bad_request".into(),
                            })
                        }
                    }
                })
            }
        }
    }

    /// The cached FCM access token, or a new one (one fetch at a time).
    async fn fcm_token(&self, fcm: &Fcm, now: UnixMs) -> Result<AccessToken, AttemptError> {
        let mut cached = fcm.token.lock().await;
        if let Some(t) = cached.as_ref().filter(|t| t.is_fresh(now)) {
            return Ok(t.clone());
        }
        let request = fcm::token_request(&fcm.config, now).map_err(|_| {
            AttemptError::Decided(Outcome::Failed {
                status: 0,
                reason: "fcm_sign_failed".into(),
            })
        })?;
        let response = self.send(request).await.map_err(|error| {
            debug!(%error, "FCM token request failed");
            AttemptError::Decided(Outcome::Retry { after: None })
        })?;
        match fcm::parse_token_response(&response, now) {
            Ok(token) => {
                *cached = Some(token.clone());
                debug!("FCM access token renewed");
                Ok(token)
            }
            Err(outcome) => {
                if let Outcome::Failed { status, reason } = &outcome {
                    warn!(
                        status,
                        reason, "FCM refused the service account's token request"
                    );
                }
                Err(AttemptError::Decided(outcome))
            }
        }
    }
}
