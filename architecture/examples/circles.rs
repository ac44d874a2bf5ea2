//! Prints each crate's import circles and its top-level arrows:
//! `cargo run -p architecture --example circles -- relay-core [relay-server ...]`.

use architecture::ModuleGraph;

fn main() -> std::io::Result<()> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for krate in std::env::args().skip(1) {
        let graph = ModuleGraph::of_crate(&root.join(&krate).join("src"))?;
        println!("# {krate}: {} files", graph.modules.len());
        for (n, circle) in graph.circles().iter().enumerate() {
            println!("circle {}: {}", n + 1, circle.join(", "));
            for from in circle {
                let to: Vec<&str> = graph.arrows[from]
                    .iter()
                    .filter(|t| circle.contains(t))
                    .map(String::as_str)
                    .collect();
                println!("  {from} -> {}", to.join(", "));
            }
        }
        let top = graph.top_level();
        println!("top-level arrows:");
        for (from, to) in &top.arrows {
            println!(
                "  {from} -> {}",
                to.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }
    Ok(())
}
