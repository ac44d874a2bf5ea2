//! The traffic script of one client app: the scenario's actions for this client, each at its
//! time after traffic starts; an action due while the host was down is skipped (the world's
//! `next_action` survives restarts).

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use sha2::{Digest as _, Sha256};

use super::session::second_device;
use crate::market;
use crate::scenario::ActionKind;
use crate::seeds::{TAG_MEDIA, derive_seed};
use crate::time::{sim_ms, sleep_ms};
use crate::trace::{Device, Record};
use crate::world::{HostCtx, note, wait_until};
use client::Client;
use seam::net::Turmoil;

/// Runs this client's scripted actions at their times; actions due while the host was down
/// are skipped.
pub(super) async fn traffic(ctx: &HostCtx, client: &Client<Turmoil>) {
    let me = ctx.me;
    wait_until(ctx, |w| w.traffic_start_ms.is_some()).await;
    let start = ctx.world.borrow().traffic_start_ms.unwrap_or(0);
    let actions: Vec<(usize, _)> = ctx
        .scenario
        .actions
        .iter()
        .enumerate()
        .filter(|(_, a)| a.client == me)
        .map(|(i, a)| (i, a.clone()))
        .collect();
    for (index, action) in actions {
        if ctx
            .world
            .borrow()
            .next_action
            .get(&me)
            .is_some_and(|n| index < *n)
        {
            continue;
        }
        let due = start + action.at_ms;
        let now = sim_ms();
        if due + 1_000 < now || ctx.world.borrow().heal_ms.is_some() {
            note(ctx, format!("c{me} skipped action {index} (host was down)"));
            ctx.world.borrow_mut().next_action.insert(me, index + 1);
            continue;
        }
        sleep_ms(due.saturating_sub(now)).await;
        perform(ctx, client, index, &action.kind).await;
        ctx.world.borrow_mut().next_action.insert(me, index + 1);
    }
}

/// The primary device of this app.
fn primary(ctx: &HostCtx) -> Device {
    Device {
        client: ctx.me,
        device: 0,
    }
}

/// `(conversation, peer's alias)` of this client's pair `pair`, as the world knows them.
pub(super) fn target(ctx: &HostCtx, pair: usize) -> (String, String) {
    let w = ctx.world.borrow();
    let peer = ctx.scenario.pairs[pair].peer(ctx.me);
    (
        w.convs.get(&pair).cloned().unwrap_or_default(),
        w.aliases.get(&peer).cloned().unwrap_or_default(),
    )
}

/// Performs action `index`.
async fn perform(ctx: &HostCtx, client: &Client<Turmoil>, index: usize, kind: &ActionKind) {
    match kind {
        ActionKind::Send { pair, text } => send(ctx, client, *pair, text).await,
        ActionKind::Burst {
            pair,
            count,
            canary,
        } => burst(ctx, client, index, *pair, *count, canary).await,
        ActionKind::Offline { stay_ms } => offline(ctx, client, *stay_ms).await,
        ActionKind::Media { pair, bytes } => media(ctx, client, index, *pair, *bytes).await,
        ActionKind::Read { pair } => read(ctx, client, *pair).await,
        ActionKind::Typing { pair } => {
            let (conv, peer) = target(ctx, *pair);
            drop(client.send_typing(&conv, &peer).await);
        }
        ActionKind::Retract { pair } => retract(ctx, client, *pair).await,
        ActionKind::SecondDevice { stay_ms } => second_device(ctx, client, *stay_ms).await,
        ActionKind::BuyAlias { alias, pay } => market::buy_alias(ctx, client, alias, *pay).await,
        ActionKind::CreateChannel { price_usdt } => {
            market::create_channel(ctx, client, *price_usdt).await;
        }
        ActionKind::BuyChannel { slot, pay } => {
            market::buy_channel(ctx, client, *slot, *pay).await;
        }
        ActionKind::BuyQuota { pay } => market::buy_quota(ctx, client, *pay).await,
    }
}

async fn send(ctx: &HostCtx, client: &Client<Turmoil>, pair: usize, text: &str) {
    let who = primary(ctx);
    let (conv, peer) = target(ctx, pair);
    match client.send_message(&conv, &peer, text, None).await {
        Ok(id) => record_sent(ctx, who, id, conv, &peer),
        Err(e) => note(ctx, format!("{who} send refused: {e}")),
    }
}

