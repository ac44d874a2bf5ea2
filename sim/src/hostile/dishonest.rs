//! Requests an honest client never makes; each must be refused.

use std::time::Duration;

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};
use wire::http::paths;

use super::Findings;
use super::http::{RawAccount, field, get, http, post, put_empty};
use super::ws::{RawReader, RawWriter, open_ws, ws_query};
use crate::time::sim_ms;
use crate::violation::{Oracle, Violation};
use crate::world::HostCtx;
use seam::net::{HttpClient, TurmoilConnector};

/// The world's identifiers a dishonest client targets ("leaked" to it).
#[derive(Debug, Default)]
struct Targets {
    /// `(conv, member alias)` of honest conversations.
    convs: Vec<(String, String)>,
    /// Honest message ids.
    messages: Vec<(String, String, String)>,
    /// Honest order ids.
    orders: Vec<String>,
    /// Honest channel ids.
    channels: Vec<String>,
    /// Honest account uuids.
    uuids: Vec<String>,
    /// Friendship ids to guess at.
    friendships: u64,
}

fn targets(ctx: &HostCtx) -> Targets {
    let w = ctx.world.borrow();
    let mut t = Targets::default();
    for (pair, conv) in &w.convs {
        let p = ctx.scenario.pairs[*pair];
        if let Some(alias) = w.aliases.get(&p.b) {
            t.convs.push((conv.clone(), alias.clone()));
        }
    }
    for (id, (conv, to)) in &w.sent_ids {
        t.messages.push((id.clone(), conv.clone(), to.clone()));
    }
    t.orders = w.ledger.orders.iter().map(|o| o.order_id.clone()).collect();
    t.channels = w.ledger.channels.iter().map(|c| c.id.clone()).collect();
    t.uuids = w.uuids.values().cloned().collect();
    t.friendships = ctx.scenario.pairs.len() as u64 + ctx.scenario.rejections.len() as u64 + 4;
    t
}

fn pick<'a, T>(rng: &mut ChaCha20Rng, items: &'a [T]) -> Option<&'a T> {
    (!items.is_empty()).then(|| &items[rng.next_u32() as usize % items.len()])
}

/// Requests an honest client never makes; each must be refused.
pub(super) async fn dishonest(
    ctx: &HostCtx,
    account: &RawAccount,
    count: u32,
    roll: u64,
) -> Findings {
    let mut rng = ChaCha20Rng::seed_from_u64(roll);
    let t = targets(ctx);
    // First, before this act opens a synced socket of its own: the stranger as a member of
    // a conversation with its puppet, and the puppet's single-use objects replayed.
    let (mut found, used) = own_objects(ctx, account).await;
    let http = http();
    let ws = open_ws(&ws_query(account)).await.ok().and_then(Result::ok);
    let (mut reader, mut writer) = match ws {
        Some((r, w)) => (Some(r), Some(w)),
        None => (None, None),
    };
    if let Some(w) = &mut writer {
        w.text(&json!({"type": "sync", "crypto_v": 1})).await;
    }
    let mut d = Dishonest {
        account,
        http,
        writer,
        evil_ids: Vec::new(),
        found: Findings::new(),
    };
    found.append(&mut d.found);
    for n in 0..count {
        match rng.next_u32() % 10 {
            0 | 1 => d.msg(pick(&mut rng, &t.convs), n).await,
            2 => {
                let target = pick(&mut rng, &t.convs);
                d.receipt(&mut rng, target).await;
            }
            3 => d.retract(pick(&mut rng, &t.messages)).await,
            4 => d.typing(pick(&mut rng, &t.convs)).await,
            5 => d.friendship(&mut rng, t.friendships).await,
            6 => d.bind_order(pick(&mut rng, &t.orders)).await,
            7 => {
                let channel = pick(&mut rng, &t.channels);
                d.channel(&mut rng, channel).await;
            }
            8 => d.upgrade_as(pick(&mut rng, &t.uuids)).await,
            _ => {
                let alias = pick(&mut rng, &ctx.scenario.alias_pool);
                d.bind_unpaid(alias).await;
            }
        }
    }
    let Dishonest {
        found: mut breaches,
        evil_ids,
        ..
    } = d;
    found.append(&mut breaches);
    // Half of the acts also try forged credentials on every route, the other half malformed
    // bodies (an rng of their own, so the attempts above are drawn as before).
    let mut extra = ChaCha20Rng::seed_from_u64(roll ^ CREDENTIALS_ROLL);
    if extra.next_u32().is_multiple_of(2) {
        let victim = pick(&mut extra, &t.uuids).map(String::as_str);
        let (breaches, routes) = super::credentials::credentials(account, victim).await;
        crate::world::note(ctx, format!("forged credentials on {routes} route(s)"));
        found.extend(breaches);
    } else {
        let (breaches, judged) = super::malformed::malformed(account).await;
        crate::world::note(ctx, format!("{judged} malformed request(s) judged"));
        found.extend(breaches);
    }
    if let (Some(r), false) = (&mut reader, evil_ids.is_empty()) {
        found.extend(acked_evil(r, &evil_ids).await);
    }
    // Last, as long after their use as the act lasts: the puppet's credentials, if the relay
    // powered off in between.
    if let Some(used) = used {
        let (breaches, judged) = super::restart::present_after_restart(ctx, used).await;
        crate::world::note(
            ctx,
            format!("{judged} credential(s) used before a relay restart presented after it"),
        );
        found.extend(breaches);
    }
    ctx.world.borrow_mut().evil_ids.extend(evil_ids);
    found
}

