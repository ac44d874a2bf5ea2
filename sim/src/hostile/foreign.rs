//! Every route that names an object, tried on an object that is not the caller's. The routes
//! and their methods come from the relay's own table (as for forged credentials); which kind
//! of object each route names is [`names`], whose unit test fails for a route of the table it
//! does not classify, so a new route is attacked (or declared to name nothing) before it
//! lands.
//!
//! The objects belong to the stranger's puppet (see [`super::member`]) and to a second
//! puppet, so no honest client's state is touched; orders are the honest buyers' (leaked):
//!
//! | object | made by | what must hold after each attempt by the stranger |
//! |---|---|---|
//! | friendship | the puppet asks the second puppet | the addressee still sees it `pending` |
//! | channel | the puppet creates one (not for sale) | its owner's view (name, description, sale state, posts) is unchanged; a trade of it is never ordered (SPEC: only a channel for sale is bought) |
//! | upload | the puppet starts one and sends part 1 | an outsider's part or completion is refused; once the puppet completes it, it downloads its own bytes |
//! | order | an honest buyer | binding it is answered 404 (SPEC: "order does not exist or is not the caller's") |
//! | alias, media object | the puppets | (public reads: nothing to hold but an answer) |
//!
//! Two attempts come from the wrong member instead of an outsider: the requester accepting
//! its own friend request (the addressee must still see it pending) and the owner buying its
//! own channel (SPEC: 400). Any attempt answered 500 is a `bad-input` finding.
//!
//! The same routes are also asked about objects that do not exist ([`nonexistent`]): no 2xx,
//! no 500.
//!
//! Frames go the same way: every frame type a client addresses to another account
//! ([`ROUTED`]) is sent by the stranger to the second puppet, who is not its contact, naming
//! the conversation the stranger has with the first one; nothing of it may reach the second
//! puppet (a synced socket of its own is watching).
//!
//! The oracle is the owner's view, read before and after each attempt: it needs no knowledge
//! of which answer the route should give, only that an outsider cannot change what belongs
//! to someone else. A fault that leaves a view unread leaves that attempt unjudged.

use http::Method;
use serde_json::{Value, json};
use wire::http::paths;

use super::Findings;
use super::credentials::served_routes;
use super::http::{RawAccount, exchange, field, get, http, post};
use crate::violation::{Oracle, Violation};
use seam::net::{HttpClient, HttpRequest, TurmoilConnector};

/// What kind of object a route names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Friendship,
    Channel,
    Upload,
    Order,
    Alias,
    MediaObject,
}

/// The object a route of the relay's table names (in its path, body or query), `Some(None)`
/// for a route that names none, `None` for a route not classified yet.
pub(super) fn names(template: &str) -> Option<Option<Kind>> {
    Some(Some(match template {
        "friends/{id}/accept" | "friends/accept" | "friends/{id}/reject" => Kind::Friendship,
        "channels/{id}"
        | "channels/{id}/subscribe"
        | "channels/{id}/posts"
        | "channels/{id}/forsale"
        | "channels/{id}/buy"
        | "vanity/list-channel" => Kind::Channel,
        "media/upload-parts/{id}/chunk" | "media/upload-parts/{id}/complete" => Kind::Upload,
        "media/download" => Kind::MediaObject,
        "vanity/bind" | "vanity/order/{id}/status" => Kind::Order,
        "users/{alias}" => Kind::Alias,
        // Routes that make something new or read the caller's own state: no object of
        // someone else's to name. `friends/request` names an alias, but asking anyone is
        // allowed; the webhook names orders behind a signature of its own (credentials).
        "pow/challenge"
        | "register"
        | "auth/challenge"
        | "auth/verify"
        | "ws/ticket"
        | "friends"
        | "friends/request"
        | "conversations/active"
        | "storage/estimate"
        | "media/upload-parts/init"
        | "push/vapid-key"
        | "push/subscribe"
        | "push/register"
        | "push/disable"
        | "calls/ice-config"
        | "channels/search"
        | "channels/mine"
        | "channels"
        | "channels/quota/buy"
        | "vanity/search"
        | "vanity/purchase"
        | "vanity/reserve"
        | "payments/webhook"
        | relay_core::http::UNKNOWN_ROUTE => return Some(None),
        _ => return None,
    }))
}

