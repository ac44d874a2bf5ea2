//! Worlds of named users with steps of their own (`sim::steps`): the example in
//! `sim/examples/own_steps.rs` runs here (so CI runs it; `tests/harness.rs` checks the README
//! shows it), and a failing step fails the run.

#[path = "../examples/own_steps.rs"]
mod example;

use sim::steps::{StepFault, Steps, StepsRelay};

#[test]
fn the_example_runs_and_passes() {
    example::main();
}

#[test]
fn a_failing_step_fails_the_run_with_its_error() {
    let run = Steps::new(1)
        .user("carol", |carol| async move {
            carol.sleep_ms(100).await;
            Err(format!("{} gave up", carol.name()))
        })
        .run();
    let failure = run.failure().expect("the run failed");
    assert!(failure.contains("carol gave up"), "{failure}");
    assert!(
        run.trace()
            .iter()
            .any(|l| l.contains("carol: registered as"))
    );
}

/// A message sent after the relay powered off and came back (SQLite), after commits failed
/// (memory: fail-stop and rebuild), while reads and commits are slow, or after the relay's clock jumped an hour, still arrives.
#[test]
fn a_message_arrives_across_relay_and_store_faults() {
    for (relay, faults) in [
        (
            StepsRelay::Sqlite,
            vec![
                (1_000, StepFault::PowerOffRelay),
                (1_500, StepFault::PowerOnRelay),
            ],
        ),
        (StepsRelay::Memory, vec![(1_000, StepFault::FailCommits(3))]),
        (
            StepsRelay::Sqlite,
            vec![
                (800, StepFault::SlowReads(700)),
                (800, StepFault::SlowCommits(300)),
                (4_000, StepFault::SlowReads(0)),
                (4_000, StepFault::SlowCommits(0)),
            ],
        ),
        (
            StepsRelay::Memory,
            vec![(1_000, StepFault::RelayClockJump(3_600_000))],
        ),
    ] {
        let mut world = Steps::new(4)
            .relay(relay)
            .user("alice", |alice| async move {
                let conv = alice.befriend("bob").await;
                let bob = alice.alias_of("bob").await;
                alice.sleep_ms(1_500).await;
                let id = alice
                    .client()
                    .send_message(&conv, &bob, "after the fault", None)
                    .await
                    .map_err(|e| e.to_string())?;
                alice
                    .wait_for(|e| e.contains(&id) && e.contains("Delivered"))
                    .await;
                Ok(())
            })
            .user("bob", |bob| async move {
                bob.befriend("alice").await;
                bob.wait_for(|e| e.contains("after the fault")).await;
                Ok(())
            });
        for (at, fault) in faults {
            world = world.fault_at(at, fault);
        }
        let run = world.run();
        run.check_all();
        println!("{relay:?}: trace {}", run.trace_hash());
    }
}
