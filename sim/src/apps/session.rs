//! The session of one account across devices: a second device that logs in for a while
//! (GOAWAY to the first) and leaves, the primary device keeping or taking back its session,
//! and the answering of incoming calls.

use client_core::machine::{CallEvent, Event};
use tokio::sync::broadcast::error::RecvError;

use super::{authenticate, start_client};
use crate::time::sleep_ms;
use crate::trace::{Device, Record};
use crate::world::{HostCtx, note};
use client::{Client, SharedStore};
use seam::net::Turmoil;

/// Answers every incoming call (the call probes need a callee).
pub(super) async fn answer_calls(client: &Client<Turmoil>) {
    let mut events = client.subscribe();
    loop {
        let event = match events.recv().await {
            Ok(e) => e,
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        };
        if let Event::Call(CallEvent::Incoming { call_id, from, .. }) = event
            && let Some(calls) = client.calls()
        {
            let mut fields = serde_json::Map::new();
            fields.insert("sdp".to_owned(), serde_json::Value::from("v=0 answer"));
            drop(calls.answer(&from, &call_id, fields).await);
        }
    }
}

/// Another device logs into the same account (GOAWAY to the first), stays, leaves; then the
/// first device takes the session back.
pub(super) async fn second_device(ctx: &HostCtx, client: &Client<Turmoil>, stay_ms: u64) {
    let me = ctx.me;
    let who = Device {
        client: me,
        device: 1,
    };
    let store = SharedStore::new();
    let incarnation = {
        let mut w = ctx.world.borrow_mut();
        w.second_stores.push((who, store.clone()));
        w.second_device_on.insert(me);
        w.second_stores.len() as u64
    };
    let Ok(second) = start_client(ctx, who, store, incarnation) else {
        ctx.world.borrow_mut().second_device_on.remove(&me);
        return;
    };
    let account = &ctx.scenario.accounts[me];
    let login = async {
        authenticate(&second, &account.mnemonic, &account.nickname, true).await;
        drop(second.connect().await);
        drop(second.contacts().sync_friends().await);
    };
    // The login may not finish (relay down, partition): give up when the stay ends.
    tokio::select! {
        biased;
        () = login => sleep_ms(stay_ms).await,
        () = sleep_ms(stay_ms) => {}
    }
    second.shutdown().await;
    note(ctx, format!("{who} left"));
    ctx.world.borrow_mut().second_device_on.remove(&me);
    take_session_back(ctx, client).await;
}

/// The primary device keeps its session: a GOAWAY or a terminal token refusal that comes while
/// no second device of the script is on (the login of a second device that already left, still
/// on its way to the relay when it left, say) is answered as the user of a primary device
/// would: [`take_session_back`].
pub(super) async fn keep_session(ctx: &HostCtx, client: &Client<Turmoil>) {
    let mut events = client.subscribe();
    loop {
        let event = match events.recv().await {
            Ok(e) => e,
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        };
        let kicked = matches!(event, Event::Goaway(_) | Event::AuthFailed(_));
        if kicked && !ctx.world.borrow().second_device_on.contains(&ctx.me) {
            note(
                ctx,
                format!("c{}/d0 lost its session with no second device on", ctx.me),
            );
            take_session_back(ctx, client).await;
        }
    }
}

/// The first device takes the session back after a second device left (the user opens the app
/// on it again). `connect` re-authenticates once when the relay refuses the old token; but if
/// the relay refused the fresh token too (the account logged in elsewhere between the first
/// device's re-authentication and its socket: the next second device, say), client-core has
/// stopped for good (terminal `AuthFailed`, "Refused token" in its machine doc) and `connect`
/// alone does nothing. The app then logs in again with the stored identity, as a real one
/// would when its user comes back to it.
async fn take_session_back(ctx: &HostCtx, client: &Client<Turmoil>) {
    let primary = Device {
        client: ctx.me,
        device: 0,
    };
    let last_auth = ctx.trace.last(|r| {
        matches!(r, Record::Event {
            who,
            event: Event::Authenticated { .. }
                | Event::AuthFailed(_),
            ..
        } if *who == primary)
    });
    let signed_out = matches!(
        last_auth,
        Some(Record::Event {
            event: Event::AuthFailed(_),
            ..
        })
    );
    if signed_out {
        note(
            ctx,
            format!("{primary} was signed out meanwhile: logs in again"),
        );
        let account = &ctx.scenario.accounts[ctx.me];
        authenticate(client, &account.mnemonic, &account.nickname, false).await;
    }
    drop(client.connect().await);
}
