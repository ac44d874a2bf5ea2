//! Shrinking a failing run to a small one that still fails the same oracle (delta debugging,
//! Zeller's ddmin, over the explicit scenario and fault plan).
//!
//! ```text
//!   repeat until a whole pass changes nothing (or the run budget is spent):
//!     fault events   ddmin over the plan's events (a lone repair/restart is harmless)
//!     strangers      drop each raw client (and the events naming it)
//!     clients        drop each client (its pairs, actions, rejections; events on a host
//!                    left without clients)
//!     actions        ddmin over the scripted actions
//!     rejections, push tokens   ddmin over each list
//!     sizes          halve bursts, media, offline spells and raw clients' acts
//! ```
//!
//! "Still fails" means: the run has a violation of the same oracle as the original's first.
//! The seed stays (turmoil's and every client's randomness derive from it), so the result
//! replays exactly: `simulate --replay FILE`.

use crate::faults::{FaultAction, FaultEvent, FaultPlan, HostileAct};
use crate::runner::{Replay, RunConfig, run};
use crate::scenario::ActionKind;
use crate::violation::{Oracle, Violation};

/// The result of [`shrink`].
#[derive(Debug, Clone)]
pub struct Shrunk {
    /// The smallest run found that still fails.
    pub replay: Replay,
    /// Its violation of the target oracle.
    pub violation: Violation,
    /// Runs spent.
    pub runs: u32,
}

/// How to shrink.
#[derive(Debug, Clone, Copy)]
pub struct ShrinkOptions {
    /// Most runs to spend (each is one full simulation).
    pub max_runs: u32,
    /// Scan logs for canaries in every run (only needed when the target oracle is
    /// `canary-logs`).
    pub capture_logs: bool,
    /// The bug planted in every run (test-only, feature `planted-bugs`).
    #[cfg(feature = "planted-bugs")]
    pub planted: Option<crate::planted::Planted>,
}

/// Runs a candidate; `Some` with its violation of the target oracle when it still fails.
pub type Check<'a> = dyn FnMut(&Replay) -> Option<Violation> + 'a;

struct Shrinker<'a> {
    oracle: Oracle,
    max_runs: u32,
    runs: u32,
    best: Replay,
    violation: Violation,
    check: &'a mut Check<'a>,
    progress: &'a mut dyn FnMut(&str),
}

impl Shrinker<'_> {
    fn budget_left(&self) -> bool {
        self.runs < self.max_runs
    }

    /// Runs `candidate`; keeps it if it still fails the oracle.
    fn try_keep(&mut self, candidate: Replay) -> bool {
        if !self.budget_left() || candidate == self.best {
            return false;
        }
        self.runs += 1;
        match (self.check)(&candidate) {
            Some(v) => {
                self.best = candidate;
                self.violation = v;
                let size = size(&self.best);
                (self.progress)(&format!(
                    "run {}: still fails [{}] with {size}",
                    self.runs, self.oracle
                ));
                true
            }
            None => false,
        }
    }

    /// ddmin over a list inside the replay.
    fn ddmin<T: Clone>(
        &mut self,
        get: impl Fn(&Replay) -> Vec<T>,
        set: impl Fn(&Replay, Vec<T>) -> Replay,
    ) -> bool {
        let mut changed = false;
        let mut n = 2usize;
        loop {
            let items = get(&self.best);
            if items.is_empty() || !self.budget_left() {
                return changed;
            }
            let n_eff = n.min(items.len());
            let chunk = items.len().div_ceil(n_eff);
            let mut reduced = false;
            for i in 0..n_eff {
                let (lo, hi) = (i * chunk, ((i + 1) * chunk).min(items.len()));
                if lo >= hi {
                    continue;
                }
                let complement: Vec<T> = items[..lo].iter().chain(&items[hi..]).cloned().collect();
                if self.try_keep(set(&self.best, complement)) {
                    reduced = true;
                    changed = true;
                    n = n.saturating_sub(1).max(2);
                    break;
                }
            }
            if !reduced {
                if n_eff >= items.len() {
                    return changed;
                }
                n = (n * 2).min(items.len());
            }
        }
    }

    fn drop_strangers(&mut self) -> bool {
        let mut changed = false;
        let mut i = self.best.scenario.strangers.len();
        while i > 0 && self.budget_left() {
            i -= 1;
            let (scenario, rename) = self.best.scenario.without_stranger(i);
            let plan = rename_plan(&self.best.plan, &rename);
            let candidate = Replay {
                scenario,
                plan,
                ..self.best.clone()
            };
            changed |= self.try_keep(candidate);
        }
        changed
    }

    fn drop_clients(&mut self) -> bool {
        let mut changed = false;
        let mut i = self.best.scenario.accounts.len();
        while i > 0 && self.best.scenario.accounts.len() > 2 && self.budget_left() {
            i -= 1;
            if i >= self.best.scenario.accounts.len() {
                continue;
            }
            let (scenario, rename) = self.best.scenario.without_client(i);
            let plan = rename_plan(&self.best.plan, &rename);
            let candidate = Replay {
                scenario,
                plan,
                ..self.best.clone()
            };
            changed |= self.try_keep(candidate);
        }
        changed
    }

    fn halve_sizes(&mut self) -> bool {
        let mut changed = false;
        for i in 0..self.best.scenario.actions.len() {
            if !self.budget_left() {
                break;
            }
            let mut candidate = self.best.clone();
            let smaller = match &mut candidate.scenario.actions[i].kind {
                ActionKind::Burst { count, .. } if *count > 1 => {
                    *count /= 2;
                    true
                }
                ActionKind::Media { bytes, .. } if *bytes > 1 => {
                    *bytes /= 2;
                    true
                }
                ActionKind::Offline { stay_ms } | ActionKind::SecondDevice { stay_ms }
                    if *stay_ms > 1_000 =>
                {
                    *stay_ms /= 2;
                    true
                }
                _ => false,
            };
            if smaller {
                changed |= self.try_keep(candidate);
            }
        }
        changed
    }
}

