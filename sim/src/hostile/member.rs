//! A member of a conversation acting on the other member's objects. The stranger keeps a
//! second account of its own, its *puppet* (registered from a mnemonic derived from the
//! stranger's), befriends it, and has it write to the stranger; then the stranger, a real
//! member of that conversation, attacks what belongs to the puppet. Both sockets are raw, so
//! the simulator sees every frame the relay sends either of them:
//!
//! | attempt (by the stranger) | refused when | breach, seen by the puppet |
//! |---|---|---|
//! | a `delivered` receipt for a seq the relay never sent it (its socket never synced) | always | a `delivered` receipt from the stranger for that seq |
//! | a `retract` of the puppet's message | always (only the author retracts) | a `retract` of its own message |
//! | a `msg` naming the puppet as its `from` | the relay stamps `from` itself | a `msg` of the stranger's whose `from` is not the stranger's alias |
//! | a `call_offer` naming the puppet as its `from` | the relay stamps `from` on every call signal it passes on | a `call_offer` of the stranger's whose `from` is not the stranger's alias |
//!
//! The breaches are judged on what the relay told the victim, which no network fault can
//! fabricate; a fault that drops a step leaves that attempt unjudged.

use std::time::Duration;

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use serde_json::{Value, json};
use wire::http::paths;

use super::Findings;
use super::http::{RawAccount, field, get, http, post, put_empty, register};
use super::ws::{RawReader, RawWriter, open_ws, ws_query};
use crate::time::sim_ms;
use crate::violation::{Oracle, Violation};

/// How long one step waits for the relay's answer (an `ack`, a delivery).
pub(super) const STEP_MS: u64 = 3_000;

/// base64 of "mine"
const PAYLOAD: &str = "bWluZQ==";

/// The puppet's mnemonic: a fixed function of the stranger's, so every act (and every rerun
/// of the stranger's script after a crash) finds the same account.
pub(super) fn puppet_mnemonic(mnemonic: &str) -> String {
    let seed = mnemonic.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    client_core::keys::new_mnemonic(&mut ChaCha20Rng::seed_from_u64(seed))
        .expose()
        .to_owned()
}

/// Registers (or logs in) the puppet of the stranger whose mnemonic is `mnemonic`.
pub(super) async fn puppet(mnemonic: &str) -> Option<(RawAccount, client_core::keys::Identity)> {
    let words = puppet_mnemonic(mnemonic);
    let identity =
        client_core::keys::derive_identity(&words, client_core::keys::X25519Path::Spec).ok()?;
    let account = register(&words, "puppet").await?;
    Some((account, identity))
}

/// The stranger `attacker` against its `puppet`, in their conversation `conv`; returns the
/// breaches and how many attempts were judged.
pub(super) async fn member(
    attacker: &RawAccount,
    puppet: &RawAccount,
    conv: &str,
) -> (Findings, usize) {
    let Some((mut p_reader, mut p_writer)) = socket(puppet, true).await else {
        return (Findings::new(), 0);
    };
    let mut found = Findings::new();
    let mut judged = 0;
    let act_ms = sim_ms();
    let (unsent, id) = (message_id(puppet, act_ms, 1), message_id(puppet, act_ms, 2));
    // 1. A receipt beyond what was sent: written to while it has no synced socket, the
    //    stranger opens one without `sync` and acks the newest seq.
    if let Some(seq) = send(&mut p_reader, &mut p_writer, &unsent, attacker, conv).await
        && let Some((_, mut w)) = socket(attacker, false).await
    {
        w.text(&json!({"type": "delivered", "conv_id": conv, "seq": seq, "to": puppet.alias, "crypto_v": 1}))
            .await;
        judged += 1;
        let frames = read_for(&mut p_reader, STEP_MS).await;
        if frames
            .iter()
            .any(|f| is(f, "delivered") && f.get("seq").and_then(Value::as_u64) >= Some(seq))
        {
            found.push(Violation::new(
                Oracle::Authz,
                format!(
                    "a member's delivered receipt for seq {seq} of {conv}, never sent to it, reached the message's author"
                ),
            ));
        }
    }
    // 2. A retract of the other member's message, and a `msg` naming the other as `from`.
    let Some((mut a_reader, mut a_writer)) = socket(attacker, true).await else {
        return (found, judged);
    };
    if send(&mut p_reader, &mut p_writer, &id, attacker, conv)
        .await
        .is_some()
    {
        a_writer
            .text(&json!({"type": "retract", "id": id, "to": puppet.alias, "conv_id": conv, "crypto_v": 1}))
            .await;
        judged += 1;
        let frames = read_for(&mut p_reader, STEP_MS).await;
        if frames
            .iter()
            .any(|f| is(f, "retract") && f.get("id").and_then(Value::as_str) == Some(&id))
        {
            found.push(Violation::new(
                Oracle::Authz,
                format!(
                    "the other member of {conv} retracted {id}, and the retract reached its author"
                ),
            ));
        }
    }
    // Frames the relay passes on, each naming the puppet itself as its `from`: the relay
    // must stamp `from` with the sender's alias.
    let call_id = format!("member-call-{act_ms}");
    let forged_msg = format!("member-{}-{act_ms}", attacker.alias);
    let forgeries = [
        (
            "id",
            forged_msg.as_str(),
            json!({"type": "msg", "id": forged_msg, "to": puppet.alias, "from": puppet.alias, "conv_id": conv, "crypto_v": 1, "payload": PAYLOAD}),
        ),
        (
            "call_id",
            call_id.as_str(),
            json!({"type": "call_offer", "to": puppet.alias, "call_id": call_id, "from": puppet.alias, "crypto_v": 1, "payload": PAYLOAD}),
        ),
    ];
    for (key, id, frame) in &forgeries {
        a_writer.text(frame).await;
        let kind = frame["type"].as_str().unwrap_or_default();
        let frames = read_for(&mut p_reader, STEP_MS).await;
        let Some(f) = frames
            .iter()
            .find(|f| is(f, kind) && f.get(*key).and_then(Value::as_str) == Some(id))
        else {
            continue;
        };
        judged += 1;
        let from = f.get("from").and_then(Value::as_str);
        if from != Some(attacker.alias.as_str()) {
            found.push(Violation::new(
                Oracle::Authz,
                format!(
                    "a {kind} of {} whose frame named another `from` reached the puppet as from {from:?}",
                    attacker.alias
                ),
            ));
        }
    }
    // Its own message retracted twice (the second is answered, not applied again), and a
    // call to the puppet once its socket is gone (refused: signals are never stored).
    let own = format!("member-own-{act_ms}");
    a_writer
        .text(&json!({"type": "msg", "id": own, "to": puppet.alias, "conv_id": conv, "crypto_v": 1, "payload": PAYLOAD}))
        .await;
    for _ in 0..2 {
        a_writer
            .text(&json!({"type": "retract", "id": own, "to": puppet.alias, "conv_id": conv, "crypto_v": 1}))
            .await;
    }
    drop(read_for(&mut p_reader, STEP_MS).await);
    drop((p_reader, p_writer));
    drop(read_for(&mut a_reader, STEP_MS).await);
    a_writer
        .text(&json!({"type": "call_offer", "to": puppet.alias, "call_id": format!("{call_id}-late"), "crypto_v": 1, "payload": PAYLOAD}))
        .await;
    drop(read_for(&mut a_reader, STEP_MS).await);
    (found, judged)
}