/// `count` messages at once (the first carries the canary); stops at the first refusal.
async fn burst(
    ctx: &HostCtx,
    client: &Client<Turmoil>,
    index: usize,
    pair: usize,
    count: u32,
    canary: &str,
) {
    let who = primary(ctx);
    let (conv, peer) = target(ctx, pair);
    for i in 0..count {
        let text = if i == 0 {
            format!("burst {index}: {canary}")
        } else {
            format!("burst {index} #{i}")
        };
        match client.send_message(&conv, &peer, &text, None).await {
            Ok(id) => record_sent(ctx, who, id, conv.clone(), &peer),
            Err(e) => {
                note(ctx, format!("{who} burst refused at #{i}: {e}"));
                break;
            }
        }
    }
}

/// Disconnects for `stay_ms` (or until healing), then connects again.
async fn offline(ctx: &HostCtx, client: &Client<Turmoil>, stay_ms: u64) {
    let who = primary(ctx);
    drop(client.disconnect().await);
    let from = sim_ms();
    note(ctx, format!("{who} goes offline for {stay_ms} ms"));
    tokio::select! {
        biased;
        () = sleep_ms(stay_ms) => {}
        () = wait_until(ctx, |w| w.heal_ms.is_some()) => {}
    }
    drop(client.connect().await);
    ctx.world
        .borrow_mut()
        .offline
        .push((ctx.me, from, sim_ms()));
    note(ctx, format!("{who} back online"));
}

/// Sends `bytes` of media drawn from the seed, remembering what was sent.
async fn media(ctx: &HostCtx, client: &Client<Turmoil>, index: usize, pair: usize, bytes: u32) {
    let who = primary(ctx);
    let (conv, peer) = target(ctx, pair);
    let data = media_bytes(ctx.seed, index, bytes);
    match client.send_image(&conv, &peer, &data).await {
        Ok(id) => {
            ctx.world
                .borrow_mut()
                .media_sent
                .insert(id.clone(), (conv.clone(), sha256_hex(&data), sim_ms()));
            record_sent(ctx, who, id, conv, &peer);
        }
        Err(e) => note(ctx, format!("{who} media refused: {e}")),
    }
}

/// Marks the peer's messages read up to the newest one this client has.
async fn read(ctx: &HostCtx, client: &Client<Turmoil>, pair: usize) {
    let who = primary(ctx);
    let (conv, peer) = target(ctx, pair);
    let history = client
        .get_history(&conv, None, None)
        .await
        .unwrap_or_default();
    let Some(seq) = history
        .iter()
        .filter(|m| !m.is_me)
        .filter_map(|m| m.seq)
        .max()
    else {
        return;
    };
    match client.mark_as_read(&conv, seq, &peer).await {
        Ok(()) => ctx.trace.push(Record::ReadMarked {
            t_ms: sim_ms(),
            who,
            conv,
            seq,
        }),
        Err(e) => note(ctx, format!("{who} read refused: {e}")),
    }
}

/// Retracts this client's newest acknowledged text message in the pair.
async fn retract(ctx: &HostCtx, client: &Client<Turmoil>, pair: usize) {
    let who = primary(ctx);
    let (conv, peer) = target(ctx, pair);
    let history = client
        .get_history(&conv, None, None)
        .await
        .unwrap_or_default();
    let Some(m) = history
        .iter()
        .rev()
        .find(|m| m.is_me && m.seq.is_some() && m.msg_type.is_none())
    else {
        return;
    };
    match client.retract_message(&m.id, &peer, &conv).await {
        Ok(()) => {
            ctx.world.borrow_mut().honest_retracts.insert(m.id.clone());
            note(ctx, format!("{who} retracted {}", m.id));
        }
        Err(e) => note(ctx, format!("{who} retract refused: {e}")),
    }
}

/// Records a message the app queued: in the world (for the raw clients to steal) and in the
/// trace.
pub(super) fn record_sent(ctx: &HostCtx, who: Device, id: String, conv: String, peer: &str) {
    ctx.world
        .borrow_mut()
        .sent_ids
        .insert(id.clone(), (conv.clone(), peer.to_owned()));
    ctx.trace.push(Record::Sent {
        t_ms: sim_ms(),
        who,
        id,
        conv,
    });
}

/// The plaintext of media action `index`.
fn media_bytes(seed: u64, index: usize, len: u32) -> Vec<u8> {
    let mut rng = ChaCha20Rng::from_seed(derive_seed(seed, TAG_MEDIA, index as u64));
    let mut out = vec![0u8; len as usize];
    rng.fill_bytes(&mut out);
    out
}

/// SHA-256 of `data`, hex.
pub(super) fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
