//! The spec's client modules as borrowed views of a [`Client`].
//!
//! `transport`, `messaging`, `auth` and `contacts.sync_friends` drive the machine; the rest are
//! thin REST wrappers (see the parent module doc) that decode `wire` bodies.

use bytes::Bytes;
use client_core::crypto::SessionKey;
use client_core::crypto::content::Media as MediaRef;
use client_core::store::ClientStore;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use wire::frames::CallKind;
use wire::http::{self as body, paths};

use super::{CallSetup, Client, ClientError, ClientEvent, EventKind, NetworkState, Subscription};
use seam::net::{HttpResponse, Network};

const JSON: &str = "application/json";
const OCTETS: &str = "application/octet-stream";

/// `template` with `{name}` replaced by `value`, percent-encoded as the web client's
/// `encodeURIComponent` does (path segments and query values).
fn fill(template: &str, name: &str, value: &str) -> String {
    template.replace(&format!("{{{name}}}"), &encode_component(value))
}

/// `encodeURIComponent`: every byte but `A-Z a-z 0-9 - _ . ! ~ * ' ( )` as `%XX`.
pub(crate) fn encode_component(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// How much of a body an error quotes.
const QUOTED_BODY_BYTES: usize = 300;

/// The body as text for an error message (shortened).
fn quoted(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    match text.char_indices().nth(QUOTED_BODY_BYTES) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}

fn check(response: HttpResponse) -> Result<HttpResponse, ClientError> {
    if response.status.is_success() {
        Ok(response)
    } else {
        Err(ClientError::Status(
            response.status.as_u16(),
            quoted(&response.body),
        ))
    }
}

/// The body as JSON (`{}` when empty).
fn json_value(response: &HttpResponse) -> Result<Value, ClientError> {
    if response.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(Map::new()));
    }
    serde_json::from_slice(&response.body)
        .map_err(|e| ClientError::BadResponse(format!("{e}; the body: {}", quoted(&response.body))))
}

fn decode<T: DeserializeOwned>(response: &HttpResponse) -> Result<T, ClientError> {
    decode_value(json_value(response)?)
}

fn decode_value<T: DeserializeOwned>(value: Value) -> Result<T, ClientError> {
    let shown = quoted(value.to_string().as_bytes());
    serde_json::from_value(value)
        .map_err(|e| ClientError::BadResponse(format!("{e}; the body: {shown}")))
}

/// Copies `from` into `to` when the relay left out `to` (a field only some reference clients
/// read, e.g. Android's `amount_usdt`, filled from the documented `price_usdt`).
fn default_from(value: &mut Value, to: &str, from: &str) {
    if let Some(o) = value.as_object_mut()
        && !o.contains_key(to)
        && let Some(v) = o.get(from).cloned()
    {
        o.insert(to.to_owned(), v);
    }
}

fn json_body<T: Serialize>(value: &T) -> Result<Option<(&'static str, Bytes)>, ClientError> {
    serde_json::to_vec(value)
        .map(|v| Some((JSON, Bytes::from(v))))
        .map_err(|e| ClientError::BadResponse(e.to_string()))
}

impl<N: Network, S: ClientStore + Send + 'static> Client<N, S> {
    async fn get_json<T: DeserializeOwned>(
        &self,
        path: String,
        bearer: bool,
    ) -> Result<T, ClientError> {
        let r = check(self.rest(http::Method::GET, path, bearer, None).await?)?;
        decode(&r)
    }

    async fn post_json<B: Serialize, T: DeserializeOwned>(
        &self,
        path: String,
        bearer: bool,
        request: &B,
    ) -> Result<T, ClientError> {
        let r = check(
            self.rest(http::Method::POST, path, bearer, json_body(request)?)
                .await?,
        )?;
        decode(&r)
    }

    async fn session_key(&self, conversation_id: &str) -> Result<SessionKey, ClientError> {
        let conv = conversation_id.to_owned();
        let session = self
            .with_machine(move |m, _| m.store().load_session(&conv))
            .await?
            .map_err(|e| ClientError::Machine(e.to_string()))?
            .ok_or_else(|| ClientError::Machine(format!("no session for {conversation_id}")))?;
        SessionKey::from_base64(session.session_key_base64.expose())
            .map_err(|e| ClientError::Machine(e.to_string()))
    }
}