/// The stranger against its own puppet account (see [`super::member`]): as the other member
/// of their conversation, and by replaying the puppet's single-use objects
/// ([`super::replay`]). Notes how many attempts each family judged. First of all the puppet
/// uses a login and a ticket, returned to be presented again at the act's end
/// ([`super::restart`]).
async fn own_objects(
    ctx: &HostCtx,
    account: &RawAccount,
) -> (Findings, Option<super::restart::Used>) {
    let Some(stranger) = ctx.scenario.strangers.get(ctx.me) else {
        return (Findings::new(), None);
    };
    let Some((mut puppet, identity)) = super::member::puppet(&stranger.mnemonic).await else {
        crate::world::note(
            ctx,
            "puppet not registered: member and replay attempts skipped".into(),
        );
        return (Findings::new(), None);
    };
    let used = super::restart::use_credentials(ctx, &mut puppet, &identity).await;
    let conv = super::member::befriend(account, &puppet).await;
    let (mut found, members) = match &conv {
        Some(conv) => {
            ctx.world.borrow_mut().puppet_convs.insert(conv.clone());
            super::member::member(account, &puppet, conv).await
        }
        None => (Findings::new(), 0),
    };
    let foreign = match super::member::puppet(&super::member::puppet_mnemonic(&stranger.mnemonic))
        .await
    {
        Some((addressee, _)) => {
            let (unasked, frames) = match &conv {
                Some(conv) => super::foreign::frames_to_a_stranger(account, &addressee, conv).await,
                None => (Findings::new(), 0),
            };
            found.extend(unasked);
            let puppets = super::foreign::Puppets {
                owner: &puppet,
                addressee: &addressee,
            };
            let order = ctx
                .world
                .borrow()
                .ledger
                .orders
                .last()
                .map(|o| o.order_id.clone());
            let (breaches, judged) =
                super::foreign::foreign(account, &puppets, order.as_ref()).await;
            found.extend(breaches);
            let (phantom, missing) = super::foreign::nonexistent(account, &puppets).await;
            found.extend(phantom);
            judged + frames + missing
        }
        None => 0,
    };
    // Last: a replayed login revokes the token the puppet's other attempts use.
    let (replayed, replays) = super::replay::replay(&puppet, &identity, account).await;
    found.extend(replayed);
    crate::world::note(
        ctx,
        format!(
            "{members} member attempt(s), {foreign} on others' objects and {replays} replay(s) of single-use objects judged"
        ),
    );
    (found, Some(used))
}

