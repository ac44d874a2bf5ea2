//! `push-off`: push turned off before a relay power cycle stays off after it (the `heavy`
//! class; PROTOCOL P4, "clears the push endpoint", committed before its 200).
//!
//! An account registers an FCM token of its own at the stand-in, then turns push off
//! (`POST push/disable`, 2xx). The relay is power-cycled. A friend then sends it messages
//! while it has never connected (an offline recipient, the case the relay pushes for): no push
//! may reach its token, before or after the restart. Judged by the oracle `push-off`; the
//! `push` oracle leaves the drill's tokens to it ([`crate::world::World::drill_push_targets`]).

use serde_json::json;
use wire::http::paths;

use super::heavy::DOWN_MS;
use super::peer::{Answer, befriend, payload};
use super::{Calm, Drills, Outcome};
use crate::hostile::http::{http, post};
use crate::time::sleep_ms;
use crate::violation::{Oracle, Violation};

/// The oracle.
const ORACLE: Oracle = Oracle::PushOff;
/// Messages the friend sends after the restart.
const MESSAGES: u32 = 3;
/// How long the drill waits for a push that must not come (the push worker's delays are
/// seconds; its per-target window is 30 s).
const WAIT_MS: u64 = 20_000;

/// Push turned off, then a power cycle, then messages for the account (see the module doc).
pub(super) async fn push_off(d: &mut Drills<'_>) -> Outcome {
    let mut out = Outcome::default();
    let quiet = d.account(95).await;
    let mut friend = d.account(96).await;
    let Some(conv) = befriend(&friend.raw, &quiet.raw).await else {
        out.skip();
        return out;
    };
    let token = format!("simfcm-drill-{}", quiet.raw.alias);
    d.ctx
        .world
        .borrow_mut()
        .drill_push_targets
        .insert(token.clone());
    let http = http();
    let register = json!({ "token": token, "platform": "android" });
    for (path, body) in [
        (paths::PUSH_REGISTER, &register),
        (paths::PUSH_DISABLE, &json!({})),
    ] {
        match post(&http, path, Some(&quiet.raw.token), body).await {
            Some((s, _)) if (200..300).contains(&s) => {}
            // Refused or unanswered: whether push is off is not known.
            _ => {
                out.skip();
                return out;
            }
        }
    }
    let calm = Calm::now(d.ctx);
    if !d.power_cycle(DOWN_MS).await || !calm.clock_held(d.ctx) {
        out.skip();
        return out;
    }
    let Ok(mut socket) = friend.socket(false).await else {
        out.skip();
        return out;
    };
    let mut acked = 0;
    for k in 0..MESSAGES {
        let id = format!("push-off-{}-{k}", friend.raw.alias);
        if let Answer::Ack(_) = socket
            .message(&id, &quiet.raw.alias, &conv, &payload(64))
            .await
        {
            acked += 1;
        }
    }
    if acked == 0 {
        out.skip();
        return out;
    }
    sleep_ms(WAIT_MS).await;
    let pushed = d
        .ctx
        .push
        .fcm
        .received()
        .into_iter()
        .filter(|r| r.token.as_deref() == Some(token.as_str()))
        .count();
    out.check((pushed > 0).then(|| {
        Violation::new(
            ORACLE,
            format!(
                "push was turned off (2xx) before a relay power cycle; after it, {acked} messages to the account (never connected) brought {pushed} pushes to its FCM token"
            ),
        )
    }));
    out
}