/// The transport: connection state and its callbacks.
#[derive(Debug)]
pub struct Transport<'a, N, S: ClientStore> {
    pub(super) client: &'a Client<N, S>,
}

impl<N: Network, S: ClientStore + Send + 'static> Transport<'_, N, S> {
    /// Whether the socket is open.
    pub async fn is_connected(&self) -> Result<bool, ClientError> {
        self.client.is_connected().await
    }
    /// `onNetworkStateChange`.
    pub fn on_network_state_change(
        &self,
        f: impl Fn(NetworkState) + Send + Sync + 'static,
    ) -> Subscription {
        self.client.on(EventKind::NetworkState, move |e| {
            if let ClientEvent::NetworkState(s) = e {
                f(*s);
            }
        })
    }
    /// `onGoaway`.
    pub fn on_goaway(&self, f: impl Fn(&str) + Send + Sync + 'static) -> Subscription {
        self.client.on(EventKind::Goaway, move |e| {
            if let ClientEvent::Goaway(reason) = e {
                f(reason);
            }
        })
    }
}

/// Frames of a conversation.
#[derive(Debug)]
pub struct Messaging<'a, N, S: ClientStore> {
    pub(super) client: &'a Client<N, S>,
}

impl<N: Network, S: ClientStore + Send + 'static> Messaging<'_, N, S> {
    /// Queues a text message; returns its id.
    pub async fn send(
        &self,
        conversation_id: &str,
        to_alias_id: &str,
        text: &str,
    ) -> Result<String, ClientError> {
        self.client
            .send_message(conversation_id, to_alias_id, text, None)
            .await
    }
    /// `sendRead`: a read receipt up to `seq`. (`delivered` receipts are sent by the machine
    /// itself after each inbound message is stored, never by the app.)
    pub async fn send_read(
        &self,
        conversation_id: &str,
        seq: u64,
        to_alias_id: &str,
    ) -> Result<(), ClientError> {
        self.client
            .mark_as_read(conversation_id, seq, to_alias_id)
            .await
    }
    /// `sendTyping`.
    pub async fn send_typing(
        &self,
        conversation_id: &str,
        to_alias_id: &str,
    ) -> Result<(), ClientError> {
        self.client.send_typing(conversation_id, to_alias_id).await
    }
    /// `sendRetract`.
    pub async fn send_retract(
        &self,
        message_id: &str,
        to_alias_id: &str,
        conversation_id: &str,
    ) -> Result<(), ClientError> {
        self.client
            .retract_message(message_id, to_alias_id, conversation_id)
            .await
    }
}

/// Registration and authentication.
#[derive(Debug)]
pub struct Auth<'a, N, S: ClientStore> {
    pub(super) client: &'a Client<N, S>,
}

impl<N: Network, S: ClientStore + Send + 'static> Auth<'_, N, S> {
    /// `registerAccount`: returns the alias id.
    pub async fn register_account(
        &self,
        mnemonic: &str,
        nickname: &str,
    ) -> Result<String, ClientError> {
        self.client.register_account(mnemonic, nickname).await
    }
    /// `performAuthChallenge` for the stored identity (the machine signs; keys never leave it).
    pub async fn perform_auth_challenge(&self) -> Result<Option<(String, String)>, ClientError> {
        self.client.restore_session().await
    }
}

/// Friends.
#[derive(Debug)]
pub struct Contacts<'a, N, S: ClientStore> {
    pub(super) client: &'a Client<N, S>,
}

impl<N: Network, S: ClientStore + Send + 'static> Contacts<'_, N, S> {
    /// `syncFriends` (F1): creates sessions for accepted friends.
    pub async fn sync_friends(&self) -> Result<Vec<body::FriendProfile>, ClientError> {
        self.client
            .ask(|reply| super::Command::SyncFriends { reply })
            .await?
    }
    /// `sendFriendRequest` (F2); returns the body as it came (the reference clients ignore
    /// it, so its shape is the relay's).
    pub async fn send_friend_request(&self, to_alias_id: &str) -> Result<Value, ClientError> {
        let to = wire::ids::AliasId::parse(to_alias_id)
            .map_err(|e| ClientError::Machine(e.to_string()))?;
        self.client
            .post_json(
                paths::FRIEND_REQUEST.into(),
                true,
                &body::FriendRequestBody { to_alias_id: to },
            )
            .await
    }
    /// `acceptFriendRequest` (F3 as the web and Android clients send it: `PUT`, no body, no
    /// `Content-Type`).
    pub async fn accept_friend_request(
        &self,
        friendship_id: &str,
    ) -> Result<body::AcceptFriendResponse, ClientError> {
        let path = fill(paths::FRIEND_ACCEPT, "friendship_id", friendship_id);
        let r = check(
            self.client
                .rest(http::Method::PUT, path, true, None)
                .await?,
        )?;
        decode(&r)
    }
    /// `lookupUser`.
    pub async fn lookup_user(&self, alias_id: &str) -> Result<body::UserProfile, ClientError> {
        self.client
            .get_json(fill(paths::USER, "alias_id", alias_id), true)
            .await
    }
}