/// Every frame type a client addresses to another account (`to`).
pub(super) const ROUTED: [&str; 11] = [
    "msg",
    "delivered",
    "read",
    "typing",
    "retract",
    "call_offer",
    "call_answer",
    "call_ice",
    "call_reject",
    "call_hangup",
    "call_invite",
];

/// base64 of "not yours"
const NOT_YOURS: &str = "bm90IHlvdXJz";

/// The bytes of the puppet's upload, and the stranger's.
const PUPPET_PART: &[u8] = b"the puppet's part";
const STRANGER_PART: &[u8] = b"the stranger's part";

/// The objects attempted on, as far as the relay let the puppets make them.
#[derive(Debug, Default)]
struct Objects {
    /// The puppet's request to the second puppet.
    friendship: Option<String>,
    /// The puppet's channel.
    channel: Option<String>,
    /// The puppet's unfinished upload: `(upload id, media key, etag of part 1)`.
    upload: Option<(String, String, String)>,
    /// An honest buyer's order.
    order: Option<String>,
    /// The puppet's alias.
    alias: String,
}

impl Objects {
    /// Well-formed ids that name nothing.
    fn missing() -> Self {
        Self {
            friendship: Some("987654321".into()),
            channel: Some("no-such-channel".into()),
            upload: Some((
                "no-such-upload".into(),
                "media/no-such-object".into(),
                "e".into(),
            )),
            order: Some("no-such-order".into()),
            alias: "nobody_here".into(),
        }
    }
}

/// The stranger's puppets: the owner of the objects and the addressee of its request.
pub(super) struct Puppets<'a> {
    pub(super) owner: &'a RawAccount,
    pub(super) addressee: &'a RawAccount,
}

/// Tries every route that names an object on the puppets' objects (see the module doc);
/// returns the breaches and how many attempts were judged.
pub(super) async fn foreign(
    stranger: &RawAccount,
    puppets: &Puppets<'_>,
    leaked_order: Option<&String>,
) -> (Findings, usize) {
    let client = http();
    let objects = Objects {
        friendship: request_friendship(&client, puppets).await,
        channel: own_channel(&client, puppets.owner).await,
        upload: start_upload(&client, puppets.owner).await,
        order: leaked_order.cloned(),
        alias: puppets.owner.alias.clone(),
    };
    let mut t = Trial {
        client,
        puppets,
        objects,
        found: Findings::new(),
        judged: 0,
    };
    for (method, _, template) in served_routes() {
        if let Some(Some(kind)) = names(template) {
            t.attempt(stranger, &method, template, kind).await;
        }
    }
    // The wrong member: the requester accepts its own request; the owner buys its channel.
    t.attempt(
        puppets.owner,
        &Method::PUT,
        "friends/{id}/accept",
        Kind::Friendship,
    )
    .await;
    t.own_channel_bought().await;
    t.upload_kept().await;
    (t.found, t.judged)
}

/// The stranger sends every [`ROUTED`] frame type to `to`, who is not its contact, naming
/// `conv` (a conversation of the stranger's that `to` is not in); returns the breaches and
/// how many frames were judged (none when `to`'s socket did not open).
pub(super) async fn frames_to_a_stranger(
    stranger: &RawAccount,
    to: &RawAccount,
    conv: &str,
) -> (Findings, usize) {
    use super::member::{STEP_MS, is, read_for, socket};
    let Some((mut watch, _keep)) = socket(to, true).await else {
        return (Findings::new(), 0);
    };
    let Some((_, mut w)) = socket(stranger, true).await else {
        return (Findings::new(), 0);
    };
    let mut sent = 0;
    for (n, kind) in ROUTED.iter().enumerate() {
        let id = format!("unasked-{}-{n}", stranger.alias);
        let frame = json!({
            "type": kind, "to": to.alias, "conv_id": conv, "id": id, "call_id": id,
            "seq": 1, "crypto_v": 1, "payload": NOT_YOURS,
        });
        sent += usize::from(w.text(&frame).await);
    }
    let mut found = Findings::new();
    for f in read_for(&mut watch, STEP_MS).await {
        if let Some(kind) = ROUTED.iter().find(|k| is(&f, k)) {
            found.push(Violation::new(
                Oracle::Authz,
                format!(
                    "a {kind} from {} reached {}, who is not its contact (conversation {conv})",
                    stranger.alias, to.alias
                ),
            ));
        }
    }
    (found, sent)
}

