//! The scenario API (`sim::harness`) as a test of someone else's would use it: the example in
//! `sim/examples/` runs here (so CI runs it), and the README's "Write your own simulation
//! test" shows it and the steps example (`tests/steps.rs` runs that one) whole.

#[path = "../examples/own_simulation_test.rs"]
mod example;

#[test]
fn the_example_runs_and_passes() {
    example::main();
}

/// The README's "Write your own simulation test" shows both examples whole.
#[test]
fn the_readme_shows_the_example_files() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let section = readme
        .split("## Write your own simulation test")
        .nth(1)
        .expect("the README section");
    for file in ["own_simulation_test.rs", "own_steps.rs"] {
        let path = format!("{}/examples/{file}", env!("CARGO_MANIFEST_DIR"));
        let source = std::fs::read_to_string(&path).expect("the example");
        assert!(
            section.contains(&format!("```rust\n{source}```")),
            "README's example differs from sim/examples/{file}"
        );
    }
}
