//! Worlds of named users with steps of their own (`sim::steps`): the example in
//! `sim/examples/own_steps.rs` runs here (so CI runs it), and a failing step fails the run.

#[path = "../examples/own_steps.rs"]
mod example;

use sim::steps::Steps;

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

#[test]
fn the_readme_shows_the_example_file() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let section = readme
        .split("## Write your own simulation test")
        .nth(1)
        .expect("the README section");
    let source = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/own_steps.rs"
    ))
    .expect("the example");
    assert!(
        section.contains(&format!("```rust\n{source}```")),
        "README's example differs from sim/examples/own_steps.rs"
    );
}