/// Every route that names an object, naming one that does not exist: never a 2xx (SPEC
/// answers 404 where it says: a missing channel, order or alias) and never a 500; then
/// accounts that do not exist named in a body ([`missing_accounts`]). Returns the breaches and
/// how many answers were judged.
pub(super) async fn nonexistent(stranger: &RawAccount, puppets: &Puppets<'_>) -> (Findings, usize) {
    let t = Trial {
        client: http(),
        puppets,
        objects: Objects::missing(),
        found: Findings::new(),
        judged: 0,
    };
    let (mut found, mut judged) = (Findings::new(), 0);
    for (method, _, template) in served_routes() {
        let Some(Some(kind)) = names(template) else {
            continue;
        };
        let Some(req) = t.request(&method, template, kind) else {
            continue;
        };
        let Some((status, _)) = exchange(&t.client, req.bearer(&stranger.token)).await else {
            continue;
        };
        if status == 429 || status == 503 {
            continue;
        }
        judged += 1;
        if (200..300).contains(&status) || status >= 500 {
            found.push(Violation::new(
                Oracle::BadInput,
                format!("relay answered {status} to {method} {template} naming a {kind:?} that does not exist"),
            ));
        }
    }
    let (missing, n) = missing_accounts(&t.client, stranger, &t.objects.alias).await;
    found.extend(missing);
    (found, judged + n)
}

/// Accounts that do not exist, named in a body: a friend request to an alias nobody has
/// (refused: there is nobody to befriend), and a login of a uuid nobody has (a relay may hand
/// out a challenge for it, but no signature may log in). Neither may answer 500.
async fn missing_accounts(
    client: &HttpClient<TurmoilConnector>,
    stranger: &RawAccount,
    alias: &str,
) -> (Findings, usize) {
    let (mut found, mut judged) = (Findings::new(), 0);
    let body = json!({ "to_alias_id": alias });
    if let Some((status, _)) = post(client, paths::FRIEND_REQUEST, Some(&stranger.token), &body)
        .await
        .filter(|(s, _)| *s != 429 && *s != 503)
    {
        judged += 1;
        if (200..300).contains(&status) || status >= 500 {
            found.push(Violation::new(
                Oracle::BadInput,
                format!("relay answered {status} to a friend request to the alias {alias:?}, which nobody has"),
            ));
        }
    }
    let nobody = "00000000-0000-4000-8000-000000000000";
    let Some((status, v)) = post(
        client,
        paths::AUTH_CHALLENGE,
        None,
        &json!({ "user_uuid": nobody }),
    )
    .await
    .filter(|(s, _)| *s != 429 && *s != 503) else {
        return (found, judged);
    };
    judged += 1;
    if status >= 500 {
        found.push(Violation::new(
            Oracle::BadInput,
            format!("relay answered {status} to an auth challenge for a uuid nobody has"),
        ));
    }
    // Any key will do: the account does not exist, so none is its key.
    if let Some(challenge) = field(&v, "challenge").filter(|_| (200..300).contains(&status))
        && let Some(identity) = super::replay::stray_identity()
    {
        let signature = identity.sign_challenge(&challenge);
        let body = json!({ "user_uuid": nobody, "challenge": challenge, "signature": signature });
        if let Some((status, v)) = post(client, paths::AUTH_VERIFY, None, &body).await {
            judged += 1;
            if status == 200 && field(&v, "token").is_some() || status >= 500 {
                found.push(Violation::new(
                    Oracle::Authz,
                    format!("relay answered {status} to a login of a uuid nobody has"),
                ));
            }
        }
    }
    (found, judged)
}

/// Whether an answer's body is a refusal of the caller's token as expired.
fn token_expired(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| field(&v, "error"))
        .as_deref()
        == Some("TOKEN_EXPIRED")
}

/// One round of attempts: the objects, what was found, how many attempts were judged.
struct Trial<'a> {
    client: HttpClient<TurmoilConnector>,
    puppets: &'a Puppets<'a>,
    objects: Objects,
    found: Findings,
    judged: usize,
}