/// Encrypted media (M1-M4).
#[derive(Debug)]
pub struct Media<'a, N, S: ClientStore> {
    pub(super) client: &'a Client<N, S>,
}

impl<N: Network, S: ClientStore + Send + 'static> Media<'_, N, S> {
    /// Encrypts `data` with the conversation's session key and uploads it in parts; returns the
    /// media key.
    pub async fn upload(&self, conversation_id: &str, data: &[u8]) -> Result<String, ClientError> {
        let key = self.client.session_key(conversation_id).await?;
        let frames = {
            let mut rng = self.client.media_rng();
            client_core::crypto::media::encrypt_media(&key, data, &mut rng)
        };
        let init: body::UploadInitResponse = self
            .client
            .post_json(
                paths::MEDIA_INIT.into(),
                true,
                &body::UploadInitRequest {
                    content_type: OCTETS.into(),
                },
            )
            .await?;
        let upload_id = init.upload_id.as_str().to_owned();
        let media_key = init.media_key.as_str().to_owned();
        let mut parts = Vec::with_capacity(frames.len());
        for (index, frame) in frames.into_iter().enumerate() {
            let part_number = u32::try_from(index + 1)
                .map_err(|_| ClientError::BadResponse("too many parts".into()))?;
            let path = format!(
                "{}?mediaKey={}&partNumber={part_number}",
                fill(paths::MEDIA_CHUNK, "upload_id", &upload_id),
                encode_component(&media_key)
            );
            let r = check(
                self.client
                    .rest(
                        http::Method::POST,
                        path,
                        true,
                        Some((OCTETS, Bytes::from(frame))),
                    )
                    .await?,
            )?;
            let chunk: body::ChunkResponse = decode(&r)?;
            parts.push(body::CompletedPart {
                etag: chunk.etag.replace('"', ""),
                part_number,
            });
        }
        let complete = body::CompleteUploadRequest {
            media_key: init.media_key,
            parts,
        };
        let _: Value = self
            .client
            .post_json(
                fill(paths::MEDIA_COMPLETE, "upload_id", &upload_id),
                true,
                &complete,
            )
            .await?;
        Ok(media_key)
    }
    /// `uploadImage` (no resizing: a library gets the bytes it should send).
    pub async fn upload_image(
        &self,
        conversation_id: &str,
        image: &[u8],
    ) -> Result<MediaRef, ClientError> {
        let key = self.upload(conversation_id, image).await?;
        Ok(MediaRef::Image {
            key,
            thumbnail: None,
        })
    }
    /// `uploadFile`.
    pub async fn upload_file(
        &self,
        conversation_id: &str,
        name: &str,
        file: &[u8],
    ) -> Result<MediaRef, ClientError> {
        let key = self.upload(conversation_id, file).await?;
        Ok(MediaRef::File {
            key,
            name: name.to_owned(),
            size_bytes: u64::try_from(file.len()).unwrap_or(u64::MAX),
        })
    }
    /// `uploadVoice`.
    pub async fn upload_voice(
        &self,
        conversation_id: &str,
        blob: &[u8],
        duration_ms: u64,
    ) -> Result<MediaRef, ClientError> {
        let key = self.upload(conversation_id, blob).await?;
        Ok(MediaRef::Voice { key, duration_ms })
    }
    /// `downloadDecryptedMedia` (M4).
    pub async fn download_decrypted(
        &self,
        media_key: &str,
        conversation_id: &str,
    ) -> Result<Vec<u8>, ClientError> {
        let key = self.client.session_key(conversation_id).await?;
        let path = format!(
            "{}?key={}",
            paths::MEDIA_DOWNLOAD,
            encode_component(media_key)
        );
        let r = check(
            self.client
                .rest(http::Method::GET, path, true, None)
                .await?,
        )?;
        client_core::crypto::media::decrypt_media(&key, &r.body)
            .map_err(|e| ClientError::BadResponse(e.to_string()))
    }
}

