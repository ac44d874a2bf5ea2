//! The fault plan: which toxics, on which direction, with what probability per connection.
//!
//! A plan is data (serde JSON, as in a report) or a name list on a command line:
//! `none`, `all`, or comma-separated toxic names (`latency,slicer,reset_peer`), each with the
//! defaults of [`Toxic::named`] on both directions and toxicity 1.0 (every connection). `all`
//! is every toxic, the destructive ones (those that can make a request fail) at
//! [`ALL_DESTRUCTIVE_TOXICITY`] per direction, so that a connection gets a mix: always slowed,
//! sliced and stalled, sometimes reset, cut short, timed out or half-open.

use rand_chacha::ChaCha20Rng;
use rand_core::Rng as _;
use serde::{Deserialize, Serialize};

/// Which way the bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Client to relay.
    Upstream,
    /// Relay to client.
    Downstream,
}

/// One fault, in toxiproxy's vocabulary where it has one (same names and units).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Toxic {
    /// Every chunk is delayed by `latency_ms` plus up to `jitter_ms` (order kept).
    Latency {
        /// Fixed delay.
        latency_ms: u64,
        /// Extra delay drawn uniformly in `0..=jitter_ms` per chunk.
        jitter_ms: u64,
    },
    /// Throughput capped at `rate_kbps` kilobytes per second.
    Bandwidth {
        /// KB/s (toxiproxy's unit; 0 = no cap).
        rate_kbps: u64,
    },
    /// Data is cut into writes of `average_size ± size_variation` bytes, `delay_us` apart
    /// (frames split across TCP segments).
    Slicer {
        /// Mean slice size in bytes.
        average_size: u64,
        /// Largest deviation from the mean.
        size_variation: u64,
        /// Pause between slices, microseconds.
        delay_us: u64,
    },
    /// Nothing passes in this direction; the connection is closed after `timeout_ms`
    /// (0: held open forever, a hung peer).
    Timeout {
        /// Close delay (0 = never).
        timeout_ms: u64,
    },
    /// Both sockets are reset (RST) `timeout_ms` after the connection opened, mid-frame if
    /// data is flowing.
    ResetPeer {
        /// Reset delay.
        timeout_ms: u64,
    },
    /// The direction closes after `bytes` bytes have passed.
    LimitData {
        /// Bytes allowed through.
        bytes: u64,
    },
    /// From `after_ms` after the connection opened, nothing passes for `for_ms`; then what
    /// was held is released, in order (a stalled link that recovers).
    Hold {
        /// Start of the stall, from the connection's start.
        after_ms: u64,
        /// Length of the stall.
        for_ms: u64,
    },
    /// This direction is silently dead while the connection stays open (a half-open socket):
    /// bytes are read and dropped.
    HalfOpen,
}

/// Toxicity of each destructive toxic (per direction) in the `all` plan: a connection is
/// spared all of them with probability 0.9^8, about 43 %.
pub const ALL_DESTRUCTIVE_TOXICITY: f64 = 0.1;

/// Every toxic name [`Toxic::named`] knows, in the order `all` applies them.
pub const TOXIC_NAMES: [&str; 8] = [
    "latency",
    "bandwidth",
    "slicer",
    "timeout",
    "reset_peer",
    "limit_data",
    "hold",
    "half_open",
];

impl Toxic {
    /// The toxic named `name` with defaults chosen so that a conforming relay and client still
    /// make progress: 50 ms ± 20 latency, 256 KB/s, 64 ± 48-byte slices 200 µs apart, a 2 s
    /// timeout, a reset after 1.5 s, 4 KiB of data, a 1 s hold after 200 ms, a dead direction.
    pub fn named(name: &str) -> Option<Self> {
        Some(match name {
            "latency" => Self::Latency {
                latency_ms: 50,
                jitter_ms: 20,
            },
            "bandwidth" => Self::Bandwidth { rate_kbps: 256 },
            "slicer" => Self::Slicer {
                average_size: 64,
                size_variation: 48,
                delay_us: 200,
            },
            "timeout" => Self::Timeout { timeout_ms: 2_000 },
            "reset_peer" => Self::ResetPeer { timeout_ms: 1_500 },
            "limit_data" => Self::LimitData { bytes: 4_096 },
            "hold" => Self::Hold {
                after_ms: 200,
                for_ms: 1_000,
            },
            "half_open" => Self::HalfOpen,
            _ => return None,
        })
    }

    /// Whether the toxic can make a request fail (rather than only slow it down): a case run
    /// under it may fail for that reason alone.
    pub fn is_destructive(&self) -> bool {
        matches!(
            self,
            Self::Timeout { .. } | Self::ResetPeer { .. } | Self::LimitData { .. } | Self::HalfOpen
        )
    }
}

/// A toxic on one direction, applied to a connection with probability `toxicity`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToxicSpec {
    /// The fault.
    #[serde(flatten)]
    pub toxic: Toxic,
    /// The direction it applies to.
    pub stream: Direction,
    /// Probability per connection, 0.0..=1.0 (toxiproxy's name).
    #[serde(default = "always")]
    pub toxicity: f64,
}

fn always() -> f64 {
    1.0
}

/// The toxics of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Each applies independently per connection.
    pub toxics: Vec<ToxicSpec>,
}