impl Trial<'_> {
    /// `method template` by `caller` on the object of `kind`, judged on the owner's view.
    async fn attempt(&mut self, caller: &RawAccount, method: &Method, template: &str, kind: Kind) {
        let Some(req) = self.request(method, template, kind) else {
            return;
        };
        let before = self.view(kind).await;
        let Some((status, body)) = exchange(&self.client, req.bearer(&caller.token)).await else {
            return;
        };
        let what = format!("{method} {template} by {} on the {kind:?}", caller.alias);
        if status == 500 {
            self.found.push(Violation::new(
                Oracle::BadInput,
                format!("relay answered 500 to {what}"),
            ));
        }
        let after = self.view(kind).await;
        match (kind, template) {
            // A token that expired meanwhile (the `days` class's clock moves by days) is refused
            // before the order is looked at: nothing to judge.
            (Kind::Order, "vanity/bind")
                if status != 429 && status != 503 && !token_expired(&body) =>
            {
                self.judged += 1;
                if status != 404 {
                    self.found.push(Violation::new(
                        Oracle::Authz,
                        format!(
                            "relay answered {status} to a bind of someone else's order (SPEC: 404)"
                        ),
                    ));
                }
            }
            // No read shows an unfinished upload's parts: the answer itself says whether
            // the relay took an outsider's part (or completion) for someone else's upload.
            (Kind::Upload, _) if (200..300).contains(&status) => {
                self.found.push(Violation::new(
                    Oracle::Authz,
                    format!(
                        "relay answered {status} to {what}, an upload that is not the caller's"
                    ),
                ));
            }
            (Kind::Channel, "channels/{id}/buy") if (200..300).contains(&status) => {
                self.found.push(Violation::new(
                    Oracle::Authz,
                    format!(
                        "relay answered {status} to a buy of a channel not for sale ({}), ordering its trade",
                        String::from_utf8_lossy(&body)
                    ),
                ));
            }
            _ => {}
        }
        if let (Some(before), Some(after)) = (before, after) {
            self.judged += 1;
            if before != after {
                self.found.push(Violation::new(
                    Oracle::Authz,
                    format!(
                        "{what} (answered {status}) changed what its owner sees: {before} became {after}"
                    ),
                ));
            }
        }
    }

    /// The request `method template` naming this round's object of `kind`, without its bearer.
    fn request(&self, method: &Method, template: &str, kind: Kind) -> Option<HttpRequest> {
        let o = &self.objects;
        let id: String = match kind {
            Kind::Friendship => o.friendship.clone()?,
            Kind::Channel => o.channel.clone()?,
            Kind::Upload => o.upload.as_ref()?.0.clone(),
            Kind::MediaObject => o.upload.as_ref()?.1.clone(),
            Kind::Order => o.order.clone()?,
            Kind::Alias => o.alias.clone(),
        };
        let mut path = format!("/api/v1/{}", template.replace("{id}", &id));
        path = path.replace("{alias}", &id);
        let body = match template {
            "friends/accept" => Some(json!({ "friendship_id": id.parse::<u64>().ok()? })),
            "channels/{id}/posts" => Some(json!({"type": "text", "content": NOT_YOURS})),
            "channels/{id}/forsale" => Some(json!({ "price_usdt": 1 })),
            "vanity/list-channel" => Some(json!({"channel_id": id, "price_usdt": 1})),
            "vanity/bind" => Some(json!({ "order_id": id })),
            "media/upload-parts/{id}/complete" => {
                let key = &o.upload.as_ref()?.1;
                Some(json!({"media_key": key, "parts": [{"etag": "forged", "part_number": 1}]}))
            }
            _ => None,
        };
        let req = match template {
            "media/upload-parts/{id}/chunk" => {
                let key = &o.upload.as_ref()?.1;
                path.push_str(&format!("?mediaKey={key}&partNumber=1"));
                HttpRequest::new(method.clone(), path)
                    .header(http::header::CONTENT_TYPE, "application/octet-stream")
                    .body(STRANGER_PART)
            }
            "media/download" => HttpRequest::new(method.clone(), format!("{path}?key={id}")),
            _ => {
                let req = HttpRequest::new(method.clone(), path);
                match (body, method) {
                    (Some(b), _) => req.json(&b).ok()?,
                    (None, &Method::POST | &Method::PUT) => req.json(&json!({})).ok()?,
                    (None, _) => req,
                }
            }
        };
        Some(req)
    }

    /// What the owner of this round's object of `kind` sees of it, `None` when unread (or
    /// for a kind with nothing to hold).
    async fn view(&self, kind: Kind) -> Option<Value> {
        let o = &self.objects;
        match kind {
            Kind::Friendship => {
                let id = o.friendship.as_ref()?;
                let (s, friends) =
                    get(&self.client, paths::FRIENDS, &self.puppets.addressee.token).await?;
                let entry =
                    friends.as_array().filter(|_| s == 200)?.iter().find(|f| {
                        f.get("friendship_id").map(ToString::to_string).as_ref() == Some(id)
                    });
                Some(entry.map_or(Value::Null, |f| f["status"].clone()))
            }
            Kind::Channel => {
                let id = o.channel.as_ref()?;
                let token = &self.puppets.owner.token;
                let (s, info) = get(
                    &self.client,
                    &paths::CHANNEL.replace("{channel_id}", id),
                    token,
                )
                .await?;
                let posts = paths::CHANNEL_POSTS.replace("{channel_id}", id);
                let (p, posts) = get(&self.client, &posts, token).await?;
                let keep = ["name", "description", "role", "for_sale", "sale_price"];
                let info: Value = keep.iter().map(|k| (*k, info[*k].clone())).collect();
                (s == 200 && p == 200).then(|| json!({"channel": info, "posts": posts}))
            }
            Kind::Upload | Kind::Order | Kind::Alias | Kind::MediaObject => None,
        }
    }

    /// SPEC: the owner buying its own channel is answered 400.
    async fn own_channel_bought(&mut self) {
        let Some(id) = &self.objects.channel else {
            return;
        };
        let path = paths::CHANNEL_BUY.replace("{channel_id}", id);
        let token = Some(self.puppets.owner.token.as_str());
        let Some((status, body)) = post(&self.client, &path, token, &json!({})).await else {
            return;
        };
        // A token a long clock jump expired (a `heavy` drill moves the relay's clock a day)
        // says nothing about the purchase.
        let expired = status == 401 && field(&body, "error").as_deref() == Some("TOKEN_EXPIRED");
        if status == 429 || status == 503 || expired {
            return;
        }
        self.judged += 1;
        if status != 400 {
            self.found.push(Violation::new(
                Oracle::Authz,
                format!("relay answered {status} to an owner buying its own channel (SPEC: 400)"),
            ));
        }
    }

    /// The puppet completes its upload after the stranger's attempts and downloads its own
    /// bytes.
    async fn upload_kept(&mut self) {
        let Some((upload, key, etag)) = self.objects.upload.clone() else {
            return;
        };
        let token = Some(self.puppets.owner.token.as_str());
        let path = paths::MEDIA_COMPLETE.replace("{upload_id}", &upload);
        let body = json!({"media_key": key, "parts": [{"etag": etag, "part_number": 1}]});
        match post(&self.client, &path, token, &body).await {
            Some((s, _)) if (200..300).contains(&s) => {}
            _ => return,
        }
        let req = HttpRequest::get(format!("{}?key={key}", paths::MEDIA_DOWNLOAD))
            .bearer(&self.puppets.owner.token);
        let Some((200, bytes)) = exchange(&self.client, req).await else {
            return;
        };
        self.judged += 1;
        if bytes != PUPPET_PART {
            self.found.push(Violation::new(
                Oracle::Authz,
                format!(
                    "the puppet's upload {upload}, tried by a stranger, downloads as {} bytes that are not the {} it sent",
                    bytes.len(),
                    PUPPET_PART.len()
                ),
            ));
        }
    }
}

