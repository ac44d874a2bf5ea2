//! The client apps of a run: each account's app on its client host (our async `Client` over
//! turmoil), and the commerce auditor's app on the `pay` host.
//!
//! ```text
//! client_app (again from the top after its host restarts)
//!   start, register or restore, connect
//!   setup    (once, no faults): friend requests, rejections, push targets, accepts, convs
//!   then, side by side until the run ends:
//!     script       traffic (the scenario's actions at their times), then the probe round
//!     bind loop    market::bind_loop (binds confirmed vanity orders)
//!     answer calls every incoming call is answered (the call probes need a callee)
//!     keep session a primary device kicked out while no second device is on takes it back
//! ```
//!
//! Modules: [`setup`] (friendships, conversations, push targets), [`traffic`] (the scripted
//! actions), [`probes`] (the probe round after healing, media checks), [`session`] (second
//! devices, keeping and taking back the session, answering calls).

mod probes;
mod session;
mod setup;
mod traffic;

use std::rc::Rc;
use std::sync::Arc;

use client_core::store::ClientStore as _;

use crate::bounds::{
    AUDIT_BEFORE_END_MS, LIVENESS_BOUND_MS, PROBE_BEFORE_END_MS, STORM_WAVE, STORM_WAVE_MS,
    TRAFFIC_WINDOW_MS,
};
use crate::market;
use crate::seeds::{client_tag, derive_seed};
use crate::time::{sim_ms, sleep_ms};
use crate::trace::{Device, Record};
use crate::world::{HostCtx, note, relay_endpoint, wait_until};
use client::{Client, ClientOptions, EventKind, SharedStore};
use seam::net::Turmoil;

/// Pause between retries of a failed setup call.
const RETRY_MS: u64 = 500;

/// One client app; runs again from the top after its host restarts.
pub(crate) async fn client_app(ctx: Rc<HostCtx>) {
    let me = ctx.me;
    // Many apps starting at once come up in waves turmoil's accept queue takes.
    sleep_ms((me / STORM_WAVE) as u64 * STORM_WAVE_MS).await;
    let incarnation = {
        let mut w = ctx.world.borrow_mut();
        // A second device on this host went down with it.
        w.second_device_on.remove(&me);
        let n = w.incarnations.entry(me).or_insert(0);
        *n += 1;
        *n
    };
    let who = Device {
        client: me,
        device: 0,
    };
    let Ok(mut client) = start_client(&ctx, who, ctx.store.clone(), incarnation) else {
        note(&ctx, format!("{who} could not start"));
        return;
    };
    sign_in(&ctx, &mut client).await;
    drop(client.connect().await);
    if !ctx.world.borrow().ready.contains(&me) {
        setup::setup(&ctx, &client).await;
    }
    let audit_at = audit_times(&ctx).await.0;
    let script = async {
        traffic::traffic(&ctx, &client).await;
        probes::probe_round(&ctx, &client).await;
        std::future::pending::<()>().await;
    };
    tokio::join!(
        script,
        market::bind_loop(&ctx, &client, audit_at),
        session::answer_calls(&client),
        session::keep_session(&ctx, &client)
    );
}

/// Registers (fresh store) or restores the session, then records the account's uuid and
/// alias in the world (a restarted host may still hold the alias a bind retired: the world
/// keeps the newest one) and starts the call machinery with the alias.
async fn sign_in(ctx: &HostCtx, client: &mut Client<Turmoil>) {
    let me = ctx.me;
    let account = &ctx.scenario.accounts[me];
    let identity = ctx.store.load_identity().ok().flatten();
    authenticate(
        client,
        &account.mnemonic,
        &account.nickname,
        identity.is_none(),
    )
    .await;
    if let Ok(Some(id)) = ctx.store.load_identity() {
        let known = ctx.world.borrow_mut().uuids.insert(me, id.uuid.clone());
        if known.is_none() {
            note(ctx, format!("c{me}/d0 is account {}", id.uuid));
        }
    }
    if let Ok(Some(alias)) = client.alias_id().await {
        client.init_calls(&alias, false);
        let mut w = ctx.world.borrow_mut();
        if let std::collections::btree_map::Entry::Vacant(e) = w.aliases.entry(me) {
            e.insert(alias.clone());
            w.alias_history.insert(me, vec![alias]);
        }
    }
}

/// Starts device `who`'s client on `store`; every app event it emits goes to the trace.
fn start_client(
    ctx: &HostCtx,
    who: Device,
    store: SharedStore,
    incarnation: u64,
) -> Result<Client<Turmoil>, client::ClientError> {
    let tap = ctx.world.borrow().wire.tap(who.client);
    let options = ClientOptions::new(
        relay_endpoint(),
        Arc::new(ctx.clock.clone()),
        derive_seed(ctx.seed, client_tag(who.client, who.device), incarnation),
    )
    .with_tap(tap);
    let client = Client::<Turmoil>::start(store, options)?;
    let trace = ctx.trace.clone();
    client.on(EventKind::Any, move |event| {
        trace.push(Record::Event {
            t_ms: sim_ms(),
            who,
            event: event.clone(),
        });
    });
    Ok(client)
}

/// Registers (fresh store) or restores (restarted host), retrying until the relay answers.
async fn authenticate(client: &Client<Turmoil>, mnemonic: &str, nickname: &str, fresh: bool) {
    loop {
        let done = if fresh {
            client.register_account(mnemonic, nickname).await.is_ok()
        } else {
            client.restore_session().await.is_ok()
        };
        if done {
            return;
        }
        sleep_ms(RETRY_MS).await;
    }
}

/// `(audit, probes)` in simulated ms, once traffic started.
async fn audit_times(ctx: &HostCtx) -> (u64, u64) {
    wait_until(ctx, |w| w.traffic_start_ms.is_some()).await;
    let end =
        ctx.world.borrow().traffic_start_ms.unwrap_or(0) + TRAFFIC_WINDOW_MS + LIVENESS_BOUND_MS;
    (end - AUDIT_BEFORE_END_MS, end - PROBE_BEFORE_END_MS)
}

/// The commerce auditor: registers its own account, then audits at the end.
pub(crate) async fn auditor_host(ctx: Rc<HostCtx>, mnemonic: &str) {
    let who = Device {
        client: ctx.me,
        device: 0,
    };
    let Ok(client) = start_client(&ctx, who, ctx.store.clone(), 1) else {
        return;
    };
    authenticate(&client, mnemonic, "auditor", true).await;
    let (audit_at, probe_at) = audit_times(&ctx).await;
    market::audit(&ctx, &client, audit_at, probe_at).await;
    std::future::pending::<()>().await;
}