/// Makes the puppet and the stranger friends (the puppet asks, the stranger accepts);
/// the conversation id, or `None` when the relay did not get that far.
pub(super) async fn befriend(attacker: &RawAccount, puppet: &RawAccount) -> Option<String> {
    let http = http();
    // (friendship id, conversation id) of the puppet's friendship in `status`.
    let find = |friends: &Value, status: &str| -> Option<(String, Option<String>)> {
        friends.as_array()?.iter().find_map(|f| {
            let ours = field(f, "alias_id").as_deref() == Some(&puppet.alias)
                && field(f, "status").as_deref() == Some(status);
            let id = f.get("friendship_id").map(ToString::to_string);
            id.filter(|_| ours)
                .map(|id| (id, field(f, "conversation_id")))
        })
    };
    let (_, friends) = get(&http, paths::FRIENDS, &attacker.token).await?;
    if let Some((_, Some(conv))) = find(&friends, "accepted") {
        return Some(conv);
    }
    if find(&friends, "pending").is_none() {
        let body = json!({ "to_alias_id": attacker.alias });
        post(&http, paths::FRIEND_REQUEST, Some(&puppet.token), &body).await?;
    }
    let (_, friends) = get(&http, paths::FRIENDS, &attacker.token).await?;
    let (id, _) = find(&friends, "pending")?;
    let path = paths::FRIEND_ACCEPT.replace("{friendship_id}", &id);
    let (status, accepted) = put_empty(&http, &path, &attacker.token).await?;
    if !(200..300).contains(&status) {
        return None;
    }
    field(&accepted, "conversation_id")
}

/// A raw socket of `account`, `sync`ed or not.
pub(super) async fn socket(account: &RawAccount, sync: bool) -> Option<(RawReader, RawWriter)> {
    let (reader, mut writer) = open_ws(&ws_query(account)).await.ok()?.ok()?;
    if sync && !writer.text(&json!({"type": "sync", "crypto_v": 1})).await {
        return None;
    }
    Some((reader, writer))
}

/// The id of the puppet's message `n` of the act that started at `act_ms` (ids are never
/// reused: a reused id would be deduplicated to its first seq, which the relay did send).
fn message_id(puppet: &RawAccount, act_ms: u64, n: u32) -> String {
    format!("puppet-{}-{act_ms}-{n}", puppet.alias)
}

/// The puppet writes message `id` to the stranger; its seq once acked.
async fn send(
    reader: &mut RawReader,
    writer: &mut RawWriter,
    id: &str,
    to: &RawAccount,
    conv: &str,
) -> Option<u64> {
    let frame = json!({"type": "msg", "id": id, "to": to.alias, "conv_id": conv, "crypto_v": 1, "payload": PAYLOAD});
    if !writer.text(&frame).await {
        return None;
    }
    let until = sim_ms() + STEP_MS;
    while sim_ms() < until {
        let left = until.saturating_sub(sim_ms()).max(1);
        let Ok(Ok(Some(frame))) =
            tokio::time::timeout(Duration::from_millis(left), reader.next()).await
        else {
            return None;
        };
        if let Some(v) = frame.json()
            && is(&v, "ack")
            && v.get("id").and_then(Value::as_str) == Some(id)
        {
            return v.get("seq").and_then(Value::as_u64);
        }
    }
    None
}

/// Every JSON frame `reader` gets within `ms`.
pub(super) async fn read_for(reader: &mut RawReader, ms: u64) -> Vec<Value> {
    let mut frames = Vec::new();
    let until = sim_ms() + ms;
    while sim_ms() < until {
        let left = until.saturating_sub(sim_ms()).max(1);
        match tokio::time::timeout(Duration::from_millis(left), reader.next()).await {
            Ok(Ok(Some(frame))) => frames.extend(frame.json()),
            _ => break,
        }
    }
    frames
}

/// Whether `frame` is of type `kind`.
pub(super) fn is(frame: &Value, kind: &str) -> bool {
    frame.get("type").and_then(Value::as_str) == Some(kind)
}
