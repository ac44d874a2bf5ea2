//! The client-visible oracles of a Jepsen-mode run: the history and the client stores
//! become an [`Observed`], and the simulator's own oracles judge it
//! ([`delivery`], [`receipts`](crate::oracles::receipts::receipts)); `liveness` here means
//! "every acknowledged message arrived by the end of the wait after healing"
//! ([`JEPSEN_LIVENESS_MS`]).

use std::collections::{BTreeMap, BTreeSet};

use client_core::store::MessageStatus;
use serde_json::Value;

use super::JEPSEN_LIVENESS_MS;
use super::apps::{App, HistoryEntry};
use crate::oracles::observed::{Observed, Seen, acked_in, undelivered};
use crate::oracles::wire::{self as wire_oracles, WireSeen};
use crate::oracles::{delivery, receipts};
use crate::scenario::Pair;
use crate::trace::Device;
use crate::violation::{Oracle, Violation};
use client::SharedStore;

/// Every status an app can report, as the history writes it (lower-case `Debug`).
const STATUSES: [MessageStatus; 5] = [
    MessageStatus::Sending,
    MessageStatus::Failed,
    MessageStatus::Sent,
    MessageStatus::Delivered,
    MessageStatus::Read,
];

/// Runs the client-visible oracles over `history` and the apps' stores; violations as text.
pub(super) fn check(
    apps: &[App],
    convs: &BTreeMap<(usize, usize), String>,
    history: &[HistoryEntry],
    wire: &WireSeen,
    out: &mut Vec<String>,
) {
    let stores: Vec<SharedStore> = apps.iter().map(|a| a.store.clone()).collect();
    let conv_ids: Vec<&str> = convs.values().map(String::as_str).collect();
    let acked = acked_in(&stores, &conv_ids);
    let aliases = aliases(history);
    let observed = Observed {
        members: convs
            .iter()
            .map(|(&(a, b), conv)| (conv.as_str(), Pair { a, b }))
            .collect(),
        aliases: &aliases,
        acked: &acked,
        exempt: BTreeSet::new(),
        events: history.iter().filter_map(seen).collect(),
        causal: false,
        stores: &stores,
    };
    let mut found = Vec::new();
    wire_oracles::duplicate_delivery(wire, &mut found);
    wire_oracles::seq_reused(wire, &mut found);
    wire_oracles::ack_lost(wire, &observed.members, &mut found);
    wire_oracles::receipts_causal(wire, &observed.members, &mut found);
    delivery::exactly_once(&observed, &mut found);
    delivery::non_participant(&observed, &mut found);
    delivery::seq_order(&observed, &mut found);
    receipts::receipts(&observed, &mut found);
    liveness(&observed, &mut found);
    out.extend(found.iter().map(ToString::to_string));
}

/// `liveness`: every acknowledged message arrived (its recipient's app had it, or its store
/// holds it) by the end of the wait after healing.
fn liveness(h: &Observed<'_>, out: &mut Vec<Violation>) {
    let missing: Vec<_> = undelivered(h).into_values().flatten().collect();
    if let Some(first) = missing.first() {
        out.push(Violation::new(
            Oracle::Liveness,
            format!(
                "{} acknowledged message(s) not delivered within {JEPSEN_LIVENESS_MS} ms of healing; first: {} (from c{})",
                missing.len(),
                first.id,
                first.sender
            ),
        ));
    }
}

/// `unexpected-answer`: a refusal the scenario gives the relay no reason for: a status
/// other than 401 (a token superseded or expired: the client logs in again), 409 on a
/// purchase (another client holds the alias), 429 (a rate limit) and 5xx (a relay
/// restarting); no answer at all and refused upgrades are the faults'. Quotes the first body.
pub(super) fn unexpected_refusals(
    routes: &BTreeMap<String, super::RouteCount>,
    out: &mut Vec<String>,
) {
    for (route, r) in routes {
        if route == "WS error frame" || route.starts_with("GET /ws") {
            continue;
        }
        for (status, n) in &r.refused {
            let Ok(code) = status.parse::<u16>() else {
                continue;
            };
            let legit = matches!(code, 401 | 429 | 500..=599)
                || (code == 409 && route == "POST /api/v1/vanity/purchase");
            if !legit {
                let body = r.first_body.get(status).map_or("", String::as_str);
                out.push(
                    Violation::new(
                        Oracle::UnexpectedAnswer,
                        format!("{route} answered {status} ×{n} of {}: {body}", r.requests),
                    )
                    .to_string(),
                );
            }
        }
    }
}

/// Message id → the conversation its app sent it in (every `send` of the history).
pub(super) fn sent_in(history: &[HistoryEntry]) -> BTreeMap<String, String> {
    history
        .iter()
        .filter_map(|e| {
            let id = e.what.get("send")?.as_str()?;
            let conv = e.what.get("conv")?.as_str()?;
            Some((id.to_owned(), conv.to_owned()))
        })
        .collect()
}

/// Every alias each client had: the one it registered with, then any it bound.
fn aliases(history: &[HistoryEntry]) -> BTreeMap<usize, Vec<String>> {
    let mut out: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for e in history {
        let Some(c) = e.client else { continue };
        let alias = ["registered", "bound"]
            .iter()
            .find_map(|k| e.what.get(*k).and_then(Value::as_str));
        if let Some(alias) = alias {
            out.entry(c).or_default().push(alias.to_owned());
        }
    }
    out
}

/// What a history entry tells the oracles, if anything (every app is its client's primary
/// device).
fn seen(e: &HistoryEntry) -> Option<Seen<'_>> {
    let who = Device {
        client: e.client?,
        device: 0,
    };
    let what = &e.what;
    if let Some(id) = what.get("message").and_then(Value::as_str) {
        if what["is_me"] == true {
            return None;
        }
        return Some(Seen::Message {
            who,
            id,
            conv: what["conv"].as_str().unwrap_or_default(),
            seq: what["seq"].as_u64(),
            from: what["from"].as_str(),
        });
    }
    if let (Some(id), Some(to)) = (
        what.get("status").and_then(Value::as_str),
        what.get("to").and_then(Value::as_str),
    ) {
        let status = STATUSES
            .into_iter()
            .find(|s| format!("{s:?}").to_lowercase() == to)?;
        return Some(Seen::Status { who, id, status });
    }
    if let (Some(conv), Some(seq)) = (
        what.get("read").and_then(Value::as_str),
        what.get("seq").and_then(Value::as_u64),
    ) {
        return Some(Seen::ReadMarked { who, conv, seq });
    }
    what.get("authenticated").map(|_| Seen::Login { who })
}
