//! Setup of one client app, before traffic and without faults: friend requests (to friends,
//! and to strangers who reject them), push targets, accepts, and the conversation of every
//! pair. Every step is idempotent and retried until its effect is visible (a crash cannot
//! happen during setup, but a relay answer can be lost); the steps are gated so that every
//! client finishes one before any starts the next.

use std::collections::{BTreeMap, BTreeSet};

use super::RETRY_MS;
use crate::pushworld::{self, PushKind};
use crate::time::sleep_ms;
use crate::world::{HostCtx, note, wait_until};
use client::Client;
use seam::net::Turmoil;

/// Attempts of a push registration in setup.
const SETUP_ATTEMPTS: u32 = 10;

/// Friend requests, push targets, accepts, conversations; then the client is ready.
pub(super) async fn setup(ctx: &HostCtx, client: &Client<Turmoil>) {
    let me = ctx.me;
    let n = ctx.scenario.accounts.len();
    wait_until(ctx, |w| w.aliases.len() == n).await;
    let aliases = ctx.world.borrow().aliases.clone();
    send_requests(ctx, client, &aliases).await;
    if ctx.scenario.push_clients.contains(&me) {
        register_push(ctx, client).await;
    }
    ctx.world.borrow_mut().requested.insert(me);
    wait_until(ctx, |w| w.requested.len() == n).await;
    accept_requests(ctx, client, &aliases).await;
    ctx.world.borrow_mut().accepted.insert(me);
    wait_until(ctx, |w| w.accepted.len() == n).await;
    learn_conversations(ctx, client, &aliases).await;
    ctx.world.borrow_mut().ready.insert(me);
}

/// A friend request to the other member of every pair this client opens, and to every
/// stranger the scenario has reject this client.
async fn send_requests(ctx: &HostCtx, client: &Client<Turmoil>, aliases: &BTreeMap<usize, String>) {
    let me = ctx.me;
    for (_, pair) in ctx.scenario.pairs_of(me).filter(|(_, p)| p.a == me) {
        request_friend(client, &aliases[&pair.b]).await;
    }
    for r in ctx.scenario.rejections.iter().filter(|r| r.client == me) {
        wait_until(ctx, |w| w.strangers.contains_key(&r.stranger)).await;
        let to = ctx.world.borrow().strangers[&r.stranger].1.clone();
        request_friend(client, &to).await;
    }
}

/// A friend request to `to`, sent until it is answered `200`, or `409` (the friendship
/// exists: an earlier attempt took effect although its answer was lost, e.g. a 503 when the
/// shard that waited for it moved to another node).
async fn request_friend(client: &Client<Turmoil>, to: &str) {
    loop {
        match client.contacts().send_friend_request(to).await {
            Ok(_) | Err(client::ClientError::Status(409, _)) => return,
            Err(_) => sleep_ms(RETRY_MS).await,
        }
    }
}

/// Accepts every request of a pair this client is the second member of, until each one is
/// in its friends list and accepted. A request may show a while after its sender had it
/// answered: with shards on several nodes, the entry reaches the recipient's shard as a
/// notice, sent again until that shard takes it.
async fn accept_requests(
    ctx: &HostCtx,
    client: &Client<Turmoil>,
    aliases: &BTreeMap<usize, String>,
) {
    let me = ctx.me;
    let incoming: BTreeSet<String> = ctx
        .scenario
        .pairs_of(me)
        .filter(|(_, p)| p.b == me)
        .map(|(_, p)| aliases[&p.a].clone())
        .collect();
    loop {
        let Ok(friends) = client.contacts().sync_friends().await else {
            sleep_ms(RETRY_MS).await;
            continue;
        };
        let (mut accepted, mut pending) = (0, 0);
        for f in friends
            .iter()
            .filter(|f| incoming.contains(f.alias_id.as_str()))
        {
            if f.status == wire::http::FriendStatus::Accepted {
                accepted += 1;
            } else {
                pending += 1;
                drop(
                    client
                        .contacts()
                        .accept_friend_request(&f.friendship_id.0.to_string())
                        .await,
                );
            }
        }
        if accepted == incoming.len() {
            break;
        }
        // Nothing to accept yet: a request has not reached this client's list.
        if pending == 0 {
            sleep_ms(RETRY_MS).await;
        }
    }
}

