//! Channels (CH1-CH8) and channel trading (CH9-CH11): public broadcast feeds, not end-to-end
//! encrypted. Rules and decisions: NOTES.md, "Commerce".

use wire::frames::ChannelPostFrame;
use wire::http::{
    ChannelInfo, ChannelPost, ChannelRole, ChannelTradeOrder, CreateChannelRequest,
    CreateChannelResponse, CreatePostRequest, CreatePostResponse, ForSaleRequest,
    ListChannelRequest, ListChannelResponse, OkResponse, OrderKind, decode_body,
};
use wire::limits::{CHANNEL_DESCRIPTION_MAX_CHARS, CHANNEL_NAME_MAX_CHARS, MAX_CHANNEL_POST_BYTES};
use wire::{AliasId, ChannelId, ErrorCode, IsoTime, PostId, ServerFrame, UnixMs, UserUuid};

use crate::commerce_state::{ChannelRow, PostRow};
use crate::cx::Cx;
use crate::http::{ApiError, HttpRequest, HttpResponse, Method, query_param};
use crate::ids::hex;
use crate::limits::{
    CHANNEL_ORDER_TTL_MS, MAX_CHANNEL_PRICE_USDT, MAX_CHANNELS_MINE, MAX_CHANNELS_SEARCH_RESULTS,
    MAX_SEARCH_QUERY_BYTES, POSTS_PAGE_DEFAULT, POSTS_PAGE_MAX, QUOTA_PRICE_USDT,
};
use crate::planted::planted;
use crate::store::StoreError;

fn channel_not_found() -> ApiError {
    ApiError::new(ErrorCode::CHANNEL_NOT_FOUND, "no such channel")
}

/// Parses a path channel id (a malformed one can name no channel: 404).
fn parse_channel_id(raw: &str) -> Result<ChannelId, ApiError> {
    ChannelId::parse(raw).map_err(|_| channel_not_found())
}

/// Percent-decodes a query value (`+` is a space); invalid escapes are kept verbatim.
pub(crate) fn url_decode(raw: &str) -> String {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let v = b
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                if let Some(v) = v {
                    out.push(v);
                    i += 3;
                    continue;
                }
                out.push(b'%');
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `q` query parameter, decoded and trimmed; bounded.
pub(crate) fn search_text(query: &str) -> Result<String, ApiError> {
    let q = url_decode(query_param(query, "q").unwrap_or(""))
        .trim()
        .to_owned();
    if q.len() > MAX_SEARCH_QUERY_BYTES {
        return Err(ApiError::new(
            ErrorCode::INVALID_FIELD,
            format!(
                "q is {} bytes, the limit is {MAX_SEARCH_QUERY_BYTES}",
                q.len()
            ),
        ));
    }
    Ok(q)
}

fn check_text(field: &str, raw: &str, min: usize, max: usize) -> Result<String, ApiError> {
    let t = raw.trim();
    let n = t.chars().count();
    if n < min || n > max {
        return Err(ApiError::new(
            ErrorCode::INVALID_FIELD,
            format!("{field} must be {min} to {max} characters, got {n}"),
        ));
    }
    if t.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(ApiError::new(
            ErrorCode::INVALID_FIELD,
            format!("{field} must not contain control characters"),
        ));
    }
    Ok(t.to_owned())
}

/// A listing price: a positive whole number of USDT, bounded.
pub(crate) fn check_price(price: u64) -> Result<u64, ApiError> {
    if price == 0 || price > MAX_CHANNEL_PRICE_USDT {
        return Err(ApiError::new(
            ErrorCode::INVALID_FIELD,
            format!("price_usdt must be a whole number from 1 to {MAX_CHANNEL_PRICE_USDT}"),
        ));
    }
    Ok(price)
}

/// Decodes a listing body; a negative, fractional or non-numeric `price_usdt` is
/// `INVALID_FIELD` (not `INVALID_JSON`), because the shape is right and the value is not.
fn decode_listing<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    match decode_body::<T>(body) {
        Ok(v) => Ok(v),
        Err(e) => {
            let price_bad = serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v.get("price_usdt").cloned())
                .is_some_and(|p| p.as_u64().is_none());
            if price_bad {
                Err(ApiError::new(
                    ErrorCode::INVALID_FIELD,
                    "price_usdt must be a positive whole number of USDT",
                ))
            } else {
                Err(e.into())
            }
        }
    }
}

