//! What an operator reads: the relay's metrics, held to what the run did.
//!
//! | oracle | what it checks |
//! |---|---|
//! | `webhook-counts` | `relay_payment_webhooks_total{result}` against every payment webhook the run sent and the answer it got; `relay_payment_refunds_needed_total` against the orders the store records as owing a refund |
//!
//! Every start of every relay host of a run counts into one registry (one scraped series that
//! outlives restarts). The relay counts a webhook when its core handles it, before the answer
//! (which waits for the commit), so each answer the run got is a lower bound on a result:
//! 2xx on `applied` + `duplicate`, 401 on `bad_signature`, 400 on `invalid`, 404 on
//! `unknown_order`. An attempt without an answer, or answered 5xx (a failed commit after the
//! count, or a failed read counted `invalid`) or 429 (refused by the server before the core),
//! may count once or not at all. Only the payment processor stand-in signs with the relay's
//! secret and reports real payments, so `applied` + `duplicate` is at most its attempts with a
//! genuine signature. Each order the store records as owing a refund was counted in
//! `relay_payment_refunds_needed_total` when its flag was set, so the counter is at least their
//! number.

use std::collections::BTreeMap;

use standins::PaymentProcessor;

use relay_core::store::{Snapshot, Table};

use crate::violation::{Oracle, Violation};

/// The oracle.
const ORACLE: Oracle = Oracle::WebhookCounts;
/// The family's name in the exposition.
const FAMILY: &str = "relay_payment_webhooks_total";
/// The refund counter's name in the exposition.
const REFUNDS: &str = "relay_payment_refunds_needed_total";

/// What `webhook-counts` reads.
pub(crate) struct WebhookInput<'a> {
    /// The genuine processor stand-in.
    pub(crate) processor: &'a PaymentProcessor,
    /// The stand-in that signs with a guessed secret.
    pub(crate) forger: &'a PaymentProcessor,
    /// The drills' own signed webhooks: status -> how many.
    pub(crate) drills: &'a BTreeMap<u16, u64>,
    /// The relay's metrics exposition at the end of the run.
    pub(crate) exposition: &'a str,
    /// The relay store's committed content at the end.
    pub(crate) snapshot: &'a Snapshot,
}

/// The relay's webhook counters against what the run sent (see the module doc); the number of
/// bounds judged (0 when no webhook was answered).
pub(crate) fn webhook_counts(input: &WebhookInput<'_>, out: &mut Vec<Violation>) -> u64 {
    let counted = counters(input.exposition);
    let count = |result: &str| counted.get(result).copied().unwrap_or(0);
    let processed = input.processor.deliveries();
    let genuine = processed.iter().filter(|d| !d.forged).count() as u64;
    let mut answered: BTreeMap<u16, u64> = input.drills.clone();
    for d in processed.iter().chain(input.forger.deliveries().iter()) {
        if let Some(s) = d.status {
            *answered.entry(s).or_default() += 1;
        }
    }
    let answers = |pick: &dyn Fn(u16) -> bool| -> u64 {
        answered
            .iter()
            .filter(|(s, _)| pick(**s))
            .map(|(_, n)| n)
            .sum()
    };
    let mut judged = 0;
    // `what`: the result labels summed; empty for the refund counter.
    let mut at_least = |what: &str, counted: u64, floor: u64, out: &mut Vec<Violation>| {
        if floor == 0 {
            return;
        }
        judged += 1;
        if counted < floor {
            let detail = if what.is_empty() {
                format!(
                    "{REFUNDS} is {counted}, but the store records {floor} orders owing a refund"
                )
            } else {
                format!(
                    "{FAMILY}{{{what}}} is {counted}, but the relay answered {floor} webhooks that way"
                )
            };
            out.push(Violation::new(ORACLE, detail));
        }
    };
    let ok = count("applied") + count("duplicate");
    at_least(
        "result=\"applied\"+\"duplicate\"",
        ok,
        answers(&|s| (200..300).contains(&s)),
        out,
    );
    at_least(
        "result=\"bad_signature\"",
        count("bad_signature"),
        answers(&|s| s == 401),
        out,
    );
    at_least(
        "result=\"invalid\"",
        count("invalid"),
        answers(&|s| s == 400),
        out,
    );
    at_least(
        "result=\"unknown_order\"",
        count("unknown_order"),
        answers(&|s| s == 404),
        out,
    );
    at_least(
        "",
        refunds(input.exposition),
        owing_refunds(input.snapshot),
        out,
    );
    if ok > 0 || genuine > 0 {
        judged += 1;
        if ok > genuine {
            out.push(Violation::new(
                ORACLE,
                format!(
                    "{FAMILY} counts {ok} webhooks applied or duplicate, more than the {genuine} attempts the payment processor made with the shared secret"
                ),
            ));
        }
    }
    judged
}

/// Orders the store records as owing a refund.
fn owing_refunds(snapshot: &Snapshot) -> u64 {
    snapshot.get(&Table::Orders).map_or(0, |rows| {
        rows.values()
            .filter_map(|v| serde_json::from_slice::<serde_json::Value>(v).ok())
            .filter(|o| o.get("refund_needed").and_then(serde_json::Value::as_bool) == Some(true))
            .count() as u64
    })
}

/// The value of [`REFUNDS`] in an OpenMetrics exposition (0 when absent).
fn refunds(exposition: &str) -> u64 {
    exposition
        .lines()
        .find_map(|l| {
            l.strip_prefix(REFUNDS)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// `result` label -> value of [`FAMILY`] in an OpenMetrics exposition.
fn counters(exposition: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix(FAMILY) else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let Some(result) = labels
            .split(',')
            .find_map(|l| l.trim_start_matches('{').strip_prefix("result="))
        else {
            continue;
        };
        if let Ok(n) = value.trim().parse::<u64>() {
            *out.entry(result.trim_matches('"').to_owned()).or_default() += n;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::counters;

    #[test]
    fn reads_the_webhook_family_by_result() {
        let text = "# TYPE relay_payment_webhooks counter\n\
            relay_payment_webhooks_total{result=\"applied\"} 3\n\
            relay_payment_webhooks_total{result=\"bad_signature\"} 1\n\
            relay_payment_webhooks_created{result=\"applied\"} 1.7e9\n\
            relay_payment_refunds_needed_total 2\n# EOF\n";
        let c = counters(text);
        assert_eq!(c.get("applied"), Some(&3));
        assert_eq!(c.get("bad_signature"), Some(&1));
        assert_eq!(c.len(), 2);
        assert_eq!(super::refunds(text), 2);
    }
}
