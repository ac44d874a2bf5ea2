//! The fault plan of a Jepsen-mode run, drawn from the seed: proxy phases (every connection
//! through the proxy cut when a phase starts, new ones get the phase's toxics), `kill -9` of
//! the relay and a restart on the same data directory, `SIGSTOP` … `SIGCONT`; each fault
//! followed by a quiet spell.

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use serde::{Deserialize, Serialize};

use super::{JepsenConfig, RelayTarget};

/// Toxics the proxy phases draw from by default: the conformance vocabulary minus those that
/// kill a socket silently (`timeout`, `half_open`: a client notices only after 60 s of
/// silence, longer than a short run) or that cut every connection after a few KiB
/// (`limit_data`, which starves a WebSocket).
pub const DEFAULT_TOXICS: [&str; 5] = ["latency", "bandwidth", "slicer", "reset_peer", "hold"];
/// The seed of a plan's draw is the run's seed xor this (`"jepsen"` in ASCII).
const PLAN_SEED_TAG: u64 = 0x6a65_7073_656e;
/// No fault starts later than this before the end of the window.
const LAST_FAULT_BEFORE_END_MS: u64 = 2_000;

/// One fault of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum JepsenFault {
    /// Every connection through the proxy is cut; new ones get these toxics (comma list).
    ProxyPhase {
        /// Toxic names.
        toxics: String,
    },
    /// The proxy forwards without faults again (connections cut once more).
    ProxyClear,
    /// `kill -9` the relay, restart it on the same data directory after `restart_after_ms`.
    Kill {
        /// Downtime.
        restart_after_ms: u64,
    },
    /// `SIGSTOP` the relay, `SIGCONT` after `for_ms`.
    Pause {
        /// Pause length.
        for_ms: u64,
    },
}

/// A fault at a time (ms after traffic starts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JepsenEvent {
    /// When.
    pub at_ms: u64,
    /// What.
    #[serde(flatten)]
    pub fault: JepsenFault,
}

/// The plan of a run, drawn from the seed.
pub fn draw_plan(config: &JepsenConfig) -> Vec<JepsenEvent> {
    let mut rng = ChaCha20Rng::seed_from_u64(config.seed ^ PLAN_SEED_TAG);
    let process = config.process_faults && matches!(config.target, RelayTarget::Command(_));
    let mut out = Vec::new();
    let mut t = 1_000 + rng.next_u64() % 2_000;
    while t + LAST_FAULT_BEFORE_END_MS < config.window_ms {
        let roll = rng.next_u32() % 4;
        let step = match roll {
            0 | 1 if !config.toxics.is_empty() => {
                proxy_phase(&mut rng, &config.toxics, t, &mut out)
            }
            2 if process => {
                let down = 300 + rng.next_u64() % 1_500;
                out.push(JepsenEvent {
                    at_ms: t,
                    fault: JepsenFault::Kill {
                        restart_after_ms: down,
                    },
                });
                down
            }
            3 if process => {
                let pause = 500 + rng.next_u64() % 2_500;
                out.push(JepsenEvent {
                    at_ms: t,
                    fault: JepsenFault::Pause { for_ms: pause },
                });
                pause
            }
            _ => 0,
        };
        t += step + 1_000 + rng.next_u64() % 2_500;
    }
    out
}

/// A proxy phase at `t` with a random non-empty subset of `toxics`, and its clearing; returns
/// its length.
fn proxy_phase(
    rng: &mut ChaCha20Rng,
    toxics: &[String],
    t: u64,
    out: &mut Vec<JepsenEvent>,
) -> u64 {
    let mut names: Vec<&str> = toxics
        .iter()
        .filter(|_| rng.next_u32().is_multiple_of(2))
        .map(String::as_str)
        .collect();
    if names.is_empty() {
        names.push(&toxics[rng.next_u32() as usize % toxics.len()]);
    }
    let len = 1_500 + rng.next_u64() % 3_000;
    out.push(JepsenEvent {
        at_ms: t,
        fault: JepsenFault::ProxyPhase {
            toxics: names.join(","),
        },
    });
    out.push(JepsenEvent {
        at_ms: t + len,
        fault: JepsenFault::ProxyClear,
    });
    len
}