/// Push registration.
#[derive(Debug)]
pub struct Push<'a, N, S: ClientStore> {
    pub(super) client: &'a Client<N, S>,
}

impl<N: Network, S: ClientStore + Send + 'static> Push<'_, N, S> {
    /// The relay's VAPID public key.
    pub async fn vapid_key(&self) -> Result<String, ClientError> {
        let r: body::VapidKeyResponse = self
            .client
            .get_json(paths::PUSH_VAPID_KEY.into(), false)
            .await?;
        Ok(r.vapid_public_key)
    }
    /// `enablePushNotifications`: registers a Web Push subscription.
    pub async fn subscribe(
        &self,
        subscription: &body::PushSubscribeRequest,
    ) -> Result<(), ClientError> {
        let _: Value = self
            .client
            .post_json(paths::PUSH_SUBSCRIBE.into(), true, subscription)
            .await?;
        Ok(())
    }
    /// Registers a native device token (FCM/APNs).
    pub async fn register(&self, request: &body::PushRegisterRequest) -> Result<(), ClientError> {
        let _: Value = self
            .client
            .post_json(paths::PUSH_REGISTER.into(), true, request)
            .await?;
        Ok(())
    }
}

/// Channels.
#[derive(Debug)]
pub struct Channels<'a, N, S: ClientStore> {
    pub(super) client: &'a Client<N, S>,
}

impl<N: Network, S: ClientStore + Send + 'static> Channels<'_, N, S> {
    /// `search(query)`: as the web client, a blank query is not sent (no channel matches it)
    /// and a query is URL-encoded.
    pub async fn search(&self, query: &str) -> Result<Vec<body::ChannelInfo>, ClientError> {
        if query.trim().is_empty() {
            return Ok(Vec::new());
        }
        let path = format!("{}?q={}", paths::CHANNEL_SEARCH, encode_component(query));
        self.client.get_json(path, true).await
    }
    /// `getMine`.
    pub async fn mine(&self) -> Result<Vec<body::ChannelInfo>, ClientError> {
        self.client
            .get_json(paths::CHANNELS_MINE.into(), true)
            .await
    }
    /// `getDetail(channelId)`.
    pub async fn detail(&self, channel_id: &str) -> Result<body::ChannelInfo, ClientError> {
        self.client
            .get_json(fill(paths::CHANNEL, "channel_id", channel_id), true)
            .await
    }
    /// `create(name, description, isPublic)`.
    pub async fn create(
        &self,
        name: &str,
        description: &str,
        is_public: bool,
    ) -> Result<body::CreateChannelResponse, ClientError> {
        let request = body::CreateChannelRequest {
            name: name.to_owned(),
            description: description.to_owned(),
            is_public,
        };
        self.client
            .post_json(paths::CHANNELS.into(), true, &request)
            .await
    }
    /// `subscribe(channelId)`.
    pub async fn subscribe(&self, channel_id: &str) -> Result<(), ClientError> {
        let path = fill(paths::CHANNEL_SUBSCRIBE, "channel_id", channel_id);
        let _: Value = self.client.post_json(path, true, &Map::new()).await?;
        Ok(())
    }
    /// `unsubscribe(channelId)`.
    pub async fn unsubscribe(&self, channel_id: &str) -> Result<(), ClientError> {
        let path = fill(paths::CHANNEL_SUBSCRIBE, "channel_id", channel_id);
        check(
            self.client
                .rest(http::Method::DELETE, path, true, None)
                .await?,
        )?;
        Ok(())
    }
    /// `postMessage(channelId, content, type)`.
    pub async fn post(
        &self,
        channel_id: &str,
        content: &str,
        post_type: body::PostType,
    ) -> Result<body::CreatePostResponse, ClientError> {
        let path = fill(paths::CHANNEL_POSTS, "channel_id", channel_id);
        let request = body::CreatePostRequest {
            post_type,
            content: content.to_owned(),
        };
        self.client.post_json(path, true, &request).await
    }
    /// `getPosts(channelId)`.
    pub async fn posts(&self, channel_id: &str) -> Result<Vec<body::ChannelPost>, ClientError> {
        self.client
            .get_json(fill(paths::CHANNEL_POSTS, "channel_id", channel_id), true)
            .await
    }
    /// `canPost`: only the owner posts (local check).
    pub fn can_post(channel: Option<&body::ChannelInfo>) -> bool {
        channel.is_some_and(|c| c.role == Some(body::ChannelRole::Owner))
    }
    /// `listForSale(channelId, priceUsdt)`: `{channel_id, price_usdt}`, the body the web and
    /// Android clients send (no compare-and-swap version: no reference client sends one).
    /// Returns the answer as it came (the reference clients ignore it).
    pub async fn list_for_sale(
        &self,
        channel_id: &str,
        price_usdt: u64,
    ) -> Result<Value, ClientError> {
        let id = wire::ids::ChannelId::parse(channel_id)
            .map_err(|e| ClientError::Machine(e.to_string()))?;
        let request = body::ListChannelRequest {
            channel_id: id,
            price_usdt,
            expected_version: None,
        };
        self.client
            .post_json(paths::LIST_CHANNEL.into(), true, &request)
            .await
    }
    /// `buyChannel(channelId)`: an order to pay.
    pub async fn buy(&self, channel_id: &str) -> Result<body::ChannelTradeOrder, ClientError> {
        let path = fill(paths::CHANNEL_BUY, "channel_id", channel_id);
        self.client.post_json(path, true, &Map::new()).await
    }
    /// `buyQuota()`: an order for one channel-creation seat.
    pub async fn buy_quota(&self) -> Result<body::ChannelTradeOrder, ClientError> {
        self.client
            .post_json(paths::CHANNEL_QUOTA_BUY.into(), true, &Map::new())
            .await
    }
}

