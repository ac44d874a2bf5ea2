//! A simulation test of your own: a world from a seed, faults by name (drawn from the seed)
//! and at chosen moments, the main sweep's oracles and a check of your own. Same world, same
//! trace hash. `cargo run -p sim --example own_simulation_test`

use sim::faults::FaultAction;
use sim::harness::{Relays, World};
use sim::oracles::Oracle;

// `pub(crate)`: tests/harness.rs runs this file as a module too.
pub(crate) fn main() {
    let world = World::from_seed(3)
        .relays(Relays::Sqlite)
        .faults("partition,hold")
        // 15 s into the traffic the relay powers off; 3 s later it starts on the same store.
        .fault_at(
            15_000,
            FaultAction::Crash {
                host: "relay".into(),
            },
        )
        .fault_at(
            18_000,
            FaultAction::Restart {
                host: "relay".into(),
            },
        );
    let run = world.clone().run();
    run.check_all()
        .check(&[Oracle::DeliveredExactlyOnce, Oracle::Liveness])
        .check_that("messages were acknowledged", |r| r.stats.acked > 0)
        .check_that("the relay started again on its store", |r| {
            r.stats.loads >= 2
        });
    assert_eq!(
        world.run().trace_hash(),
        run.trace_hash(),
        "same world, same run"
    );
    println!("seed 3: trace {}", run.trace_hash());
}
