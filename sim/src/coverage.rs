//! Probe coverage of a sweep: which code probes (see the `probes` crate) the runs hit, how
//! often and in how many seeds, and which catalogued probes they never reached.
//!
//! The **catalogue** (`sim/probes.txt`, compiled in) lists every probe the code can hit, one
//! per line as `NAME` or `NAME must`: `must` marks the probes the README's main sweep hits,
//! which CI's shorter sweep must mostly hit too (`sim/tests/probes.rs`). A probe the main
//! sweep misses says why on its line (`NAME # why: …`): which longer sweep reaches it, or why
//! no simulated client can; regenerating keeps those reasons. The catalogue is the
//! union of what the sources declare — each `probe!("…")` and each refusal site
//! (`refuse:CODE@file`, from the `ErrorCode::…` a module refuses with; see [`scan_sources`])
//! — and what a sweep hit (a refusal built from a code another module chose; the line that
//! chooses it says so, [`NOT_A_REFUSAL_SITE`], and declares nothing). A test fails
//! when the sources declare a probe the catalogue lacks, so a new refusal or transition is
//! either reached by the simulator or shows up as never hit.
//!
//! Regenerate it from the main sweep (keeps the names, refreshes the `must` marks):
//!
//! ```text
//! cargo run --release -p sim --bin simulate -- --scale medium --seeds 0..100 --update-probe-catalogue
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::faults::{FaultKind, FaultSelection, SWARM_DEFAULT_WEIGHT};

/// The committed catalogue (`sim/probes.txt`).
pub const CATALOGUE: &str = include_str!("../probes.txt");

/// The catalogue's path in the source tree (for `--update-probe-catalogue`).
pub const CATALOGUE_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/probes.txt");

/// The workspace root in the source tree this binary was built from.
pub const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Source directories whose probes the catalogue covers (relative to the workspace root).
pub const SOURCE_DIRS: [&str; 2] = ["relay-core/src", "client-core/src"];

/// One catalogued probe.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    /// Its name.
    pub name: String,
    /// The main sweep hits it; CI's shorter sweep should.
    pub must: bool,
    /// Why the main sweep misses it (a `# why: …` comment on its line).
    pub why: Option<String>,
}

/// The comment that gives a probe's reason (see the module doc).
const WHY: &str = "# why:";

/// Parses a catalogue: `NAME` or `NAME must` per line, optionally followed by `# why: REASON`;
/// any other `#` starts a comment.
pub fn parse(text: &str) -> Vec<Entry> {
    text.lines()
        .filter_map(|line| {
            let (body, comment) = line.split_once('#').map_or((line, None), |(b, _)| {
                (b, line.find(WHY).map(|i| line[i + WHY.len()..].trim()))
            });
            let mut words = body.split_whitespace();
            let name = words.next()?.to_owned();
            Some(Entry {
                name,
                must: words.next() == Some("must"),
                why: comment.filter(|w| !w.is_empty()).map(str::to_owned),
            })
        })
        .collect()
}

/// The committed catalogue, parsed.
pub fn catalogue() -> Vec<Entry> {
    parse(CATALOGUE)
}

/// Writes a catalogue: `names`, each marked `must` when `hit` has it; a name not hit keeps
/// its reason from `previous` (the catalogue being replaced).
pub fn render(names: &BTreeSet<String>, hit: &BTreeSet<String>, previous: &[Entry]) -> String {
    let reasons: BTreeMap<&str, &str> = previous
        .iter()
        .filter_map(|e| Some((e.name.as_str(), e.why.as_deref()?)))
        .collect();
    let mut out = String::from(
        "# Code probes the simulator can reach (generated; see sim/src/coverage.rs).\n\
         # NAME [must]: `must` = hit by the README's main sweep (medium scale, seeds 0..100).\n\
         # A probe it misses says why: `NAME # why: REASON` (kept when regenerated).\n",
    );
    for name in names {
        if hit.contains(name) {
            let _ = writeln!(out, "{name} must");
        } else if let Some(why) = reasons.get(name.as_str()) {
            let _ = writeln!(out, "{name} {WHY} {why}");
        } else {
            let _ = writeln!(out, "{name}");
        }
    }
    out
}

/// Hits of one probe over a sweep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProbeHits {
    /// Hits in all runs.
    pub hits: u64,
    /// Runs (seeds) that hit it at least once.
    pub seeds: u64,
}

/// Probe coverage accumulated over the runs of a sweep.
#[derive(Debug, Clone, Default)]
pub struct Coverage {
    /// Runs added.
    pub runs: u64,
    /// Each probe hit, with its counts.
    pub probes: BTreeMap<String, ProbeHits>,
}