impl Shrinker<'_> {
    /// Halves the numbers in raw clients' acts (frames, requests, answers provoked, sockets).
    fn halve_acts(&mut self) -> bool {
        let mut changed = false;
        for i in 0..self.best.plan.events.len() {
            if !self.budget_left() {
                break;
            }
            let mut candidate = self.best.clone();
            let smaller = match &mut candidate.plan.events[i].action {
                FaultAction::Hostile { act, .. } => match act {
                    HostileAct::Flood { frames: n, .. }
                    | HostileAct::Dishonest { count: n, .. }
                    | HostileAct::StopReading { provoke: n, .. }
                    | HostileAct::Storm { sockets: n, .. }
                        if *n > 1 =>
                    {
                        *n /= 2;
                        true
                    }
                    _ => false,
                },
                _ => false,
            };
            if smaller {
                changed |= self.try_keep(candidate);
            }
        }
        changed
    }
}

fn rename_plan(plan: &FaultPlan, rename: &dyn Fn(&str) -> Option<String>) -> FaultPlan {
    let mut out = plan.clone();
    out.events = plan
        .events
        .iter()
        .filter_map(|e| {
            Some(FaultEvent {
                at_ms: e.at_ms,
                action: e.action.rename(rename)?,
            })
        })
        .collect();
    out
}

/// A one-line size of a replay.
pub fn size(r: &Replay) -> String {
    let burst: u64 = r
        .scenario
        .actions
        .iter()
        .map(|a| match a.kind {
            ActionKind::Burst { count, .. } => u64::from(count),
            _ => 0,
        })
        .sum();
    format!(
        "{} clients, {} strangers, {} actions ({burst} burst messages), {} fault events",
        r.scenario.accounts.len(),
        r.scenario.strangers.len(),
        r.scenario.actions.len(),
        r.plan.events.len()
    )
}

/// Shrinks `start`, which fails with `violation`, to a smaller replay that still violates the
/// same oracle (each candidate is one full simulation). `progress` hears about every step
/// that kept a smaller run.
pub fn shrink(
    start: Replay,
    violation: Violation,
    options: ShrinkOptions,
    progress: &mut dyn FnMut(&str),
) -> Shrunk {
    let oracle = violation.oracle;
    let mut check = |candidate: &Replay| {
        let config = RunConfig {
            capture_logs: options.capture_logs,
            #[cfg(feature = "planted-bugs")]
            planted: options.planted,
            ..RunConfig::replaying(candidate.clone())
        };
        run(&config)
            .violations
            .into_iter()
            .find(|v| v.oracle == oracle)
    };
    shrink_with(start, violation, options.max_runs, &mut check, progress)
}

/// [`shrink`] with the check given: `check` runs a candidate and returns its violation of the
/// target oracle, if it still has one.
pub fn shrink_with<'a>(
    start: Replay,
    violation: Violation,
    max_runs: u32,
    check: &'a mut Check<'a>,
    progress: &'a mut dyn FnMut(&str),
) -> Shrunk {
    let mut s = Shrinker {
        oracle: violation.oracle,
        max_runs,
        runs: 0,
        best: start,
        violation,
        check,
        progress,
    };
    loop {
        let mut changed = false;
        changed |= s.ddmin(
            |r| r.plan.events.clone(),
            |r, events| {
                let mut r = r.clone();
                r.plan.events = events;
                r
            },
        );
        changed |= s.drop_strangers();
        changed |= s.drop_clients();
        changed |= s.ddmin(
            |r| r.scenario.actions.clone(),
            |r, actions| {
                let mut r = r.clone();
                r.scenario.actions = actions;
                r
            },
        );
        changed |= s.ddmin(
            |r| r.scenario.rejections.clone(),
            |r, rejections| {
                let mut r = r.clone();
                r.scenario.rejections = rejections;
                r
            },
        );
        changed |= s.ddmin(
            |r| r.scenario.push_clients.clone(),
            |r, push_clients| {
                let mut r = r.clone();
                r.scenario.push_clients = push_clients;
                r
            },
        );
        changed |= s.halve_sizes();
        changed |= s.halve_acts();
        if !changed || !s.budget_left() {
            break;
        }
    }
    Shrunk {
        replay: s.best,
        violation: s.violation,
        runs: s.runs,
    }
}