/// Vanity aliases.
#[derive(Debug)]
pub struct Vanity<'a, N, S: ClientStore> {
    pub(super) client: &'a Client<N, S>,
}

impl<N: Network, S: ClientStore + Send + 'static> Vanity<'_, N, S> {
    /// `search(q)` (public): as the web client, `q` is left out when empty and URL-encoded.
    pub async fn search(&self, q: &str) -> Result<Vec<body::VanityItem>, ClientError> {
        let path = if q.is_empty() {
            paths::VANITY_SEARCH.to_owned()
        } else {
            format!("{}?q={}", paths::VANITY_SEARCH, encode_component(q))
        };
        self.client.get_json(path, false).await
    }
    /// `purchase(aliasId)`: the web client's PurchaseOrder (Android's `amount_usdt`, when the
    /// relay leaves it out, is the documented `price_usdt`).
    pub async fn purchase(&self, alias_id: &str) -> Result<body::PurchaseOrder, ClientError> {
        let alias =
            wire::ids::AliasId::parse(alias_id).map_err(|e| ClientError::Machine(e.to_string()))?;
        let mut order: Value = self
            .client
            .post_json(
                paths::VANITY_PURCHASE.into(),
                true,
                &body::PurchaseRequest { alias_id: alias },
            )
            .await?;
        default_from(&mut order, "amount_usdt", "price_usdt");
        decode_value(order)
    }
    /// `bind(orderId)`.
    pub async fn bind(&self, order_id: &str) -> Result<body::BindResponse, ClientError> {
        let id =
            wire::ids::OrderId::parse(order_id).map_err(|e| ClientError::Machine(e.to_string()))?;
        self.client
            .post_json(
                paths::VANITY_BIND.into(),
                true,
                &body::BindRequest { order_id: id },
            )
            .await
    }
    /// `reserve(aliasId)` (deprecated, public): `price` and `price_usdt` (the clients read one
    /// or the other) each filled from the other when the relay sends one.
    pub async fn reserve(&self, alias_id: &str) -> Result<body::ReserveOrder, ClientError> {
        let alias =
            wire::ids::AliasId::parse(alias_id).map_err(|e| ClientError::Machine(e.to_string()))?;
        let mut order: Value = self
            .client
            .post_json(
                paths::VANITY_RESERVE.into(),
                false,
                &body::PurchaseRequest { alias_id: alias },
            )
            .await?;
        default_from(&mut order, "price", "price_usdt");
        default_from(&mut order, "price_usdt", "price");
        decode_value(order)
    }
    /// `orderStatus(orderId)` (deprecated, public): `{status, alias_id}` as the reference
    /// clients read it, and the relay's `kind` and `ref_id` when it sends them.
    pub async fn order_status(&self, order_id: &str) -> Result<OrderStatus, ClientError> {
        self.client
            .get_json(fill(paths::ORDER_STATUS, "order_id", order_id), false)
            .await
    }
    /// `onPaymentConfirmed(callback)`: `(order_id, ref_id)`.
    pub fn on_payment_confirmed(
        &self,
        f: impl Fn(&str, &str) + Send + Sync + 'static,
    ) -> Subscription {
        self.client.on(EventKind::PaymentConfirmed, move |e| {
            if let ClientEvent::PaymentConfirmed { order_id, ref_id } = e {
                f(order_id, ref_id);
            }
        })
    }
}