impl Coverage {
    /// Adds one run's probe counts.
    pub fn add(&mut self, run: &BTreeMap<String, u64>) {
        self.runs += 1;
        for (name, n) in run {
            let p = self.probes.entry(name.clone()).or_default();
            p.hits += n;
            p.seeds += 1;
        }
    }

    /// Catalogued probes no run hit.
    pub fn never_hit<'a>(&self, catalogue: &'a [Entry]) -> Vec<&'a Entry> {
        catalogue
            .iter()
            .filter(|e| !self.probes.contains_key(&e.name))
            .collect()
    }

    /// Probes hit that the catalogue does not list.
    pub fn uncatalogued(&self, catalogue: &[Entry]) -> Vec<&str> {
        let known: BTreeSet<&str> = catalogue.iter().map(|e| e.name.as_str()).collect();
        self.probes
            .keys()
            .map(String::as_str)
            .filter(|n| !known.contains(n))
            .collect()
    }

    /// `(hit, of)` over the catalogue's `must` probes.
    pub fn must_share(&self, catalogue: &[Entry]) -> (usize, usize) {
        let must: Vec<&Entry> = catalogue.iter().filter(|e| e.must).collect();
        let hit = must
            .iter()
            .filter(|e| self.probes.contains_key(&e.name))
            .count();
        (hit, must.len())
    }

    /// The report: catalogue coverage, the rarest probes hit, every probe never hit.
    pub fn summary(&self, catalogue: &[Entry]) -> String {
        let never = self.never_hit(catalogue);
        let (must_hit, must) = self.must_share(catalogue);
        let mut out = format!(
            "probes: {} of {} catalogued hit over {} run(s) ({} of {} `must`); {} hit outside the catalogue\n",
            catalogue.len() - never.len(),
            catalogue.len(),
            self.runs,
            must_hit,
            must,
            self.uncatalogued(catalogue).len()
        );
        let mut rare: Vec<(&String, &ProbeHits)> = self.probes.iter().collect();
        rare.sort_by_key(|(name, p)| (p.seeds, p.hits, (*name).clone()));
        let rare: Vec<String> = rare
            .iter()
            .take(12)
            .map(|(name, p)| format!("{name} ({} in {} seed(s))", p.hits, p.seeds))
            .collect();
        if !rare.is_empty() {
            let _ = writeln!(out, "  rarest hit: {}", rare.join(", "));
        }
        if !never.is_empty() {
            let names: Vec<String> = never
                .iter()
                .map(|e| {
                    if e.must {
                        format!("{} (must)", e.name)
                    } else {
                        e.name.clone()
                    }
                })
                .collect();
            let explained = never.iter().filter(|e| e.why.is_some()).count();
            let _ = writeln!(
                out,
                "  never hit ({}, {explained} with a catalogued reason): {}",
                never.len(),
                names.join(", ")
            );
        }
        out
    }

    /// For `--json`: every probe hit with its counts, and the catalogued ones never hit.
    pub fn to_json(&self, catalogue: &[Entry]) -> serde_json::Value {
        let (must_hit, must) = self.must_share(catalogue);
        serde_json::json!({
            "runs": self.runs,
            "catalogued": catalogue.len(),
            "must": must,
            "must_hit": must_hit,
            "hit": self.probes,
            "never_hit": self.never_hit(catalogue).iter().map(|e| &e.name).collect::<Vec<_>>(),
            "uncatalogued": self.uncatalogued(catalogue),
        })
    }
}

/// Seeds per batch of a steered sweep: the weights change between batches only.
pub const STEER_BATCH: u64 = 20;

/// Bounds of a steered weight (out of [`crate::faults::SWARM_WEIGHT_SCALE`]): no kind is
/// starved or forced into every run.
pub const STEER_MIN_WEIGHT: u32 = 8;
/// See [`STEER_MIN_WEIGHT`].
pub const STEER_MAX_WEIGHT: u32 = 56;

/// Coverage-steered fault selection (`simulate --steer`): a swarm whose per-kind weights move,
/// after each batch of [`STEER_BATCH`] seeds, toward the fault kinds whose runs hit rarely-hit
/// probes. The weights of a batch depend only on the batches before it, so a steered sweep is
/// as deterministic as a plain one, and each seed's run is replayed from its selection
/// (`--faults swarm:KIND=WEIGHT,…`, printed with it and in the JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steering {
    /// Each fault kind's weight.
    pub weights: BTreeMap<FaultKind, u32>,
}

impl Default for Steering {
    fn default() -> Self {
        Self {
            weights: FaultKind::ALL
                .into_iter()
                .map(|k| (k, SWARM_DEFAULT_WEIGHT))
                .collect(),
        }
    }
}