impl Cx<'_> {
    fn channel_info(&self, c: &ChannelRow, user: Option<&UserUuid>) -> ChannelInfo {
        let role = match user {
            Some(u) if *u == c.owner => Some(ChannelRole::Owner),
            Some(u) if self.state.is_subscribed(&c.id, u) => Some(ChannelRole::Subscriber),
            _ => None,
        };
        let subscribed = user.is_some_and(|u| self.state.is_subscribed(&c.id, u));
        ChannelInfo {
            id: c.id.clone(),
            name: c.name.clone(),
            description: c.description.clone(),
            role,
            is_subscribed: Some(subscribed),
            for_sale: Some(c.sale_price.is_some()),
            sale_price: c.sale_price,
            version: Some(c.version),
        }
    }

    /// `p` as clients see it, with its author's alias (`None` when the author has no account).
    /// `Err`: the author's account could not be read.
    fn post_view(&mut self, p: &PostRow) -> Result<Option<ChannelPost>, StoreError> {
        Ok(self.alias_of(&p.author)?.map(|alias| view(p, alias)))
    }

    /// CH1: public channels whose name or description contains `q` (case-insensitive),
    /// ordered by name then id, at most `MAX_CHANNELS_SEARCH_RESULTS`. Blank `q`: `[]`.
    pub(crate) fn http_channel_search(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let q = search_text(&req.query)?.to_lowercase();
        if q.is_empty() {
            return Ok(HttpResponse::json(200, &Vec::<ChannelInfo>::new()));
        }
        let mut hits: Vec<&ChannelRow> = self
            .state
            .commerce()
            .channels
            .values()
            .filter(|c| c.is_public)
            .filter(|c| {
                c.name.to_lowercase().contains(&q) || c.description.to_lowercase().contains(&q)
            })
            .collect();
        hits.sort_by(|a, b| (a.name.to_lowercase(), &a.id).cmp(&(b.name.to_lowercase(), &b.id)));
        let list: Vec<ChannelInfo> = hits
            .into_iter()
            .take(MAX_CHANNELS_SEARCH_RESULTS)
            .map(|c| self.channel_info(c, Some(&user)))
            .collect();
        Ok(HttpResponse::json(200, &list))
    }

    /// CH2: owned then subscribed channels, each group by channel id.
    pub(crate) fn http_channels_mine(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let c = &self.state.commerce();
        let ids: Vec<ChannelId> = c
            .owned
            .get(&user)
            .into_iter()
            .flatten()
            .chain(c.subs_of.get(&user).into_iter().flatten())
            .cloned()
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        let list: Vec<ChannelInfo> = ids
            .iter()
            .filter(|id| seen.insert((*id).clone()))
            .filter_map(|id| self.state.commerce().channels.get(id))
            .take(MAX_CHANNELS_MINE)
            .map(|ch| self.channel_info(ch, Some(&user)))
            .collect();
        Ok(HttpResponse::json(200, &list))
    }

    /// CH3. A private channel is visible to its owner and subscribers, and to anyone who knows
    /// its id (the id is the invitation).
    pub(crate) fn http_channel(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
        id: &str,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let id = parse_channel_id(id)?;
        let c = self
            .state
            .commerce()
            .channels
            .get(&id)
            .ok_or_else(channel_not_found)?;
        Ok(HttpResponse::json(200, &self.channel_info(c, Some(&user))))
    }

    /// CH4: creation uses one seat; seats = free quota + bought seats.
    pub(crate) fn http_channel_create(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let body: CreateChannelRequest = decode_body(&req.body)?;
        let name = check_text("name", &body.name, 1, CHANNEL_NAME_MAX_CHARS)?;
        let description = check_text(
            "description",
            &body.description,
            0,
            CHANNEL_DESCRIPTION_MAX_CHARS,
        )?;
        let mut quota = self.state.quota_of(&user);
        let seats = self.config.free_channel_quota.saturating_add(quota.bought);
        if quota.created >= seats {
            return Err(ApiError::new(
                ErrorCode::QUOTA_EXCEEDED,
                format!(
                    "QUOTA_EXCEEDED: you have created {} of {seats} channels; buy a seat for {QUOTA_PRICE_USDT} USDT",
                    quota.created
                ),
            ));
        }
        let id = loop {
            let raw = format!("ch-{}", hex(&self.ids.bytes::<8>()));
            if let Ok(id) = ChannelId::parse(&raw)
                && !self.state.commerce().channels.contains_key(&id)
            {
                break id;
            }
        };
        quota.created = quota.created.saturating_add(1);
        self.state.put_quota(&user, quota);
        self.state.put_channel(ChannelRow {
            id: id.clone(),
            name,
            description,
            is_public: body.is_public,
            owner: user,
            created_at: now,
            sale_price: None,
            version: 1,
            last_post: 0,
        });
        Ok(HttpResponse::json(
            201,
            &CreateChannelResponse { channel_id: id },
        ))
    }

    /// CH5 (POST) / CH6 (DELETE): idempotent. The owner is never a subscriber: subscribing
    /// to your own channel is a no-op and unsubscribing from it is 400 `OWN_CHANNEL`.
    pub(crate) fn http_channel_subscribe(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
        id: &str,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let id = parse_channel_id(id)?;
        let owner = self
            .state
            .commerce()
            .channels
            .get(&id)
            .map(|c| c.owner.clone())
            .ok_or_else(channel_not_found)?;
        if req.method == Method::Delete {
            if owner == user {
                return Err(ApiError::new(
                    ErrorCode::OWN_CHANNEL,
                    "the owner cannot unsubscribe from its own channel",
                ));
            }
            probes::probe!("channel:unsubscribed");
            self.state.delete_sub(&id, &user);
        } else if owner != user {
            probes::probe!("channel:subscribed");
            self.state.put_sub(&id, &user, now);
        }
        Ok(HttpResponse::json(200, &OkResponse::OK))
    }

    /// CH7 (POST) and CH8 (GET).
    pub(crate) fn http_channel_posts(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
        id: &str,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let id = parse_channel_id(id)?;
        let Some(channel) = self.state.commerce().channels.get(&id).cloned() else {
            return Err(channel_not_found());
        };
        if req.method == Method::Get {
            return self.posts_page(&id, &req.query);
        }
        if channel.owner != user {
            return Err(ApiError::new(
                ErrorCode::FORBIDDEN,
                "only the channel's owner may post",
            ));
        }
        let body: CreatePostRequest = decode_body(&req.body)?;
        check_post_content(&body.content)?;
        // The author's alias, read before anything changes (a failed read changes nothing).
        let author_alias = self.alias_of(&user)?;
        let seq = channel.last_post + 1;
        let post_id = PostId::parse(&format!("{id}.{seq}"))
            .or_else(|_| PostId::parse(&format!("p-{}", hex(&self.ids.bytes::<12>()))))
            .map_err(|_| ApiError::new(ErrorCode::BAD_REQUEST, "could not name the post"))?;
        let row = PostRow {
            channel_id: id.clone(),
            seq,
            id: post_id.clone(),
            post_type: body.post_type,
            content: body.content,
            author: user.clone(),
            created_at: now,
        };
        self.state.put_channel(ChannelRow {
            last_post: seq,
            ..channel
        });
        if let Some(post) = author_alias.map(|alias| view(&row, alias)) {
            self.fan_out_post(&id, user, &post);
        }
        self.state.put_post(row);
        Ok(HttpResponse::json(201, &CreatePostResponse { post_id }))
    }

    /// Sends `post` of channel `id` live to its online subscribers (those of other shards
    /// through their shards), then to its `owner`
    /// (whose other views are not tracked: the owner gets the frame too, so every open client
    /// shows the post). Order: subscriber uuid order, owner last.
    fn fan_out_post(&mut self, id: &ChannelId, owner: UserUuid, post: &ChannelPost) {
        let mut targets: Vec<UserUuid> = self
            .state
            .commerce()
            .subs
            .get(id)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        targets.push(owner);
        for t in targets {
            let frame = || {
                ServerFrame::ChannelPost(ChannelPostFrame {
                    conv_id: id.clone(),
                    channel_id: id.clone(),
                    post: post.clone(),
                })
            };
            // A subscriber of another shard gets it there, as best effort as here.
            if let Some(shard) = self.config.shard.elsewhere(&t) {
                self.signal(shard, &t, frame(), None);
            } else if let Some(conn) = self.online(&t) {
                self.send(conn, frame());
            }
        }
    }

    /// CH8: newest first; `before` (a post id of this channel) and `limit` (1..=200, default 50).
    fn posts_page(&mut self, id: &ChannelId, query: &str) -> Result<HttpResponse, ApiError> {
        let limit = match query_param(query, "limit") {
            None | Some("") => POSTS_PAGE_DEFAULT,
            Some(v) => match v.parse::<usize>() {
                Ok(n) if n >= 1 => n.min(POSTS_PAGE_MAX),
                _ => {
                    return Err(ApiError::new(
                        ErrorCode::INVALID_FIELD,
                        format!("limit must be a whole number from 1 to {POSTS_PAGE_MAX}"),
                    ));
                }
            },
        };
        let upper = match query_param(query, "before") {
            None | Some("") => u64::MAX,
            Some(raw) => {
                let bad = || {
                    ApiError::new(
                        ErrorCode::INVALID_FIELD,
                        "before must be the id of a post of this channel",
                    )
                };
                let pid = PostId::parse(&url_decode(raw)).map_err(|_| bad())?;
                match self.state.commerce().post_seq.get(&pid) {
                    Some((ch, seq)) if ch == id => *seq,
                    _ => return Err(bad()),
                }
            }
        };
        let rows: Vec<PostRow> = self
            .state
            .commerce()
            .posts
            .get(id)
            .into_iter()
            .flat_map(|m| m.range(..upper).rev())
            .map(|(_, p)| p.clone())
            .take(limit)
            .collect();
        let mut list: Vec<ChannelPost> = Vec::with_capacity(rows.len());
        for p in &rows {
            list.extend(self.post_view(p)?);
        }
        Ok(HttpResponse::json(200, &list))
    }

    /// CH9 (web, Android): `POST /vanity/list-channel`.
    pub(crate) fn http_list_channel(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let body: ListChannelRequest = decode_listing(&req.body)?;
        self.list_channel(
            &user,
            &body.channel_id,
            body.price_usdt,
            body.expected_version,
        )
    }

    /// CH9 (iOS): `PUT /channels/{id}/forsale`.
    pub(crate) fn http_channel_for_sale(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
        id: &str,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let id = parse_channel_id(id)?;
        let body: ForSaleRequest = decode_listing(&req.body)?;
        self.list_channel(&user, &id, body.price_usdt, body.expected_version)
    }

    fn list_channel(
        &mut self,
        user: &UserUuid,
        id: &ChannelId,
        price: u64,
        expected: Option<u64>,
    ) -> Result<HttpResponse, ApiError> {
        let Some(c) = self.state.commerce().channels.get(id).cloned() else {
            return Err(channel_not_found());
        };
        // PLANTED BUG (ListingByAnyone): the owner check is skipped, so anyone lists
        // anyone's channel for sale (and may then buy it).
        if c.owner != *user && !planted!(self.config, ListingByAnyone) {
            return Err(ApiError::new(
                ErrorCode::FORBIDDEN,
                "only the channel's owner may list it for sale",
            ));
        }
        let price = check_price(price)?;
        if let Some(v) = expected
            && v != c.version
        {
            return Err(ApiError::new(
                ErrorCode::VERSION_CONFLICT,
                format!(
                    "the listing changed: expected version {v}, current version {}",
                    c.version
                ),
            ));
        }
        if self.state.commerce().channel_lock.contains_key(id) {
            return Err(ApiError::new(
                ErrorCode::VERSION_CONFLICT,
                "a buyer's order for this channel is pending; the listing cannot change until it confirms or expires",
            ));
        }
        let version = c.version + 1;
        self.state.put_channel(ChannelRow {
            sale_price: Some(price),
            version,
            ..c
        });
        Ok(HttpResponse::json(
            200,
            &ListChannelResponse {
                channel_id: id.clone(),
                price_usdt: price,
                version,
            },
        ))
    }

    /// CH10.
    pub(crate) fn http_channel_buy(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
        id: &str,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let id = parse_channel_id(id)?;
        let Some(c) = self.state.commerce().channels.get(&id).cloned() else {
            return Err(channel_not_found());
        };
        if c.owner == user {
            return Err(ApiError::new(
                ErrorCode::OWN_CHANNEL,
                "you already own this channel",
            ));
        }
        if let Some(existing) = self.state.commerce().channel_lock.get(&id).cloned() {
            let o = self.state.commerce().orders.get(&existing).cloned();
            return match o {
                Some(o) if o.buyer.as_ref() == Some(&user) => {
                    probes::probe!("channel:buy-repeated");
                    Ok(HttpResponse::json(200, &self.trade_order_view(&o)))
                }
                _ => Err(ApiError::new(
                    ErrorCode::CHANNEL_TAKEN,
                    "another buyer's order for this channel is pending",
                )),
            };
        }
        let Some(price) = c.sale_price else {
            return Err(ApiError::new(
                ErrorCode::NOT_FOR_SALE,
                "this channel is not listed for sale",
            ));
        };
        let o = self.create_order(
            now,
            OrderKind::ChannelTrade,
            Some(user),
            id.to_string(),
            c.version,
            price,
            CHANNEL_ORDER_TTL_MS,
        );
        Ok(HttpResponse::json(201, &self.trade_order_view(&o)))
    }

    /// CH11: a 5 USDT order for one more channel-creation seat. Each call creates a new order
    /// (several seats may be bought in parallel).
    pub(crate) fn http_quota_buy(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let o = self.create_order(
            now,
            OrderKind::ChannelQuota,
            Some(user),
            String::new(),
            0,
            QUOTA_PRICE_USDT,
            CHANNEL_ORDER_TTL_MS,
        );
        Ok(HttpResponse::json(201, &self.trade_order_view(&o)))
    }

    fn trade_order_view(&self, o: &crate::commerce_state::OrderRow) -> ChannelTradeOrder {
        ChannelTradeOrder {
            order_id: o.id.clone(),
            price_usdt: o.price_usdt,
            pay_to: o.pay_to.clone(),
            expired_at: IsoTime(o.expires_at),
            payment_url: Some(self.payment_url(&o.id)),
        }
    }
}