/// Syncs the friends list until it names the conversation of every pair of this client,
/// recording each in the world.
async fn learn_conversations(
    ctx: &HostCtx,
    client: &Client<Turmoil>,
    aliases: &BTreeMap<usize, String>,
) {
    let me = ctx.me;
    loop {
        if let Ok(friends) = client.contacts().sync_friends().await {
            let mut all = true;
            for (index, pair) in ctx.scenario.pairs_of(me) {
                let peer = &aliases[&pair.peer(me)];
                let conv = friends
                    .iter()
                    .find(|f| f.alias_id.as_str() == peer)
                    .and_then(|f| f.conversation_id.as_ref());
                match conv {
                    Some(c) => {
                        ctx.world
                            .borrow_mut()
                            .convs
                            .insert(index, c.as_str().to_owned());
                    }
                    None => all = false,
                }
            }
            if all {
                break;
            }
        }
        sleep_ms(RETRY_MS).await;
    }
}

/// Registers this client's push targets ([`PushKind::of`]): two Web Push subscriptions (two
/// browsers, each subscribed with the key the relay serves), or an FCM or APNs token. A
/// target counts once the relay acknowledged it.
async fn register_push(ctx: &HostCtx, client: &Client<Turmoil>) {
    let me = ctx.me;
    let targets = match PushKind::of(me) {
        PushKind::Web => subscribe_browsers(ctx, client).await,
        kind => register_token(client, me, kind).await,
    };
    if !targets.is_empty() {
        let mut w = ctx.world.borrow_mut();
        w.push_registered.insert(me);
        w.push_targets.insert(me, targets);
    }
}

/// Two browsers subscribe at the Web Push stand-in and hand their subscriptions to the
/// relay; returns the subscription ids the relay took.
async fn subscribe_browsers(ctx: &HostCtx, client: &Client<Turmoil>) -> Vec<String> {
    // A browser passes the served key to `pushManager.subscribe`; the stand-in checks every
    // VAPID JWT against the key the relay was configured with.
    if client.push().vapid_key().await.is_err() {
        note(ctx, format!("c{} could not read the VAPID key", ctx.me));
    }
    let mut targets = Vec::new();
    for _ in 0..2 {
        let sub = ctx.push.subscribe();
        let request = wire::http::PushSubscribeRequest {
            endpoint: sub.endpoint.clone(),
            keys: wire::http::PushKeys {
                p256dh: sub.p256dh.clone(),
                auth: sub.auth.clone(),
            },
        };
        for _ in 0..SETUP_ATTEMPTS {
            if client.push().subscribe(&request).await.is_ok() {
                targets.push(sub.id);
                break;
            }
            sleep_ms(RETRY_MS).await;
        }
    }
    targets
}

/// Registers client `me`'s FCM or APNs token; returns it once the relay took it.
async fn register_token(client: &Client<Turmoil>, me: usize, kind: PushKind) -> Vec<String> {
    let request = if kind == PushKind::Fcm {
        wire::http::PushRegisterRequest {
            token: Some(pushworld::fcm_token(me)),
            device_token: None,
            platform: "android".to_owned(),
        }
    } else {
        wire::http::PushRegisterRequest {
            token: None,
            device_token: Some(pushworld::apns_token(me)),
            platform: "ios".to_owned(),
        }
    };
    let mut targets = Vec::new();
    for _ in 0..SETUP_ATTEMPTS {
        if client.push().register(&request).await.is_ok() {
            targets.extend(request.token.or(request.device_token));
            break;
        }
        sleep_ms(RETRY_MS).await;
    }
    targets
}