impl Steering {
    /// The selection the next batch draws from.
    pub fn selection(&self) -> FaultSelection {
        FaultSelection::Weighted(self.weights.clone())
    }

    /// Moves the weights after a batch. `seen` is the sweep's coverage so far (this batch
    /// included); `batch` holds each run's fault kinds and probe hits. A run scores the sum,
    /// over the probes it hit, of one over the number of seeds that hit that probe (a probe
    /// only it reached counts 1, a probe every seed hits next to nothing); a kind's weight is
    /// multiplied by the square root of the ratio between the mean score of the batch's runs
    /// with it and without it (at most ×2 or ÷2 a batch), within the bounds.
    pub fn update(
        &mut self,
        seen: &Coverage,
        batch: &[(BTreeSet<FaultKind>, &BTreeMap<String, u64>)],
    ) {
        let scores: Vec<(&BTreeSet<FaultKind>, f64)> = batch
            .iter()
            .map(|(kinds, probes)| {
                let score = probes
                    .keys()
                    .map(|p| {
                        let seeds = seen.probes.get(p).map_or(1, |h| h.seeds).max(1);
                        1.0 / seeds as f64
                    })
                    .sum::<f64>();
                (kinds, score)
            })
            .collect();
        for (kind, weight) in &mut self.weights {
            let (with, without): (Vec<f64>, Vec<f64>) = {
                let (a, b): (Vec<_>, Vec<_>) =
                    scores.iter().partition(|(kinds, _)| kinds.contains(kind));
                (
                    a.iter().map(|(_, s)| *s).collect(),
                    b.iter().map(|(_, s)| *s).collect(),
                )
            };
            if with.is_empty() || without.is_empty() {
                continue;
            }
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
            let ratio = (mean(&with) + 0.01) / (mean(&without) + 0.01);
            let factor = ratio.sqrt().clamp(0.5, 2.0);
            let moved = (f64::from(*weight) * factor).round();
            // Bounded above by STEER_MAX_WEIGHT, so the cast cannot truncate.
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "clamped to 8..=56"
            )]
            let moved =
                moved.clamp(f64::from(STEER_MIN_WEIGHT), f64::from(STEER_MAX_WEIGHT)) as u32;
            *weight = moved;
        }
    }
}

/// The probes the sources under `root` declare: each `probe!("NAME")`, and for each refusal
/// site a `refuse:CODE@stem` for every `ErrorCode::CODE` a non-test line of module `stem`
/// names as a value (not in a comparison or a match pattern). Refusals whose code another
/// module chose are hit under the module that built them; those come into the catalogue
/// from a sweep (see the module doc).
///
/// # Errors
/// Reading a directory or file failed.
pub fn scan_sources(root: &Path) -> std::io::Result<BTreeSet<String>> {
    let mut found = BTreeSet::new();
    for dir in SOURCE_DIRS {
        scan_dir(&root.join(dir), &mut found)?;
    }
    Ok(found)
}

fn scan_dir(dir: &Path, found: &mut BTreeSet<String>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(std::fs::DirEntry::path);
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            scan_dir(&path, found)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path)?;
            let file = path.to_string_lossy();
            scan_file(probes::module_name(&file), &text, found);
        }
    }
    Ok(())
}

/// Marks a line whose error code is chosen for another module to refuse with (a code
/// mapping, a constructor): the refusal is named after that module, not this one.
pub const NOT_A_REFUSAL_SITE: &str = "// probe: refused by the caller";

