//! What happens to each crossing between the cores of a sharded relay: the relay server hands
//! every one to [`CrossingFaults::transit`], which, while a fault of the plan lasts
//! ([`CrossingFaults::arm`]), loses, repeats or delays it with the chances the fault names, drawn
//! per crossing from the run's seed. The hand-off protocol is built for all three (what is sent
//! at least once comes again, a repeat is answered as one, a late report is older than the
//! view it meets), so the oracles must hold through them.
//!
//! Only what the protocol sends at least once is repeated (hand-offs, their
//! acknowledgements, notices and their acknowledgements) and the level reports and questions,
//! which say the same thing twice: a transport between processes does not repeat a request on
//! its own. Anything may be lost or delayed.
//!
//! The counts ([`CrossingCounts`]) say whether a fault met any crossing: a run whose crossing
//! faults touched nothing did not test the hand-off.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use relay_core::handoff::Crossing;
use relay_server::{CrossingTransit, Transit};

use crate::seeds::splitmix64;
use crate::time::sim_ms;

/// What a crossing fault does while it lasts: each crossing is lost, repeated or delayed
/// with these chances (in percent; what is left is handed at once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrossingOdds {
    /// Percent lost.
    pub lose_pct: u8,
    /// Percent handed twice (of those that may be repeated).
    pub twice_pct: u8,
    /// Percent delayed.
    pub delay_pct: u8,
    /// The longest delay, in ms.
    pub delay_max_ms: u64,
}

/// How many crossings the relay's cores sent, and what the faults did to them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrossingCounts {
    /// Crossings sent (faulted or not).
    pub sent: u64,
    /// Lost.
    pub lost: u64,
    /// Handed twice.
    pub repeated: u64,
    /// Delayed.
    pub delayed: u64,
}

impl CrossingCounts {
    /// Crossings a fault touched.
    pub fn faulted(&self) -> u64 {
        self.lost + self.repeated + self.delayed
    }
}

#[derive(Debug, Default)]
struct State {
    /// The fault in force and when it ends (simulated ms).
    armed: Option<(CrossingOdds, u64)>,
    /// The draw's state ([`splitmix64`]).
    rng: u64,
    counts: CrossingCounts,
}

impl State {
    /// What happens to `c` at `now`.
    fn decide(&mut self, c: &Crossing, now: u64) -> Transit {
        self.counts.sent += 1;
        let Some((odds, until)) = self.armed else {
            return Transit::Deliver;
        };
        if now >= until {
            self.armed = None;
            return Transit::Deliver;
        }
        let z = splitmix64(&mut self.rng);
        let roll = (z % 100) as u8;
        let (lose, twice, delay) = (odds.lose_pct, odds.twice_pct, odds.delay_pct);
        if roll < lose {
            self.counts.lost += 1;
            Transit::Lose
        } else if roll < lose.saturating_add(twice) {
            // What is sent at most once is handed as it is.
            if !repeatable(c) {
                return Transit::Deliver;
            }
            self.counts.repeated += 1;
            Transit::Twice
        } else if roll < lose.saturating_add(twice).saturating_add(delay) {
            self.counts.delayed += 1;
            Transit::Delay(Duration::from_millis(
                1 + (z >> 8) % odds.delay_max_ms.max(1),
            ))
        } else {
            Transit::Deliver
        }
    }
}

/// Whether a transport may hand `c` twice: what the protocol sends at least once, and the
/// level reports and questions.
fn repeatable(c: &Crossing) -> bool {
    matches!(
        c,
        Crossing::Handoff(_)
            | Crossing::Applied(_)
            | Crossing::Notice(_)
            | Crossing::Taken(_)
            | Crossing::Levels(_)
            | Crossing::LevelsAsked(_)
    )
}

/// The runner's handle on the crossing faults of a run (clones share them).
#[derive(Debug, Clone, Default)]
pub struct CrossingFaults {
    inner: Arc<Mutex<State>>,
}

impl CrossingFaults {
    /// No fault in force; the draws seeded from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            inner: Arc::new(Mutex::new(State {
                rng: seed,
                ..State::default()
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Crossings meet `odds` until simulated `until_ms` (a later fault replaces this one).
    pub fn arm(&self, odds: CrossingOdds, until_ms: u64) {
        self.lock().armed = Some((odds, until_ms));
    }

    /// No fault in force from now on.
    pub fn heal(&self) {
        self.lock().armed = None;
    }

    /// What the relay server asks for each crossing.
    pub fn transit(&self) -> CrossingTransit {
        let faults = self.clone();
        Arc::new(move |c: &Crossing| faults.lock().decide(c, sim_ms()))
    }

    /// What was sent and what the faults did.
    pub fn counts(&self) -> CrossingCounts {
        self.lock().counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::handoff::{LevelsAsked, ShardId, Signal};

    fn asked() -> Crossing {
        Crossing::LevelsAsked(LevelsAsked {
            from: ShardId(0),
            to: ShardId(1),
            stream: None,
        })
    }

    #[test]
    fn nothing_happens_unless_armed_and_the_fault_ends_on_time() {
        let faults = CrossingFaults::new(7);
        let mut s = faults.lock();
        assert_eq!(s.decide(&asked(), 0), Transit::Deliver);
        s.armed = Some((
            CrossingOdds {
                lose_pct: 100,
                ..CrossingOdds::default()
            },
            10,
        ));
        assert_eq!(s.decide(&asked(), 5), Transit::Lose);
        assert_eq!(s.decide(&asked(), 10), Transit::Deliver);
        assert_eq!(s.decide(&asked(), 6), Transit::Deliver, "ended for good");
        assert_eq!(
            s.counts,
            CrossingCounts {
                sent: 4,
                lost: 1,
                ..CrossingCounts::default()
            }
        );
    }

    #[test]
    fn only_what_may_come_twice_is_repeated_and_delays_stay_in_bounds() {
        let faults = CrossingFaults::new(3);
        let mut s = faults.lock();
        let twice = CrossingOdds {
            twice_pct: 100,
            ..CrossingOdds::default()
        };
        s.armed = Some((twice, u64::MAX));
        assert_eq!(s.decide(&asked(), 0), Transit::Twice);
        let signal = Crossing::Signal(Signal {
            from: ShardId(0),
            to: ShardId(1),
            user: wire::UserUuid::parse("00000000-0000-4000-8000-000000000001").unwrap(),
            frame: wire::ServerFrame::decode(r#"{"type":"nudge"}"#).unwrap(),
            offline: None,
        });
        assert_eq!(s.decide(&signal, 0), Transit::Deliver, "at most once");
        s.armed = Some((
            CrossingOdds {
                delay_pct: 100,
                delay_max_ms: 50,
                ..CrossingOdds::default()
            },
            u64::MAX,
        ));
        for _ in 0..100 {
            let Transit::Delay(d) = s.decide(&signal, 0) else {
                panic!("every crossing is delayed");
            };
            assert!((1..=50).contains(&d.as_millis()), "{d:?}");
        }
    }
}
