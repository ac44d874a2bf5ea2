//! `unreadable`: requests that meet a failing store read, in the `heavy` class (no caches, so
//! every account and queue the relay consults is read from the store).
//!
//! **estimate.** A sender queues messages for a recipient that stays away; the drill arms one
//! failing read of the queued messages and the recipient asks `GET storage/estimate`: the
//! relay answers 503 `STORAGE_UNAVAILABLE`, or (when other traffic met the failing read
//! first) 200 with what is queued. Asked again, it answers 200 and counts exactly the
//! messages acknowledged to the sender (nothing lost to the failed read, nothing counted
//! twice).
//!
//! **calls.** Two contacts are online; the drill arms one failing read of the account index
//! and the caller sends `call_offer`: the callee hears it, or the caller gets an `error` frame
//! `STORAGE_UNAVAILABLE` naming it, never both and never neither. Sent again, the callee hears
//! it and the caller gets no error.
//!
//! Judged by the oracle `reads`; a step that a fault disturbed (a power-off, a clock jump, a
//! store fault of the plan, failing reads of the plan still pending, an unanswered request, a
//! rate limit) is not judged.

use serde_json::json;
use wire::http::paths;

use super::peer::{Answer, befriend, payload};
use super::{Calm, Drills, Outcome};
use crate::hostile::http::{field, get, http};
use crate::violation::Oracle;
use relay_core::store::Table;

/// The oracle.
const READS: Oracle = Oracle::Reads;
/// Messages the sender queues for the away recipient.
const QUEUED: u32 = 3;
/// How long the drill listens for a call signal or its refusal (simulated ms).
const LISTEN_MS: u64 = 3_000;

/// Requests that meet a failing store read (see the module doc).
pub(super) async fn unreadable(d: &mut Drills<'_>) -> Outcome {
    let mut out = Outcome::default();
    estimate(d, &mut out).await;
    calls(d, &mut out).await;
    out
}

/// `storage/estimate` across a failing read of the recipient's queue.
async fn estimate(d: &mut Drills<'_>, out: &mut Outcome) {
    let mut sender = d.account(80).await;
    let recipient = d.account(81).await;
    let Some(conv) = befriend(&sender.raw, &recipient.raw).await else {
        return out.skip();
    };
    let Ok(mut socket) = sender.socket(false).await else {
        return out.skip();
    };
    let calm = Calm::now(d.ctx);
    let mut acked = 0u64;
    for k in 0..QUEUED {
        let id = format!("unreadable-{}-{k}", sender.raw.alias);
        match socket
            .message(&id, &recipient.raw.alias, &conv, &payload(64))
            .await
        {
            Answer::Ack(_) => acked += 1,
            // Unanswered or refused: the count the relay must report is not known.
            Answer::Refused(_) | Answer::Silence => return out.skip(),
        }
    }
    let http = http();
    if !d.fail_reads(Table::Messages).await {
        return out.skip();
    }
    let first = get(&http, paths::STORAGE_ESTIMATE, &recipient.raw.token).await;
    let again = get(&http, paths::STORAGE_ESTIMATE, &recipient.raw.token).await;
    if !calm.held_but_reads(d.ctx, 0, 1) {
        return out.skip();
    }
    for (n, answer) in [first, again].into_iter().enumerate() {
        let Some((status, body)) = answer else {
            out.skip();
            continue;
        };
        let code = field(&body, "error").unwrap_or_default();
        let counted = body.get("message_count").and_then(|v| v.as_u64());
        match status {
            503 if n == 0 => out.expect(code == "STORAGE_UNAVAILABLE", READS, || {
                format!("storage/estimate over a failing read of the caller's queue answered 503 {code:?}, not STORAGE_UNAVAILABLE")
            }),
            200 => out.expect(counted == Some(acked), READS, || {
                format!(
                    "storage/estimate ({} ask, after a failing read of the caller's queue) counted {counted:?} messages; {acked} were acknowledged to their sender and none delivered",
                    if n == 0 { "first" } else { "second" }
                )
            }),
            429 => out.skip(),
            s => out.expect(false, READS, || {
                format!(
                    "storage/estimate ({} ask, after a failing read of the caller's queue) answered {s} {code:?}",
                    if n == 0 { "first" } else { "second" }
                )
            }),
        }
    }
}

/// A call signal across a failing read of the callee's account.
async fn calls(d: &mut Drills<'_>, out: &mut Outcome) {
    let mut caller = d.account(82).await;
    let mut callee = d.account(83).await;
    if befriend(&caller.raw, &callee.raw).await.is_none() {
        return out.skip();
    }
    let (Ok(mut from), Ok(mut to)) = (caller.socket(false).await, callee.socket(false).await)
    else {
        return out.skip();
    };
    let calm = Calm::now(d.ctx);
    for n in 0..2u32 {
        // The first signal meets the failing read (unless other traffic met it first).
        if n == 0 && !d.fail_reads(Table::AccountIndex).await {
            return out.skip();
        }
        let call_id = format!("unreadable-call-{}-{n}", caller.raw.alias);
        let (heard, refused) = (to.calls, from.errors.get("STORAGE_UNAVAILABLE").copied());
        let frame = json!({"type": "call_offer", "to": callee.raw.alias, "call_id": call_id, "crypto_v": 1, "payload": "AAAA"});
        if !from.send(&frame).await {
            return out.skip();
        }
        from.listen(LISTEN_MS).await;
        to.listen(LISTEN_MS).await;
        if from.ended || to.ended || !calm.held_but_reads(d.ctx, 0, 1) {
            return out.skip();
        }
        let heard = to.calls - heard;
        let refused = from.errors.get("STORAGE_UNAVAILABLE").copied() != refused;
        if from.errors.contains_key("RATE_LIMITED") {
            // Refused by the call-signal limit: not this drill's question.
            return out.skip();
        }
        let other: Vec<&String> = from
            .errors
            .keys()
            .filter(|code| code.as_str() != "STORAGE_UNAVAILABLE")
            .collect();
        if !other.is_empty() {
            out.expect(false, READS, || {
                format!("a call_offer between online contacts (over a failing read of the account index, then again) was refused {other:?}")
            });
            return;
        }
        let ok = if n == 0 {
            (heard == 1) != refused
        } else {
            heard == 1 && !refused
        };
        out.expect(ok, READS, || {
            format!(
                "a call_offer {} (contacts, both online): the callee heard it {heard} times, the caller {} STORAGE_UNAVAILABLE",
                if n == 0 {
                    "sent over a failing read of the account index"
                } else {
                    "sent again after a failing read"
                },
                if refused { "got" } else { "got no" }
            )
        });
    }
}
