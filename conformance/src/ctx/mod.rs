//! What a case works with: raw HTTP and WebSocket JSON against the relay, recorded in a
//! transcript, plus helpers that act as any number of clients (accounts, contacts, sockets,
//! genuine end-to-end encryption with client-core's keys and crypto).
//!
//! [`Ctx`] is one case's context: its transport, the run's [`Shared`] state, an RNG seeded
//! from the run seed and the case id (so the ids, keys and names a case generates are the
//! same on every run with the same seed), and the case's [`Transcript`]. Its methods are
//! grouped by area, one file each: `requests` ([`Resp`], field checks), `accounts` ([`Account`],
//! [`Pair`]), `ws` ([`Ws`]), `hooks` (payment webhook, test clock, push probe: [`Hooks`]) and `commerce`
//! (vanity aliases, channels).

mod accounts;
mod commerce;
mod hooks;
mod requests;
mod ws;

pub use self::accounts::{Account, Pair};
pub use self::hooks::{ADVANCE_CLOCK_PATH, ClockControl, Hooks, PushProbe};
pub use self::requests::{Kind, Resp, check_error_body, error_code, fields, id_text, s, u};
pub use self::ws::{Refusal, Ws};

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use client_core::crypto::{SessionKey, decrypt_payload_text, encrypt_payload};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use serde_json::Value;

use crate::transcript::Transcript;
use crate::transport::Transport;
use crate::verdict::{Failure, Profile};

/// State shared by every case of one run.
#[derive(Debug)]
pub struct Shared {
    /// Hooks.
    pub hooks: Hooks,
    /// Seed of the run; each case's RNG is derived from it and the case id.
    pub seed: u64,
    /// How long to wait for an expected frame or response.
    pub wait: Duration,
    /// How long to watch for a frame that must not arrive.
    pub quiet: Duration,
    /// Whose expectations the run holds the relay to.
    pub profile: Profile,
    /// The relay's size limits, where known.
    pub limits: Limits,
    alias_pool: tokio::sync::Mutex<Option<VecDeque<Value>>>,
}

/// Size limits the documents leave open: given by flags (`--max-frame-bytes`, …), or our
/// relay's under [`Profile::Reference`]; a case whose limit is unknown is skipped.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// Largest WebSocket frame the relay accepts.
    pub max_frame_bytes: Option<usize>,
    /// Largest `msg` payload the relay accepts.
    pub max_payload_bytes: Option<usize>,
    /// Largest JSON request body the relay accepts.
    pub max_body_bytes: Option<usize>,
}

impl Limits {
    /// Our relay's limits (`wire::limits`).
    pub fn reference() -> Self {
        Self {
            max_frame_bytes: Some(wire::limits::MAX_FRAME_BYTES),
            max_payload_bytes: Some(wire::limits::MAX_MSG_PAYLOAD_BYTES),
            max_body_bytes: Some(wire::limits::MAX_JSON_BODY_BYTES),
        }
    }
}

impl Shared {
    /// Shared state of a run.
    pub fn new(hooks: Hooks, seed: u64, wait: Duration, quiet: Duration) -> Self {
        Self {
            hooks,
            seed,
            wait,
            quiet,
            profile: Profile::Documents,
            limits: Limits::default(),
            alias_pool: tokio::sync::Mutex::new(None),
        }
    }

    /// The same, under `profile` (with our relay's limits under [`Profile::Reference`] unless
    /// [`Shared::with_limits`] says otherwise).
    pub fn with_profile(mut self, profile: Profile) -> Self {
        self.profile = profile;
        if profile == Profile::Reference {
            let ours = Limits::reference();
            self.limits = Limits {
                max_frame_bytes: self.limits.max_frame_bytes.or(ours.max_frame_bytes),
                max_payload_bytes: self.limits.max_payload_bytes.or(ours.max_payload_bytes),
                max_body_bytes: self.limits.max_body_bytes.or(ours.max_body_bytes),
            };
        }
        self
    }

