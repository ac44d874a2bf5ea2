//! Code probes in CI (see `sim::coverage`): the committed catalogue lists every probe the
//! sources declare, and a short sweep reaches a stated share of the probes the README's main
//! sweep reaches (`must`). A new refusal or transition that no simulated client can reach
//! fails the first test until it is catalogued, then shows up as never hit in every sweep's
//! probe report; one the short sweep stops reaching fails the second; a probe the main sweep
//! misses without a reason in the catalogue fails the third.

use std::collections::BTreeSet;
use std::path::Path;

use sim::coverage::{self, Coverage};
use sim::{RunConfig, run};

/// Seeds of the short sweep (small scale, swarm faults, drawn store: the default mix).
const SEEDS: std::ops::Range<u64> = 0..16;

/// Share of the catalogue's `must` probes the short sweep must hit, in percent.
const MUST_SHARE_PERCENT: usize = 75;

const REGENERATE: &str = "cargo run --release -p sim --bin simulate -- --scale medium --seeds 0..100 --update-probe-catalogue";

#[test]
fn the_catalogue_lists_every_probe_the_sources_declare() {
    let declared =
        coverage::scan_sources(Path::new(coverage::WORKSPACE)).expect("read the sources");
    assert!(
        declared.len() > 50,
        "the scan found only {} probes: is it reading the right tree?",
        declared.len()
    );
    let catalogue: BTreeSet<String> = coverage::catalogue().into_iter().map(|e| e.name).collect();
    let missing: Vec<&String> = declared.difference(&catalogue).collect();
    assert!(
        missing.is_empty(),
        "probes declared in the sources but not in sim/probes.txt: {missing:?}\nregenerate it with the main sweep: {REGENERATE}"
    );
}

/// Most probes the main sweep may miss, each with its reason (BENCHMARKS "The simulator
/// beyond its catalogue": the longer sweep and relay-core's tests reach the rest). Two of
/// them are the bounds of reads ahead (frames waiting per connection and in all), which no
/// simulated client reaches, one was reached by a seed or two until reads ahead moved its
/// timing (BENCHMARKS "The core never waits for a frame's read"), and three are the vanity hold
/// caps (a fourth unpaid hold of one account, an eleventh of one network) and the deletion of
/// orders a week after they are over, which no scenario buyer and no days run reach; one is
/// fail-stop refusing requests that wait for reads, which needs a commit fault in that window.
/// One is delivery's fallback for a page of a synced queue that no read ahead brought with
/// nothing in flight, and one a sync racing the expiry sweep, both reached by relay-core's
/// `paged_sync` tests; one is the accounts' `STORAGE_UNAVAILABLE`, whose only site the sweeps
/// reached (the storage estimate's queue read) is gone. Four are a sharded relay's, which the
/// main sweep does not run yet: a request forwarded to a friendship's owner shard that cannot
/// wait or is not answered in time (relay-core's `shard_friends` tests reach them), a
/// retraction that reaches the recipient's shard before its message, and an upgrade held at a
/// core that has not heard yet from every other shard (relay-core's `shards` tests).
const MOST_MISSES: usize = 21;

#[test]
fn every_probe_the_main_sweep_misses_says_why() {
    let catalogue = coverage::catalogue();
    let missed: Vec<&coverage::Entry> = catalogue.iter().filter(|e| !e.must).collect();
    let silent: Vec<&str> = missed
        .iter()
        .filter(|e| e.why.is_none())
        .map(|e| e.name.as_str())
        .collect();
    assert!(
        silent.is_empty(),
        "probes the main sweep misses with no `# why:` in sim/probes.txt: {silent:?}"
    );
    assert!(
        missed.len() <= MOST_MISSES,
        "the main sweep misses {} catalogued probes (at most {MOST_MISSES}): {:?}",
        missed.len(),
        missed.iter().map(|e| &e.name).collect::<Vec<_>>()
    );
}

#[test]
fn a_short_sweep_hits_most_probes_the_main_sweep_hits() {
    let catalogue = coverage::catalogue();
    let seeds: Vec<u64> = SEEDS.collect();
    let runs: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = seeds
            .chunks(seeds.len().div_ceil(2))
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|&seed| {
                            let mut config = RunConfig::new(seed);
                            config.capture_logs = false;
                            run(&config).probes
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("sweep thread"))
            .collect()
    });
    let mut cov = Coverage::default();
    for probes in &runs {
        cov.add(probes);
    }
    let (hit, must) = cov.must_share(&catalogue);
    println!("{}", cov.summary(&catalogue));
    assert!(
        must > 0,
        "the catalogue marks no probe `must`: {REGENERATE}"
    );
    assert!(
        hit * 100 >= must * MUST_SHARE_PERCENT,
        "the short sweep (small seeds {SEEDS:?}) hit {hit} of {must} `must` probes, under {MUST_SHARE_PERCENT}%; missed: {:?}",
        cov.never_hit(&catalogue)
            .iter()
            .filter(|e| e.must)
            .map(|e| &e.name)
            .collect::<Vec<_>>()
    );
}
