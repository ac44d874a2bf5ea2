//! The operators' monitoring files (`deploy/`) against the metrics the relay exports: every
//! metric the Grafana dashboard (`deploy/grafana-dashboard.json`) and the Prometheus alerting
//! rules (`deploy/relay.rules.yml`) name is one the relay serves, the README's alert table
//! lists exactly the rules of the file, and, where `promtool` is installed, the rules pass
//! `promtool check rules` and their unit tests (`deploy/relay.rules.test.yml`) pass
//! `promtool test rules` (required with `RELAY_TEST_PROMTOOL_REQUIRED=1`, as in CI).
//!
//! The exported names come from the relay's own metrics ([`Metrics::encode`] with every
//! scrape-time source attached), never from a hand-kept list.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use relay_push::{PushRequest, PushResponse, PushTransport, PushWorker, TransportError};
use relay_server::OutboundBytes;
use relay_server::metrics::Metrics;
use seam::net::{ConnectionCounter, ServeLimits};
use wire::UnixMs;

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A push transport that never sends (the worker is only asked for its metrics).
struct NoTransport;

impl PushTransport for NoTransport {
    async fn send(&self, _request: PushRequest) -> Result<PushResponse, TransportError> {
        Err(TransportError::Connect(
            "no transport in this test".to_owned(),
        ))
    }
}

/// The exposition of a relay's metrics with every scrape-time source attached (connections,
/// outbound bytes, the queued-bytes limit, a push worker).
async fn exposition() -> String {
    let metrics = Metrics::new();
    metrics.attach_connections(ConnectionCounter::default(), ServeLimits::default());
    metrics.attach_outbound(OutboundBytes::default());
    metrics.set_queued_bytes_limit(1 << 30);
    let (worker, _gone) = PushWorker::spawn(
        relay_push::WorkerConfig::default(),
        NoTransport,
        Arc::new(|| UnixMs(0)),
        [7; 32],
    );
    metrics.attach_push(worker);
    metrics.attach_write_group(relay_core::store::WriteGroup::default());
    metrics.encode()
}

/// The OpenMetrics type of each family in `text`'s `# TYPE` lines.
fn families_of(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|rest| {
            let (family, kind) = rest.split_once(' ').expect("# TYPE name type");
            (family.to_owned(), kind.to_owned())
        })
        .collect()
}

/// The families `relay-server/src/metrics/mod.rs` registers, read from its source: each
/// `r.register(NAME, …, f.FIELD.clone())` or `r.register_with_unit(NAME, …, Unit::U, …)` call
/// of its `register` function, typed by the field's type in `struct Families`. The encoder
/// leaves a labelled family out of a scrape until it has a sample, so a scrape alone does not
/// show them all.
fn registered_families() -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/metrics/mod.rs");
    let source = read(&path);
    let fields = source
        .split("struct Families {")
        .nth(1)
        .and_then(|rest| rest.split("\n}").next())
        .expect("struct Families");
    let kind_of = |field: &str| -> String {
        let line = fields
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with(&format!("{field}:")))
            .unwrap_or_else(|| panic!("field {field} not in struct Families"));
        let kind = if line.contains("Histogram") {
            "histogram"
        } else if line.contains("Counter") {
            "counter"
        } else if line.contains("Gauge") {
            "gauge"
        } else {
            panic!("a metric type this test does not know: {line}")
        };
        kind.to_owned()
    };
    let body = source
        .split("fn register(r: &mut Registry, f: &Families) {")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .expect("fn register");
    let mut out = BTreeMap::new();
    for call in body.split("r.register").skip(1) {
        let name = call.split('"').nth(1).expect("a name literal");
        let unit = if call.starts_with("_with_unit(") {
            let unit = call
                .split("Unit::")
                .nth(1)
                .and_then(|u| u.split(',').next())
                .expect("Unit::");
            format!("_{}", unit.trim().to_lowercase())
        } else {
            String::new()
        };
        let kind = match call.split("f.").nth(1) {
            Some(rest) => kind_of(rest.split('.').next().expect("f.FIELD")),
            None if call.contains("info") => "info".to_owned(),
            None => panic!("cannot tell the type of {name}"),
        };
        out.insert(format!("relay_{name}{unit}"), kind);
    }
    assert_eq!(
        out.len(),
        body.matches("r.register").count(),
        "a family registered twice or not read"
    );
    out
}