    /// The same, with the relay's size limits where given.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = Limits {
            max_frame_bytes: limits.max_frame_bytes.or(self.limits.max_frame_bytes),
            max_payload_bytes: limits.max_payload_bytes.or(self.limits.max_payload_bytes),
            max_body_bytes: limits.max_body_bytes.or(self.limits.max_body_bytes),
        };
        self
    }
}

/// The context of one case.
pub struct Ctx {
    transport: Arc<dyn Transport>,
    shared: Arc<Shared>,
    rng: ChaCha20Rng,
    /// The case's wire transcript.
    pub transcript: Transcript,
    nick: u32,
    steps: Vec<String>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").finish_non_exhaustive()
    }
}

fn seed_for(seed: u64, id: &str) -> u64 {
    // FNV-1a over the id, mixed with the run seed: stable across runs and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Ctx {
    /// A context for case `id`.
    pub fn new(transport: Arc<dyn Transport>, shared: Arc<Shared>, id: &str) -> Self {
        Self::attempt(transport, shared, id, 0)
    }

    /// A context for attempt `n` of case `id` (0: the first; a rerun under faults draws other
    /// keys and names, since its first attempt may have registered them already).
    pub fn attempt(transport: Arc<dyn Transport>, shared: Arc<Shared>, id: &str, n: u64) -> Self {
        let seed = seed_for(shared.seed, id) ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let rng = ChaCha20Rng::seed_from_u64(seed);
        Self {
            transport,
            shared,
            rng,
            transcript: Transcript::default(),
            nick: 0,
            steps: Vec::new(),
        }
    }

    /// Records something the case did to the relay (a clock advance, a restart): a failure
    /// reason after it names it.
    pub fn step(&mut self, what: impl Into<String>) {
        let what = what.into();
        self.transcript.note(&what);
        self.steps.push(what);
    }

    /// What the case did to the relay so far, if anything (`"A, B"`).
    pub fn steps(&self) -> Option<String> {
        (!self.steps.is_empty()).then(|| self.steps.join(", "))
    }

    /// The run's profile.
    pub fn profile(&self) -> Profile {
        self.shared.profile
    }

    /// Whether the run holds the relay to our relay's own choices too.
    pub fn reference(&self) -> bool {
        self.shared.profile == Profile::Reference
    }

    /// The relay's size limits, where known.
    pub fn limits(&self) -> Limits {
        self.shared.limits
    }

    /// `http://host:port` of the relay.
    pub fn base_url(&self) -> String {
        self.transport.base_url()
    }

    /// The hooks of this run.
    pub fn hooks(&self) -> &Hooks {
        &self.shared.hooks
    }

    /// How long to watch for a frame that must not arrive.
    pub fn quiet(&self) -> Duration {
        self.shared.quiet
    }

    /// Records a note in the transcript.
    pub fn note(&self, text: &str) {
        self.transcript.note(text);
    }

    // ------------------------------------------------------------------ randomness

    /// A random lowercase UUID v4 string (message ids, call ids).
    pub fn uuid(&mut self) -> String {
        let mut b = [0u8; 16];
        self.rng.fill_bytes(&mut b);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }

    /// Random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.rng.fill_bytes(&mut v);
        v
    }

    /// A short random lowercase token (names).
    pub fn word(&mut self) -> String {
        let mut b = [0u8; 6];
        self.rng.fill_bytes(&mut b);
        b.iter()
            .map(|x| char::from(b'a' + x % 26))
            .collect::<String>()
    }

    /// Encrypts `text` with `key` (crypto_v 1 payload).
    pub fn encrypt(&mut self, key: &SessionKey, text: &str) -> String {
        encrypt_payload(key, text.as_bytes(), &mut self.rng)
    }

    /// The RNG (for client-core calls that take one).
    pub fn rng(&mut self) -> &mut ChaCha20Rng {
        &mut self.rng
    }

    /// Decrypts a delivered payload with `key`.
    pub fn decrypt(key: &SessionKey, payload: &str) -> Result<String, Failure> {
        decrypt_payload_text(key, payload)
            .map_err(|e| Failure::Fail(format!("the delivered payload does not decrypt: {e}")))
    }
}
