//! The workspace's structure against ARCHITECTURE.md (see the crate doc for how the sources
//! are read): no import circle between the top-level modules of a crate but those still
//! listed below (the list may only shrink), and the code map true of relay-core, relay-server
//! and conformance: every module listed, nothing listed that does not exist, and each row's
//! "May import" holding for the code.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use architecture::{ModuleGraph, code_map};

/// Every crate of the workspace, by directory.
const CRATES: &[&str] = &[
    "wire",
    "relay-core",
    "client-core",
    "seam",
    "relay-server",
    "client",
    "standins",
    "sim",
    "conformance",
    "benches",
    "relay-pg",
    "fault-proxy",
    "push",
    "private-files",
    "probes",
    "conformance-example",
];

/// Import circles between top-level modules that are known and not yet taken apart, by
/// crate: each exactly as it stands (a circle that grows, shrinks or appears fails the test,
/// so the list follows every step of taking them apart).
const KNOWN_CIRCLES: &[(&str, &[&str])] = &[
    ("relay-pg", &["error", "keys"]),
    ("relay-pg", &["reader", "store"]),
];

/// The crates whose code map rows are checked.
const MAPPED: &[&str] = &["relay-core", "relay-server", "conformance"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn graph(krate: &str) -> ModuleGraph {
    ModuleGraph::of_crate(&root().join(krate).join("src"))
        .unwrap_or_else(|e| panic!("reading {krate}/src: {e}"))
}

#[test]
fn no_crate_has_an_import_circle_but_the_known_ones() {
    let mut wrong = Vec::new();
    for krate in CRATES {
        let found = graph(krate).top_level().circles();
        let known: Vec<Vec<String>> = KNOWN_CIRCLES
            .iter()
            .filter(|(k, _)| k == krate)
            .map(|(_, c)| c.iter().map(|m| (*m).to_owned()).collect())
            .collect();
        for circle in &found {
            if !known.contains(circle) {
                wrong.push(format!("{krate}: a circle {circle:?}"));
            }
        }
        for circle in &known {
            if !found.contains(circle) {
                wrong.push(format!(
                    "{krate}: the known circle {circle:?} changed or is gone: update KNOWN_CIRCLES (and ARCHITECTURE.md)"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_code_map_lists_every_module_and_only_those() {
    let md = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let map = code_map(&md);
    let mut wrong = Vec::new();
    for krate in MAPPED {
        let rows = map.get(*krate).map(Vec::as_slice).unwrap_or_default();
        let listed: BTreeSet<String> = rows
            .iter()
            .flat_map(|r| r.modules.iter().cloned())
            .collect();
        let src = root().join(krate).join("src");
        let mut modules = graph(krate).top_level().modules;
        // The binary's own modules and its root.
        for file in ["main", "lib"] {
            if src.join(format!("{file}.rs")).exists() {
                modules.insert(file.to_owned());
            }
        }
        for entry in std::fs::read_dir(&src).expect("src").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(stem) = name.strip_suffix(".rs") {
                modules.insert(stem.to_owned());
            }
        }
        for m in modules.difference(&listed) {
            wrong.push(format!("{krate}: module `{m}` is not in the code map"));
        }
        for m in listed.difference(&modules) {
            wrong.push(format!(
                "{krate}: the code map lists `{m}`, which does not exist"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn each_module_imports_only_what_its_row_allows() {
    let md = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let map = code_map(&md);
    let mut wrong = Vec::new();
    let mut checked = 0;
    for krate in MAPPED {
        let top = graph(krate).top_level();
        for row in map.get(*krate).map(Vec::as_slice).unwrap_or_default() {
            let allowed: BTreeSet<&str> = row.may_import.iter().map(String::as_str).collect();
            for m in &row.modules {
                let Some(arrows) = top.arrows.get(m) else {
                    continue;
                };
                checked += 1;
                for to in arrows {
                    if !allowed.contains(to.as_str()) {
                        wrong.push(format!(
                            "{krate}: `{m}` imports `{to}`; its row allows only: {}",
                            row.may_import_text
                        ));
                    }
                }
            }
        }
    }
    assert!(
        checked > 30,
        "only {checked} modules with imports were checked"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The longest a function of relay-core, relay-server or client-core may be (lines, its
/// signature and closing brace included) without a `long on purpose:` comment saying why.
const MAX_FN_LINES: usize = 70;

/// Functions over [`MAX_FN_LINES`] not yet cut up, as `crate/file::name`: each must still be
/// over the limit (the list may only shrink), and no other may be.
const KNOWN_LONG: &[&str] = &[];

#[test]
fn no_function_is_long_without_a_reason_but_the_known_ones() {
    let mut long = BTreeSet::new();
    let mut measured = 0;
    for krate in ["relay-core", "relay-server", "client-core"] {
        let fns = architecture::function_lengths(&root().join(krate).join("src"))
            .unwrap_or_else(|e| panic!("reading {krate}/src: {e}"));
        measured += fns.len();
        for f in fns {
            if f.lines > MAX_FN_LINES && !f.explained {
                long.insert(format!("{krate}/{}::{}", f.file, f.name));
            }
        }
    }
    assert!(measured > 500, "only {measured} functions measured");
    let known: BTreeSet<String> = KNOWN_LONG.iter().map(|s| (*s).to_owned()).collect();
    let new: Vec<&String> = long.difference(&known).collect();
    let gone: Vec<&String> = known.difference(&long).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "over {MAX_FN_LINES} lines without a reason and not known: {new:#?}\nknown but now short (take them off KNOWN_LONG): {gone:#?}"
    );
}

/// Every `select!` in the workspace's libraries and binaries is `biased;`: the branches are
/// tried in the order written, so a simulated run replays from its seed (an unbiased
/// `tokio::select!` draws from an unseeded random number when two branches are ready).
#[test]
fn every_select_is_biased() {
    let mut checked = 0;
    let mut unbiased = Vec::new();
    for krate in CRATES {
        let found = architecture::selects(&root().join(krate).join("src"))
            .unwrap_or_else(|e| panic!("reading {krate}/src: {e}"));
        checked += found.len();
        unbiased.extend(
            found
                .into_iter()
                .filter(|(_, b)| !b)
                .map(|(at, _)| format!("{krate}/{at}")),
        );
    }
    assert!(
        checked > 10,
        "only {checked} select! found: is it reading the right tree?"
    );
    assert!(
        unbiased.is_empty(),
        "select! without `biased;` (add it, arms in priority order): {unbiased:#?}"
    );
}