/// A post's content: not blank, at most `MAX_CHANNEL_POST_BYTES` bytes.
fn check_post_content(content: &str) -> Result<(), ApiError> {
    if content.trim().is_empty() {
        return Err(ApiError::new(
            ErrorCode::INVALID_FIELD,
            "content must not be empty",
        ));
    }
    if content.len() > MAX_CHANNEL_POST_BYTES {
        return Err(ApiError::with_status(
            413,
            ErrorCode::PAYLOAD_TOO_LARGE,
            format!(
                "content is {} bytes, the limit is {MAX_CHANNEL_POST_BYTES}",
                content.len()
            ),
        ));
    }
    Ok(())
}

/// `p` as clients see it, by its author's alias.
fn view(p: &PostRow, author_alias_id: AliasId) -> ChannelPost {
    ChannelPost {
        id: p.id.clone(),
        post_type: p.post_type,
        content: p.content.clone(),
        created_at: IsoTime(p.created_at),
        author_alias_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_decoding() {
        assert_eq!(url_decode("a%20b+c"), "a b c");
        assert_eq!(url_decode("%E4%B8%AD"), "中");
        assert_eq!(url_decode("100%"), "100%");
        assert_eq!(url_decode("%zz"), "%zz");
        assert_eq!(url_decode("%4"), "%4");
    }

    #[test]
    fn prices() {
        assert!(check_price(0).is_err());
        assert!(check_price(1).is_ok());
        assert!(check_price(MAX_CHANNEL_PRICE_USDT + 1).is_err());
    }
}
