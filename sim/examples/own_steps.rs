//! A simulation with steps of your own: two named users on the project's async client, each
//! running ordinary async Rust against the client API, concurrently, while alice's link to the
//! relay is held for a second. Same seed, same trace hash.
//! `cargo run -p sim --example own_steps`

use sim::steps::{StepFault, Steps, StepsRun};

fn world(seed: u64) -> StepsRun {
    Steps::new(seed)
        .user("alice", |alice| async move {
            let conv = alice.befriend("bob").await;
            let bob = alice.alias_of("bob").await;
            for text in ["hello bob", "are you there?"] {
                alice
                    .client()
                    .send_message(&conv, &bob, text, None)
                    .await
                    .map_err(|e| format!("send: {e}"))?;
            }
            alice.wait_for(|event| event.contains("Delivered")).await;
            Ok(())
        })
        .user("bob", |bob| async move {
            bob.befriend("alice").await;
            bob.wait_for(|event| event.contains("are you there?")).await;
            bob.note("got both messages");
            Ok(())
        })
        .fault_at(300, StepFault::Hold("alice".into(), "relay".into()))
        .fault_at(1_300, StepFault::Release("alice".into(), "relay".into()))
        .run()
}

// `pub(crate)`: tests/steps.rs runs this file as a module too.
pub(crate) fn main() {
    let run = world(11);
    run.check_all();
    assert_eq!(
        world(11).trace_hash(),
        run.trace_hash(),
        "same seed, same run"
    );
    println!("{}", run.trace().join("\n"));
    println!("seed 11: trace {}", run.trace_hash());
}