/// A plan that cannot be parsed.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A name that is not a toxic.
    #[error("unknown toxic {0:?} (known: none, all, {names})", names = TOXIC_NAMES.join(", "))]
    UnknownToxic(String),
    /// A toxicity outside 0..=1.
    #[error("toxicity {0} is not between 0 and 1")]
    Toxicity(f64),
    /// A JSON plan that does not decode.
    #[error("invalid plan JSON: {0}")]
    Json(String),
}

impl Plan {
    /// No faults: the proxy only forwards.
    pub fn none() -> Self {
        Self::default()
    }

    /// Parses `none`, `all`, a comma-separated list of toxic names (both directions, defaults,
    /// every connection), or a JSON plan (starting with `{`).
    pub fn parse(s: &str) -> Result<Self, PlanError> {
        let s = s.trim();
        if s.starts_with('{') {
            let plan: Self = serde_json::from_str(s).map_err(|e| PlanError::Json(e.to_string()))?;
            plan.validate()?;
            return Ok(plan);
        }
        let all = s == "all";
        let names: Vec<&str> = match s {
            "" | "none" => Vec::new(),
            "all" => TOXIC_NAMES.to_vec(),
            list => list.split(',').map(str::trim).collect(),
        };
        let mut toxics = Vec::new();
        for name in names {
            let toxic = Toxic::named(name).ok_or_else(|| PlanError::UnknownToxic(name.into()))?;
            let toxicity = if all && toxic.is_destructive() {
                ALL_DESTRUCTIVE_TOXICITY
            } else {
                1.0
            };
            for stream in [Direction::Upstream, Direction::Downstream] {
                toxics.push(ToxicSpec {
                    toxic: toxic.clone(),
                    stream,
                    toxicity,
                });
            }
        }
        Ok(Self { toxics })
    }

    /// The same plan without the destructive toxics (only slowed, sliced and stalled links).
    pub fn without_destructive(&self) -> Self {
        Self {
            toxics: self
                .toxics
                .iter()
                .filter(|t| !t.toxic.is_destructive())
                .cloned()
                .collect(),
        }
    }

    /// Checks every toxicity is a probability.
    pub fn validate(&self) -> Result<(), PlanError> {
        match self
            .toxics
            .iter()
            .find(|t| !(0.0..=1.0).contains(&t.toxicity))
        {
            Some(t) => Err(PlanError::Toxicity(t.toxicity)),
            None => Ok(()),
        }
    }

    /// Whether any toxic can make a request fail outright.
    pub fn is_destructive(&self) -> bool {
        self.toxics.iter().any(|t| t.toxic.is_destructive())
    }

    /// The toxics one connection gets: each applies when a draw falls under its toxicity.
    /// Draws happen for every toxic in plan order, so adding a toxic at the end does not change
    /// what earlier ones drew.
    pub fn draw(&self, rng: &mut ChaCha20Rng) -> Vec<ToxicSpec> {
        self.toxics
            .iter()
            .filter(|t| {
                // 53 random bits as a float in [0, 1).
                let roll = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                roll < t.toxicity
            })
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use rand_core::SeedableRng as _;

    use super::*;

    #[test]
    fn names_and_all() {
        assert!(Plan::parse("none").unwrap().toxics.is_empty());
        let all = Plan::parse("all").unwrap();
        assert_eq!(all.toxics.len(), 2 * TOXIC_NAMES.len());
        for t in &all.toxics {
            let want = if t.toxic.is_destructive() {
                ALL_DESTRUCTIVE_TOXICITY
            } else {
                1.0
            };
            assert!((t.toxicity - want).abs() < f64::EPSILON, "{t:?}");
        }
        let calm = all.without_destructive();
        assert!(!calm.is_destructive());
        assert_eq!(calm.toxics.len(), 2 * 4, "latency, bandwidth, slicer, hold");
        let two = Plan::parse("latency, slicer").unwrap();
        assert_eq!(two.toxics.len(), 4);
        assert!(!two.is_destructive());
        assert!(Plan::parse("reset_peer").unwrap().is_destructive());
        let e = Plan::parse("latency,lag").unwrap_err();
        assert!(e.to_string().contains("\"lag\""), "{e}");
    }

    #[test]
    fn json_round_trip_in_toxiproxy_shape() {
        let plan = Plan::parse(
            r#"{"toxics":[{"type":"latency","latency_ms":10,"jitter_ms":0,"stream":"downstream","toxicity":0.5}]}"#,
        )
        .unwrap();
        assert_eq!(
            plan.toxics[0].toxic,
            Toxic::Latency {
                latency_ms: 10,
                jitter_ms: 0
            }
        );
        let back: Plan = serde_json::from_str(&serde_json::to_string(&plan).unwrap()).unwrap();
        assert_eq!(back, plan);
        assert!(matches!(
            Plan::parse(r#"{"toxics":[{"type":"half_open","stream":"upstream","toxicity":2}]}"#),
            Err(PlanError::Toxicity(_))
        ));
    }

    #[test]
    fn toxicity_draws_are_seeded() {
        let plan =
            Plan::parse(r#"{"toxics":[{"type":"half_open","stream":"upstream","toxicity":0.5}]}"#)
                .unwrap();
        let draws = |seed| {
            let mut rng = ChaCha20Rng::seed_from_u64(seed);
            (0..64)
                .map(|_| plan.draw(&mut rng).len())
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(7), draws(7));
        let hits: usize = draws(7).iter().sum();
        assert!((16..=48).contains(&hits), "{hits} of 64 at toxicity 0.5");
    }
}
