//! The scenario API (`sim::harness`) as a test of someone else's would use it: the example in
//! `sim/examples/` runs here (so CI runs it), and the README's "Write your own simulation
//! test" shows that example whole.

#[path = "../examples/own_simulation_test.rs"]
mod example;

#[test]
fn the_example_runs_and_passes() {
    example::main();
}

#[test]
fn the_readme_example_is_the_example_file() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let section = readme
        .split("## Write your own simulation test")
        .nth(1)
        .expect("the README section");
    let source = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/own_simulation_test.rs"
    ))
    .expect("the example");
    assert!(
        section.contains(&format!("```rust\n{source}```")),
        "README's example differs from sim/examples/own_simulation_test.rs"
    );
}
