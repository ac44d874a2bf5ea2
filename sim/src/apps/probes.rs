//! The probe round after healing: a message and a typing notice to each of up to
//! [`PROBE_PEERS`] peers, a call if the client's pair is in the call matching, then a
//! download of every media message the client received, checked against what its sender
//! uploaded. The `probes` and `media` oracles read what this records.

use std::collections::BTreeSet;

use super::RETRY_MS;
use super::traffic::{record_sent, sha256_hex, target};
use crate::bounds::{PROBE_AFTER_HEAL_MS, STORM_WAVE, STORM_WAVE_MS};
use crate::scenario::Scenario;
use crate::time::{sim_ms, sleep_ms};
use crate::trace::Device;
use crate::world::{HostCtx, ProbeRec, wait_until};
use client::Client;
use seam::net::Turmoil;

/// Attempts of one media download in the probe round.
const MEDIA_ATTEMPTS: u32 = 3;
/// Probes go to at most this many peers per client.
const PROBE_PEERS: usize = 3;

/// After healing: a message and a typing notice to each of up to [`PROBE_PEERS`] peers, and
/// a call if its pair is in the call matching; then each media message received is downloaded and
/// checked against what its sender uploaded.
pub(super) async fn probe_round(ctx: &HostCtx, client: &Client<Turmoil>) {
    let me = ctx.me;
    wait_until(ctx, |w| w.heal_ms.is_some()).await;
    let heal = ctx.world.borrow().heal_ms.unwrap_or(0);
    let at = heal + PROBE_AFTER_HEAL_MS + (me / STORM_WAVE) as u64 * STORM_WAVE_MS;
    sleep_ms(at.saturating_sub(sim_ms())).await;
    let peers: Vec<usize> = ctx
        .scenario
        .pairs_of(me)
        .take(PROBE_PEERS)
        .map(|(i, _)| i)
        .collect();
    let calls_to = call_matching(&ctx.scenario)
        .into_iter()
        .find(|p| ctx.scenario.pairs[*p].a == me);
    for pair in peers {
        probe_peer(ctx, client, pair).await;
    }
    if let Some(pair) = calls_to {
        probe_call(ctx, client, pair).await;
    }
    check_media(ctx, client).await;
}

/// A message and a typing notice to the peer of `pair`.
async fn probe_peer(ctx: &HostCtx, client: &Client<Turmoil>, pair: usize) {
    let me = ctx.me;
    let who = Device {
        client: me,
        device: 0,
    };
    let peer = ctx.scenario.pairs[pair].peer(me);
    let (conv, alias) = target(ctx, pair);
    let sent_ms = sim_ms();
    let text = format!("probe c{me} -> c{peer}");
    if let Ok(id) = client.send_message(&conv, &alias, &text, None).await {
        record_sent(ctx, who, id.clone(), conv.clone(), &alias);
        ctx.world.borrow_mut().probes.push(ProbeRec {
            kind: "message",
            from: me,
            to: peer,
            conv: conv.clone(),
            id,
            sent_ms,
        });
    }
    if client.send_typing(&conv, &alias).await.is_ok() {
        ctx.world.borrow_mut().probes.push(ProbeRec {
            kind: "typing",
            from: me,
            to: peer,
            conv: conv.clone(),
            id: String::new(),
            sent_ms: sim_ms(),
        });
    }
}

/// A call offer to the peer of `pair` (answered by its [`answer_calls`](super::session)).
///
/// client-core signs call signals with the alias given to `init_calls`; after a vanity bind
/// the relay names the new alias and the peer refuses the signal (`FromMismatch`), so clients
/// whose alias changed sit the call out.
async fn probe_call(ctx: &HostCtx, client: &Client<Turmoil>, pair: usize) {
    let me = ctx.me;
    let rebound = |c: usize| {
        ctx.world
            .borrow()
            .alias_history
            .get(&c)
            .is_some_and(|h| h.len() > 1)
    };
    let peer = ctx.scenario.pairs[pair].peer(me);
    let Some(calls) = client.calls() else {
        return;
    };
    if rebound(me) || rebound(peer) {
        return;
    }
    let (conv, alias) = target(ctx, pair);
    let call_id = format!("call-c{me}-c{peer}");
    let mut options = client::CallOptions::default();
    options
        .fields
        .insert("sdp".to_owned(), serde_json::Value::from("v=0 offer"));
    let sent_ms = sim_ms();
    if calls.call(&alias, &call_id, options).await.is_ok() {
        ctx.world.borrow_mut().probes.push(ProbeRec {
            kind: "call",
            from: me,
            to: peer,
            conv,
            id: call_id,
            sent_ms,
        });
    }
}

/// The pairs whose requester calls in the probe round: a matching (no client in two calls,
/// or the second offer would find it busy), greedy in pair order.
fn call_matching(scenario: &Scenario) -> Vec<usize> {
    let mut busy = BTreeSet::new();
    let mut out = Vec::new();
    for (i, p) in scenario.pairs.iter().enumerate() {
        if !busy.contains(&p.a) && !busy.contains(&p.b) {
            busy.insert(p.a);
            busy.insert(p.b);
            out.push(i);
        }
    }
    out
}

/// Downloads every media message this client received and compares it with what was sent.
async fn check_media(ctx: &HostCtx, client: &Client<Turmoil>) {
    let me = ctx.me;
    let sent = ctx.world.borrow().media_sent.clone();
    for (id, (conv, want, _)) in sent {
        let Ok(Some(m)) = client.get_message_data(&id).await else {
            continue;
        };
        if m.is_me {
            continue;
        }
        let key = m
            .media_url
            .as_deref()
            .unwrap_or(m.text.as_str())
            .trim_start_matches("[img]")
            .to_owned();
        // A lost response is retried; a refusal or undecryptable bytes are final.
        let mut outcome = Err(String::new());
        for _ in 0..MEDIA_ATTEMPTS {
            outcome = match client.media().download_decrypted(&key, &conv).await {
                Ok(data) => Ok(sha256_hex(&data) == want),
                Err(e) => Err(e.to_string()),
            };
            if outcome.is_ok() {
                break;
            }
            sleep_ms(RETRY_MS).await;
        }
        ctx.world
            .borrow_mut()
            .media_checks
            .push((me, id, outcome, sim_ms()));
    }
}