/// The probes one file declares (see [`scan_sources`]).
pub fn scan_file(stem: &str, text: &str, found: &mut BTreeSet<String>) {
    // Unit tests sit at the end of a file, after `#[cfg(test)]`.
    let code = text.split("\n#[cfg(test)]").next().unwrap_or(text);
    for line in code.lines() {
        let elsewhere = line.contains(NOT_A_REFUSAL_SITE);
        let line = line.split("//").next().unwrap_or("");
        let mut rest = line;
        while let Some(i) = rest.find("probe!(\"") {
            let after = &rest[i + 8..];
            if let Some(end) = after.find('"') {
                found.insert(after[..end].to_owned());
            }
            rest = &rest[i + 8..];
        }
        if elsewhere || line.contains("==") || line.contains("!=") || line.contains("matches!") {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("ErrorCode::") {
            let after = &rest[i + 11..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let tail = after[name.len()..].trim_start();
            if name.len() > 1 && !tail.starts_with("=>") && !tail.starts_with('|') {
                found.insert(probes::refusal_name(&name, &format!("{stem}.rs")));
            }
            rest = after;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scanner_finds_probes_and_refusal_sites_but_not_patterns_tests_or_comments() {
        let src = r#"
fn f() {
    probes::probe!("order:paid");
    return Err(ApiError::new(ErrorCode::ORDER_NOT_FOUND, "no"));
    if e.code == ErrorCode::RATE_LIMITED { }
    // ErrorCode::IN_A_COMMENT
    match c { ErrorCode::PATTERN => 1, ErrorCode::OTHER | ErrorCode::THIRD => 2 }
    let x = ErrorCode::VALUE;
    Self::Mapped => ErrorCode::CHOSEN_HERE, // probe: refused by the caller
}
#[cfg(test)]
mod tests { fn t() { probes::probe!("test:only"); let _ = ErrorCode::IN_TESTS; } }
"#;
        let mut found = BTreeSet::new();
        scan_file("vanity", src, &mut found);
        let found: Vec<&str> = found.iter().map(String::as_str).collect();
        assert_eq!(
            found,
            [
                "order:paid",
                "refuse:ORDER_NOT_FOUND@vanity",
                "refuse:VALUE@vanity"
            ]
        );
    }

    #[test]
    fn steering_favours_the_kinds_whose_runs_hit_rare_probes() {
        let common = BTreeMap::from([("a:common".to_owned(), 5)]);
        let rare = BTreeMap::from([("a:common".to_owned(), 1), ("b:rare".to_owned(), 1)]);
        let with_partition = BTreeSet::from([FaultKind::Partition]);
        let with_hold = BTreeSet::from([FaultKind::Hold]);
        let batch = vec![
            (with_partition.clone(), &rare),
            (with_hold.clone(), &common),
            (with_hold, &common),
            (with_partition, &rare),
        ];
        let mut seen = Coverage::default();
        for (_, p) in &batch {
            seen.add(p);
        }
        let mut steering = Steering::default();
        steering.update(&seen, &batch);
        let w = &steering.weights;
        assert!(w[&FaultKind::Partition] > SWARM_DEFAULT_WEIGHT, "{w:?}");
        assert!(w[&FaultKind::Hold] < SWARM_DEFAULT_WEIGHT, "{w:?}");
        assert_eq!(
            w[&FaultKind::Latency],
            SWARM_DEFAULT_WEIGHT,
            "in no run of the batch: unchanged"
        );
        for _ in 0..20 {
            steering.update(&seen, &batch);
        }
        assert_eq!(steering.weights[&FaultKind::Partition], STEER_MAX_WEIGHT);
        assert_eq!(steering.weights[&FaultKind::Hold], STEER_MIN_WEIGHT);
        let text = steering.selection().to_string();
        assert_eq!(
            text.parse::<FaultSelection>(),
            Ok(steering.selection()),
            "{text}"
        );
    }

    #[test]
    fn coverage_counts_hits_seeds_and_what_was_missed() {
        let catalogue = parse(
            "a:b must\nc:d # why: only a unit test reaches it\n# comment\ne:f must  # trailing\n",
        );
        assert_eq!(catalogue.len(), 3);
        assert_eq!(
            catalogue[1].why.as_deref(),
            Some("only a unit test reaches it")
        );
        assert_eq!(catalogue[2].why, None);
        let mut cov = Coverage::default();
        cov.add(&BTreeMap::from([
            ("a:b".to_owned(), 3),
            ("x:y".to_owned(), 1),
        ]));
        cov.add(&BTreeMap::from([("a:b".to_owned(), 1)]));
        assert_eq!(cov.probes["a:b"], ProbeHits { hits: 4, seeds: 2 });
        let never: Vec<&str> = cov
            .never_hit(&catalogue)
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(never, ["c:d", "e:f"]);
        assert_eq!(cov.uncatalogued(&catalogue), ["x:y"]);
        assert_eq!(cov.must_share(&catalogue), (1, 2));
        let text = cov.summary(&catalogue);
        assert!(
            text.contains("1 of 3 catalogued hit over 2 run(s) (1 of 2 `must`)"),
            "{text}"
        );
        assert!(text.contains("e:f (must)"), "{text}");
        assert!(
            text.contains("never hit (2, 1 with a catalogued reason)"),
            "{text}"
        );
        let names = BTreeSet::from(["a:b".to_owned(), "c:d".to_owned(), "e:f".to_owned()]);
        let hit = BTreeSet::from(["a:b".to_owned()]);
        assert_eq!(
            parse(&render(&names, &hit, &catalogue)),
            parse("a:b must\nc:d # why: only a unit test reaches it\ne:f")
        );
    }
}
