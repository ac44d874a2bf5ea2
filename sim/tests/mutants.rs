//! The simulator's own mutation score: cargo-mutants mutates relay-core's rule modules and
//! runs this sweep (not relay-core's tests) against each mutant; a mutant the sweep passes on
//! is one the simulator cannot tell from the real relay. BENCHMARKS.md "The simulator beyond
//! its catalogue" has the command, the score and the survivors.
//!
//! The sweep: [`SEEDS`] seeds of every class at the small scale under swarm faults, on two
//! threads, stopping at the first violation (a caught mutant costs one failing seed). It is
//! ignored in `cargo test`: on the unmutated relay it is a slower copy of what
//! `tests/simulate.rs` and the README's sweep check.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use sim::class::{Class, ClassChoice};
use sim::{RunConfig, run};

/// Seeds per run of the sweep (each class gets a quarter of them: seed `s` runs class
/// `s % 4`).
const SEEDS: u64 = 24;

#[test]
#[ignore = "the simulator's mutation sweep: run by cargo mutants (BENCHMARKS.md)"]
fn the_sweep_catches_the_mutant() {
    let next = AtomicU64::new(0);
    let caught = AtomicBool::new(false);
    let first: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                while !caught.load(Ordering::SeqCst) {
                    let seed = next.fetch_add(1, Ordering::SeqCst);
                    if seed >= SEEDS {
                        return;
                    }
                    let class = Class::ALL[usize::try_from(seed % 4).unwrap_or(0)];
                    let report = run(&RunConfig {
                        capture_logs: false,
                        class: ClassChoice::Only(class),
                        ..RunConfig::new(seed)
                    });
                    if let Some(v) = report.violations.first() {
                        caught.store(true, Ordering::SeqCst);
                        if let Ok(mut f) = first.lock() {
                            f.get_or_insert_with(|| format!("seed {seed} ({}): {v}", report.class));
                        }
                    }
                }
            });
        }
    });
    let first = first.into_inner().ok().flatten();
    assert!(first.is_none(), "{}", first.unwrap_or_default());
}