/// The owner's pending request to the addressee (made now if there is none); its id.
async fn request_friendship(
    client: &HttpClient<TurmoilConnector>,
    p: &Puppets<'_>,
) -> Option<String> {
    let find = |friends: &Value| {
        friends.as_array()?.iter().find_map(|f| {
            let ours = field(f, "alias_id").as_deref() == Some(&p.owner.alias)
                && field(f, "status").as_deref() == Some("pending");
            ours.then(|| f.get("friendship_id").map(ToString::to_string))
                .flatten()
        })
    };
    let (_, friends) = get(client, paths::FRIENDS, &p.addressee.token).await?;
    if let Some(id) = find(&friends) {
        return Some(id);
    }
    let body = json!({ "to_alias_id": p.addressee.alias });
    post(client, paths::FRIEND_REQUEST, Some(&p.owner.token), &body).await?;
    let (_, friends) = get(client, paths::FRIENDS, &p.addressee.token).await?;
    find(&friends)
}

/// The owner's channel (created now if it has none); its id.
async fn own_channel(client: &HttpClient<TurmoilConnector>, owner: &RawAccount) -> Option<String> {
    let (_, mine) = get(client, paths::CHANNELS_MINE, &owner.token).await?;
    if let Some(id) = mine
        .as_array()
        .and_then(|m| m.first())
        .and_then(|c| field(c, "id"))
    {
        return Some(id);
    }
    let body = json!({"name": format!("puppet {}", owner.alias), "description": "mine"});
    let (s, made) = post(client, paths::CHANNELS, Some(&owner.token), &body).await?;
    field(&made, "channel_id").filter(|_| (200..300).contains(&s))
}