/// A dishonest client at work: its account, its HTTP client and socket, what it found.
struct Dishonest<'a> {
    account: &'a RawAccount,
    http: HttpClient<TurmoilConnector>,
    writer: Option<RawWriter>,
    /// Ids of the messages it put into someone else's conversation.
    evil_ids: Vec<String>,
    found: Findings,
}

/// Salt of the rng that decides whether an act also forges credentials.
const CREDENTIALS_ROLL: u64 = 0x6372_6564_656e_7469;

/// base64 of "not yours"
const NOT_YOURS: &str = "bm90IHlvdXJz";

/// A violation: the relay accepted (`status`) a dishonest `what`.
fn bad(what: &str, status: u16) -> Violation {
    Violation::new(
        Oracle::Authz,
        format!("relay answered {status} to a dishonest {what}"),
    )
}

/// Whether an HTTP answer accepted the request.
fn accepted(answer: Option<&(u16, Value)>) -> Option<u16> {
    answer.map(|(s, _)| *s).filter(|s| (200..300).contains(s))
}

impl Dishonest<'_> {
    /// Request `n`: a message into someone else's conversation (its ack, committed row or
    /// delivery is a breach; see [`acked_evil`] and the `authz` oracle).
    async fn msg(&mut self, target: Option<&(String, String)>, n: u32) {
        let (Some(w), Some((conv, to))) = (&mut self.writer, target) else {
            return;
        };
        let id = format!("evil-{}-{n}", self.account.alias);
        self.evil_ids.push(id.clone());
        w.text(&json!({"type": "msg", "id": id, "to": to, "conv_id": conv, "crypto_v": 1, "payload": NOT_YOURS}))
            .await;
    }

    /// A `delivered` or `read` receipt in someone else's conversation.
    async fn receipt(&mut self, rng: &mut ChaCha20Rng, target: Option<&(String, String)>) {
        let (Some(w), Some((conv, to))) = (&mut self.writer, target) else {
            return;
        };
        let kind = if rng.next_u32().is_multiple_of(2) {
            "delivered"
        } else {
            "read"
        };
        w.text(&json!({"type": kind, "conv_id": conv, "seq": 1_000_000, "to": to, "crypto_v": 1}))
            .await;
    }

    /// A retract of someone else's message.
    async fn retract(&mut self, target: Option<&(String, String, String)>) {
        let (Some(w), Some((id, conv, to))) = (&mut self.writer, target) else {
            return;
        };
        w.text(&json!({"type": "retract", "id": id, "to": to, "conv_id": conv, "crypto_v": 1}))
            .await;
    }

    /// A typing notice in someone else's conversation.
    async fn typing(&mut self, target: Option<&(String, String)>) {
        let (Some(w), Some((conv, to))) = (&mut self.writer, target) else {
            return;
        };
        w.text(&json!({"type": "typing", "to": to, "conv_id": conv, "crypto_v": 1}))
            .await;
    }

    /// Accepts or rejects a guessed friendship id (a breach unless the friendship is its own).
    async fn friendship(&mut self, rng: &mut ChaCha20Rng, friendships: u64) {
        let id = 1 + rng.next_u64() % friendships.max(1);
        let (what, path) = if rng.next_u32().is_multiple_of(2) {
            ("accept", paths::FRIEND_ACCEPT)
        } else {
            ("reject", paths::FRIEND_REJECT)
        };
        let path = path.replace("{friendship_id}", &id.to_string());
        // F3 is a bodiless PUT (web, Android); F4 a POST with `{}` (web, iOS).
        let answer = if what == "accept" {
            put_empty(&self.http, &path, &self.account.token).await
        } else {
            post(&self.http, &path, Some(&self.account.token), &json!({})).await
        };
        if let Some(s) = accepted(answer.as_ref())
            && own_friendship(&self.http, self.account, id).await == Some(false)
        {
            self.found
                .push(bad(&format!("{what} of someone else's friendship {id}"), s));
        }
    }

    /// Binds someone else's order.
    async fn bind_order(&mut self, order: Option<&String>) {
        let Some(order) = order else { return };
        let body = json!({ "order_id": order });
        let answer = post(
            &self.http,
            paths::VANITY_BIND,
            Some(&self.account.token),
            &body,
        )
        .await;
        if let Some(s) = accepted(answer.as_ref()) {
            self.found
                .push(bad(&format!("bind of someone else's order {order}"), s));
        }
    }

    /// Lists someone else's channel for sale, or posts in it.
    async fn channel(&mut self, rng: &mut ChaCha20Rng, channel: Option<&String>) {
        let Some(channel) = channel else { return };
        let (what, path, body) = if rng.next_u32().is_multiple_of(2) {
            (
                "listing",
                paths::LIST_CHANNEL.to_owned(),
                json!({"channel_id": channel, "price_usdt": 1}),
            )
        } else {
            (
                "post",
                paths::CHANNEL_POSTS.replace("{channel_id}", channel),
                json!({"type": "text", "content": "mine now"}),
            )
        };
        let answer = post(&self.http, &path, Some(&self.account.token), &body).await;
        if let Some(s) = accepted(answer.as_ref()) {
            self.found.push(bad(
                &format!("{what} on someone else's channel {channel}"),
                s,
            ));
        }
    }

    /// Opens a WebSocket as another account with its own token.
    async fn upgrade_as(&mut self, uuid: Option<&String>) {
        let Some(uuid) = uuid else { return };
        let query = format!("user_uuid={uuid}&token={}", self.account.token);
        if let Ok(Ok(_)) = open_ws(&query).await {
            self.found.push(bad(
                &format!("WebSocket upgrade as {uuid} with its own token"),
                101,
            ));
        }
    }

    /// Out of order: buys an alias, then binds the unpaid order at once.
    async fn bind_unpaid(&mut self, alias: Option<&String>) {
        let Some(alias) = alias else { return };
        let token = Some(self.account.token.as_str());
        let body = json!({ "alias_id": alias });
        let Some((s, v)) = post(&self.http, paths::VANITY_PURCHASE, token, &body).await else {
            return;
        };
        let Some(order) = field(&v, "order_id").filter(|_| (200..300).contains(&s)) else {
            return;
        };
        let body = json!({ "order_id": order });
        let answer = post(&self.http, paths::VANITY_BIND, token, &body).await;
        if let Some(s) = accepted(answer.as_ref()) {
            self.found
                .push(bad(&format!("bind of its own unpaid order {order}"), s));
        }
    }
}