/// Every series name a scrape may carry: each family with the suffixes OpenMetrics gives its
/// type (a counter's `_total` and `_created`, a histogram's `_bucket`, `_sum`, `_count` and
/// `_created`, an info's `_info`).
fn series_names(families: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (family, kind) in families {
        let suffixes: &[&str] = match kind.as_str() {
            "counter" => &["_total", "_created"],
            "histogram" => &["_bucket", "_sum", "_count", "_created"],
            "info" => &["_info"],
            "gauge" | "unknown" => &[""],
            other => panic!("a metric type this test does not know: {other}"),
        };
        for suffix in suffixes {
            names.insert(format!("{family}{suffix}"));
        }
    }
    names
}

/// The exported series names: the registered families (from the source) and the families a
/// scrape with every scrape-time source attached shows (connections, push worker, …, which
/// the collector writes whether or not anything happened).
async fn exported() -> BTreeSet<String> {
    let registered = registered_families();
    let scraped = families_of(&exposition().await);
    // Where both know a family, they agree on its type: the source reading is right.
    for (family, kind) in &scraped {
        if let Some(from_source) = registered.get(family) {
            assert_eq!(from_source, kind, "{family}");
        }
    }
    for unlabelled in ["relay_websockets", "relay_build"] {
        assert!(scraped.contains_key(unlabelled), "{unlabelled} not scraped");
        assert!(registered.contains_key(unlabelled), "{unlabelled} not read");
    }
    let mut all = registered;
    all.extend(scraped);
    let names = series_names(&all);
    for sure in [
        "relay_frames_received_total",
        "relay_store_commit_duration_seconds_bucket",
        "relay_tcp_connections",
        "relay_pushes_total",
        "relay_push_queue_limit",
        "relay_build_info",
    ] {
        assert!(names.contains(sure), "{sure} not in {names:?}");
    }
    names
}

/// The metric names in a PromQL expression: every `relay_…` word (label values are quoted and
/// the relay's never start with `relay_` but `relay_queue_full`, which is skipped as quoted).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut quoted = false;
    let mut word = String::new();
    for c in expr.chars().chain([' ']) {
        if c == '"' {
            quoted = !quoted;
        }
        if !quoted && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            word.push(c);
            continue;
        }
        if word.starts_with("relay_") {
            names.insert(std::mem::take(&mut word));
        }
        word.clear();
    }
    names
}

/// Every `expr` of the dashboard: each panel's targets, panels nested in rows too.
fn dashboard_exprs(panels: &[serde_json::Value], out: &mut Vec<(String, String)>) {
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or("(untitled)").to_owned();
        if let Some(nested) = panel["panels"].as_array() {
            dashboard_exprs(nested, out);
        }
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array();
        assert!(
            targets.is_some_and(|t| !t.is_empty()),
            "panel {title:?} has no query"
        );
        for target in targets.into_iter().flatten() {
            let expr = target["expr"].as_str().expect("every target has an expr");
            out.push((title.clone(), expr.to_owned()));
        }
    }
}