/// A new upload of the owner's with part 1 sent: `(upload id, media key, etag)`.
async fn start_upload(
    client: &HttpClient<TurmoilConnector>,
    owner: &RawAccount,
) -> Option<(String, String, String)> {
    let body = json!({ "content_type": "application/octet-stream" });
    let (s, init) = post(client, paths::MEDIA_INIT, Some(&owner.token), &body).await?;
    if !(200..300).contains(&s) {
        return None;
    }
    let (upload, key) = (field(&init, "upload_id")?, field(&init, "media_key")?);
    let path = format!(
        "{}?mediaKey={key}&partNumber=1",
        paths::MEDIA_CHUNK.replace("{upload_id}", &upload)
    );
    let req = HttpRequest::post(path)
        .header(http::header::CONTENT_TYPE, "application/octet-stream")
        .body(PUPPET_PART)
        .bearer(&owner.token);
    let (s, answer) = exchange(client, req).await?;
    let answer: Value = serde_json::from_slice(&answer).ok()?;
    let etag = field(&answer, "etag")?.replace('"', "");
    (200..300).contains(&s).then_some((upload, key, etag))
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::http::ROUTE_NAMES;

    #[test]
    fn every_route_of_the_table_says_what_it_names() {
        let unclassified: Vec<&&str> = ROUTE_NAMES.iter().filter(|r| names(r).is_none()).collect();
        assert!(
            unclassified.is_empty(),
            "routes whose object is not classified: {unclassified:?}"
        );
    }

    #[test]
    fn every_routed_frame_type_is_a_frame_the_relay_decodes() {
        for kind in ROUTED {
            let text = json!({"type": kind, "to": "u00000002", "conv_id": "c", "id": "i",
                "call_id": "i", "seq": 1, "crypto_v": 1, "payload": NOT_YOURS})
            .to_string();
            let frame = wire::frames::ClientFrame::decode(&text);
            assert!(
                matches!(&frame, Ok(f) if !matches!(f, wire::frames::ClientFrame::Unknown(_))),
                "{kind}: {frame:?}"
            );
        }
        let calls: Vec<&str> = wire::frames::CallKind::ALL
            .iter()
            .map(|k| k.as_str())
            .collect();
        assert!(calls.iter().all(|c| ROUTED.contains(c)), "{calls:?}");
    }

    #[test]
    fn every_object_route_builds_a_request_naming_the_object() {
        let owner = RawAccount {
            uuid: "u".into(),
            alias: "u00000002".into(),
            token: "t".into(),
        };
        let puppets = Puppets {
            owner: &owner,
            addressee: &owner,
        };
        let t = Trial {
            client: http(),
            puppets: &puppets,
            objects: Objects {
                friendship: Some("17".into()),
                channel: Some("ch1".into()),
                upload: Some(("up1".into(), "media/k1".into(), "e".into())),
                order: Some("ord1".into()),
                alias: owner.alias.clone(),
            },
            found: Findings::new(),
            judged: 0,
        };
        let mut built = 0;
        for (method, _, template) in served_routes() {
            let Some(Some(kind)) = names(template) else {
                continue;
            };
            let req = t.request(&method, template, kind).expect("a request");
            let path = req.path_and_query().to_owned();
            let named = ["17", "ch1", "up1", "media/k1", "ord1", "u00000002"]
                .iter()
                .any(|id| path.contains(id));
            let in_body = matches!(
                template,
                "friends/accept" | "vanity/list-channel" | "vanity/bind"
            );
            assert!(
                named || in_body,
                "{method} {template}: {path} names no object"
            );
            assert!(!path.contains('{'), "{path}");
            built += 1;
        }
        assert!(built >= 15, "only {built} object routes");
    }
}