/// Reads the answers to the frames for a while: an `ack` of a message into someone else's
/// conversation is a breach (the oracles also look for it in the store and at the
/// recipients).
async fn acked_evil(reader: &mut RawReader, evil_ids: &[String]) -> Findings {
    let mut found = Findings::new();
    let until = sim_ms() + ACK_WAIT_MS;
    while sim_ms() < until {
        let Ok(Ok(Some(frame))) =
            tokio::time::timeout(Duration::from_millis(500), reader.next()).await
        else {
            break;
        };
        if let Some(v) = frame.json()
            && field(&v, "type").as_deref() == Some("ack")
            && let Some(id) = field(&v, "id")
            && evil_ids.contains(&id)
        {
            found.push(bad(
                &format!("msg {id} into someone else's conversation (ack)"),
                200,
            ));
        }
    }
    found
}

/// How long a dishonest client reads the answers to its frames.
const ACK_WAIT_MS: u64 = 3_000;

/// Whether friendship `id` involves this account (a stranger's own rejected request is its
/// own to reject again), as its friend list says; `None` when the list could not be read (the
/// relay down, a partition): then nothing is judged.
async fn own_friendship(
    http: &HttpClient<TurmoilConnector>,
    account: &RawAccount,
    id: u64,
) -> Option<bool> {
    let Some((200, Value::Array(friends))) = get(http, paths::FRIENDS, &account.token).await else {
        return None;
    };
    Some(
        friends
            .iter()
            .any(|f| f.get("friendship_id").and_then(Value::as_u64) == Some(id)),
    )
}