/// An order's status (V5) as the reference clients read it: `status` and `alias_id` (`""` for
/// orders that are not for an alias); what the order buys and refers to when the relay says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct OrderStatus {
    /// `pending`, `confirmed` or `expired`.
    pub status: body::OrderState,
    /// The alias of a vanity order.
    #[serde(default)]
    pub alias_id: String,
    /// What the order buys (an extension some relays send).
    #[serde(default)]
    pub kind: Option<body::OrderKind>,
    /// What the order refers to (an extension some relays send).
    #[serde(default)]
    pub ref_id: Option<String>,
}

/// Options of an outgoing call.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// Extra signed fields of the offer (e.g. `sdp`, `video`).
    pub fields: Map<String, Value>,
}

/// Call signalling (signed and encrypted by client-core; media is the app's WebRTC stack).
#[derive(Debug)]
pub struct Calls<'a, N, S: ClientStore> {
    pub(super) client: &'a Client<N, S>,
    pub(super) setup: &'a CallSetup,
}

impl<N: Network, S: ClientStore + Send + 'static> Calls<'_, N, S> {
    async fn signal(
        &self,
        kind: CallKind,
        to_alias_id: &str,
        call_id: &str,
        fields: Map<String, Value>,
    ) -> Result<(), ClientError> {
        let (to, id) = (to_alias_id.to_owned(), call_id.to_owned());
        self.client
            .with_machine(move |m, now| m.send_call_signal(now, kind, &to, &id, fields))
            .await?
            .map_err(Into::into)
    }
    /// Our alias as given to `init_calls`.
    pub fn my_alias_id(&self) -> &str {
        &self.setup.my_alias_id
    }
    /// Whether TURN relaying is forced.
    pub fn always_relay(&self) -> bool {
        self.setup.always_relay
    }
    /// `call(toAliasId, options)`: sends a signed `call_offer`.
    pub async fn call(
        &self,
        to_alias_id: &str,
        call_id: &str,
        options: CallOptions,
    ) -> Result<(), ClientError> {
        self.signal(CallKind::Offer, to_alias_id, call_id, options.fields)
            .await
    }
    /// `answer`.
    pub async fn answer(
        &self,
        to_alias_id: &str,
        call_id: &str,
        fields: Map<String, Value>,
    ) -> Result<(), ClientError> {
        self.signal(CallKind::Answer, to_alias_id, call_id, fields)
            .await
    }
    /// `reject`.
    pub async fn reject(&self, to_alias_id: &str, call_id: &str) -> Result<(), ClientError> {
        self.signal(CallKind::Reject, to_alias_id, call_id, Map::new())
            .await
    }
    /// `hangup`.
    pub async fn hangup(&self, to_alias_id: &str, call_id: &str) -> Result<(), ClientError> {
        self.signal(CallKind::Hangup, to_alias_id, call_id, Map::new())
            .await
    }
    /// The relay's ICE configuration.
    pub async fn ice_config(&self) -> Result<body::IceConfig, ClientError> {
        let mode = if self.setup.always_relay {
            "?mode=relay"
        } else {
            ""
        };
        self.client
            .get_json(format!("{}{mode}", paths::ICE_CONFIG), true)
            .await
    }
}

/// The HTTP client's base address.
#[derive(Debug)]
pub struct Http<'a, N, S: ClientStore> {
    pub(super) client: &'a Client<N, S>,
}

impl<N: Network, S: ClientStore + Send + 'static> Http<'_, N, S> {
    /// Points every later request and socket at `endpoint`.
    pub async fn set_base(&self, endpoint: seam::net::Endpoint) -> Result<(), ClientError> {
        self.client.send(super::Command::SetBase { endpoint }).await
    }
}