/// Every string of a JSON document (queries of panels, template variables, annotations).
fn strings<'a>(value: &'a serde_json::Value, out: &mut Vec<&'a str>) {
    match value {
        serde_json::Value::String(s) => out.push(s),
        serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        serde_json::Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

#[tokio::test]
async fn every_metric_the_dashboard_names_is_one_the_relay_exports() {
    let exported = exported().await;
    let json: serde_json::Value =
        serde_json::from_str(&read(&deploy("grafana-dashboard.json"))).expect("dashboard JSON");
    let mut exprs = Vec::new();
    dashboard_exprs(json["panels"].as_array().expect("panels"), &mut exprs);
    assert!(exprs.len() >= 10, "{exprs:?}");
    for (title, expr) in &exprs {
        assert!(
            !metric_names(expr).is_empty(),
            "panel {title:?}: {expr} names no relay metric"
        );
    }
    // Every name anywhere in the document: panels' queries, the template variables' queries.
    let mut all = Vec::new();
    strings(&json, &mut all);
    let used: BTreeSet<String> = all.iter().flat_map(|s| metric_names(s)).collect();
    for name in &used {
        assert!(
            exported.contains(name),
            "the dashboard names {name}, which the relay does not export"
        );
    }
    println!(
        "the dashboard's {} queries name {} metrics",
        exprs.len(),
        used.len()
    );
}

/// The rules file's alerts: (name, expression), in the file's order. The file keeps each
/// rule's `expr` on one line (a YAML scalar, quoted or plain), which this reader relies on.
fn rules() -> Vec<(String, String)> {
    let text = read(&deploy("relay.rules.yml"));
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("- alert: ") {
            out.push((name.trim().to_owned(), String::new()));
        } else if let Some(expr) = line.strip_prefix("expr: ") {
            let last = out.last_mut().expect("an expr after its alert");
            assert!(last.1.is_empty(), "two exprs in {}", last.0);
            last.1 = expr.trim_matches(['\'', ' ']).to_owned();
        }
    }
    for (name, expr) in &out {
        assert!(!expr.is_empty(), "alert {name} has no expr on one line");
    }
    out
}

#[tokio::test]
async fn every_metric_the_alerting_rules_name_is_one_the_relay_exports() {
    let exported = exported().await;
    let rules = rules();
    assert!(rules.len() >= 10, "{rules:?}");
    for (alert, expr) in &rules {
        let names = metric_names(expr);
        assert!(
            !names.is_empty(),
            "alert {alert}: {expr} names no relay metric"
        );
        for name in names {
            assert!(
                exported.contains(&name),
                "alert {alert} names {name}, which the relay does not export"
            );
        }
    }
}

/// The README's alert table (the rows of the table under "Alerts") lists the rules file's
/// alerts, each once and in the file's order: the expressions live in the file only.
#[test]
fn the_readme_lists_exactly_the_alerts_of_the_rules_file() {
    let readme = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"));
    let start = readme
        .find("| alert | severity | why |")
        .expect("the README's alert table");
    let listed: Vec<String> = readme[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cell = l
                .trim_start_matches('|')
                .split('|')
                .next()
                .unwrap_or_default();
            cell.trim().trim_matches('`').to_owned()
        })
        .collect();
    let in_file: Vec<String> = rules().into_iter().map(|(name, _)| name).collect();
    assert_eq!(
        listed, in_file,
        "README alert table vs deploy/relay.rules.yml"
    );
}

/// Runs `promtool` with `args` in `deploy/`; `None` when it is not installed (and not required).
fn promtool(args: &[&str]) -> Option<std::process::Output> {
    match Command::new("promtool")
        .args(args)
        .current_dir(deploy(""))
        .output()
    {
        Ok(output) => Some(output),
        Err(e) if std::env::var_os("RELAY_TEST_PROMTOOL_REQUIRED").is_some() => {
            panic!("promtool is required (RELAY_TEST_PROMTOOL_REQUIRED) but did not run: {e}")
        }
        Err(e) => {
            eprintln!("skipped: promtool did not run ({e}); apt-get install prometheus");
            None
        }
    }
}

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests_pass() {
    for args in [
        &["check", "rules", "relay.rules.yml"][..],
        &["test", "rules", "relay.rules.test.yml"][..],
    ] {
        let Some(output) = promtool(args) else {
            return;
        };
        assert!(
            output.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
