//! Vanity aliases (V1-V4): search over the catalog, purchase with a 15-minute hold, the
//! deprecated reserve, and bind (the alias becomes the account's `alias_id`; the old alias is
//! retired forever). Prices: [`crate::pricing`]. Decisions: NOTES.md, "Commerce".

use wire::http::{
    BindRequest, BindResponse, OrderKind, OrderState, PurchaseOrder, PurchaseRequest, ReserveOrder,
    VanityItem, VanityTier, decode_body,
};
use wire::{AliasId, ErrorCode, IsoTime, UnixMs, UserUuid};

use crate::channels::search_text;
use crate::commerce_state::{AliasFate, AliasRow, OrderRow};
use crate::cx::Cx;
use crate::handoff::Notice;
use crate::http::{ApiError, HttpRequest, HttpResponse};
use crate::limits::{ALIAS_HOLD_MS, VANITY_SEARCH_MAX_RESULTS};
use crate::pricing::price;
use crate::rows::AccountRow;

fn taken() -> ApiError {
    ApiError::new(
        ErrorCode::ALIAS_TAKEN,
        "this alias is held or owned by someone else",
    )
}

impl Cx<'_> {
    fn in_catalog(&self, alias: &AliasId) -> bool {
        self.config.vanity_catalog.contains(alias)
    }

    /// Whether `alias` is free: never sold or retired, no account has it (`in_use`: whether
    /// one does, [`Cx::alias_in_use`](crate::cx::Cx::alias_in_use)), no live order holds it (`except` ignores that
    /// order's hold).
    pub(crate) fn vanity_available(
        &self,
        alias: &AliasId,
        in_use: bool,
        except: Option<&wire::OrderId>,
    ) -> bool {
        !self.state.alias_spent(alias)
            && !in_use
            && self
                .state
                .commerce()
                .alias_hold
                .get(alias)
                .is_none_or(|o| Some(o) == except)
    }

    fn item(alias: &AliasId) -> VanityItem {
        let (tier, price_usdt) = price(alias);
        VanityItem {
            alias_id: alias.clone(),
            price_usdt,
            tier,
            is_featured: tier == VanityTier::Top,
        }
    }

    /// V1 (no JWT). Only available aliases are listed (held, owned and sold ones are hidden).
    pub(crate) fn http_vanity_search(
        &mut self,
        _now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let q = search_text(&req.query)?.to_lowercase();
        let mut candidates: Vec<VanityItem> = self
            .config
            .vanity_catalog
            .iter()
            .filter(|a| a.as_str().starts_with(q.as_str()))
            .map(Self::item)
            .filter(|i| !q.is_empty() || i.is_featured)
            .collect();
        if q.is_empty() {
            candidates
                .sort_by(|a, b| (a.price_usdt, &a.alias_id).cmp(&(b.price_usdt, &b.alias_id)));
        } else {
            candidates.sort_by(|a, b| a.alias_id.cmp(&b.alias_id));
        }
        candidates.dedup_by(|a, b| a.alias_id == b.alias_id);
        // In order, until the page is full: whether an account holds an alias may be a read.
        let mut items = Vec::with_capacity(VANITY_SEARCH_MAX_RESULTS.min(candidates.len()));
        for item in candidates {
            if items.len() == VANITY_SEARCH_MAX_RESULTS {
                break;
            }
            let in_use = self.alias_in_use(&item.alias_id)?;
            if self.vanity_available(&item.alias_id, in_use, None) {
                items.push(item);
            }
        }
        Ok(HttpResponse::json(200, &items))
    }

    /// The checks of V2 and V4; `Ok(Some(order))` is the caller's own pending order.
    fn vanity_precheck(
        &mut self,
        alias: &AliasId,
        buyer: Option<&UserUuid>,
    ) -> Result<Option<OrderRow>, ApiError> {
        if !self.in_catalog(alias) {
            return Err(ApiError::new(
                ErrorCode::ALIAS_NOT_FOUND,
                "this alias is not for sale",
            ));
        }
        if let Some(oid) = self.state.commerce().alias_hold.get(alias)
            && let Some(o) = self.state.commerce().orders.get(oid)
            && o.state == OrderState::Pending
            && buyer.is_some()
            && o.buyer.as_ref() == buyer
        {
            return Ok(Some(o.clone()));
        }
        let in_use = self.alias_in_use(alias)?;
        if !self.vanity_available(alias, in_use, None) {
            return Err(taken());
        }
        Ok(None)
    }

    /// Whether a new unpaid hold of `alias` may be made for `buyer` (none: a reserve) asking
    /// from `network` at `now`: not while the holder's own hold of it lapsed within the
    /// cooldown, nor past the holds an account or a network may have at once. 429 with the
    /// time until that changes.
    fn may_hold(
        &self,
        now: UnixMs,
        alias: &AliasId,
        buyer: Option<&UserUuid>,
        network: &str,
    ) -> Result<(), ApiError> {
        let wait = |until: UnixMs| until.get().saturating_sub(now.get()).max(1);
        if let Some(until) = self.admission().vanity.cooling(alias, buyer, network, now) {
            probes::probe!("vanity:rehold-refused");
            return Err(ApiError::rate_limited(
                "this alias was held for you until the hold lapsed unpaid; others may hold it first",
                wait(until),
            ));
        }
        let commerce = self.state.commerce();
        let pending = |o: &wire::OrderId| {
            commerce
                .orders
                .get(o)
                .filter(|r| r.kind == OrderKind::Vanity && r.state == OrderState::Pending)
        };
        // Past `cap` holds whose lapses are `expiries`: 429 until the first lapses.
        let full = |expiries: Vec<UnixMs>, cap: usize, whose: &str| {
            (expiries.len() >= cap).then(|| {
                ApiError::rate_limited(
                    format!(
                        "at most {cap} unpaid alias holds per {whose} at once; pay for one or let one lapse"
                    ),
                    wait(expiries.into_iter().min().unwrap_or(now)),
                )
            })
        };
        if let Some(user) = buyer {
            let mine = commerce
                .alias_hold
                .values()
                .filter_map(pending)
                .filter(|r| r.buyer.as_ref() == Some(user))
                .map(|r| r.expires_at)
                .collect();
            if let Some(refusal) = full(mine, self.config.vanity_holds_per_account, "account") {
                probes::probe!("vanity:account-holds-full");
                return Err(refusal);
            }
        }
        let ours = self
            .admission()
            .vanity
            .of_network(network)
            .filter_map(|o| pending(o).map(|r| r.expires_at))
            .collect();
        if let Some(refusal) = full(ours, self.config.vanity_holds_per_network, "network") {
            probes::probe!("vanity:network-holds-full");
            return Err(refusal);
        }
        Ok(())
    }

    /// V2 (JWT): a 15-minute hold; the same buyer asking again gets the same order.
    pub(crate) fn http_vanity_purchase(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let body: PurchaseRequest = decode_body(&req.body)?;
        let (status, o) = match self.vanity_precheck(&body.alias_id, Some(&user))? {
            Some(o) => {
                probes::probe!("vanity:purchase-repeated");
                (200, o)
            }
            None => {
                self.may_hold(now, &body.alias_id, Some(&user), &req.remote_addr)?;
                probes::probe!("vanity:hold-created");
                let (_, p) = price(&body.alias_id);
                let o = self.create_order(
                    now,
                    OrderKind::Vanity,
                    Some(user),
                    body.alias_id.to_string(),
                    0,
                    p,
                    ALIAS_HOLD_MS,
                );
                self.admission_mut()
                    .vanity
                    .held(o.id.clone(), req.remote_addr.clone());
                (201, o)
            }
        };
        Ok(HttpResponse::json(
            status,
            &PurchaseOrder {
                order_id: o.id.clone(),
                alias_id: body.alias_id,
                price_usdt: o.price_usdt,
                amount_usdt: o.price_usdt,
                payment_url: self.payment_url(&o.id),
                pay_to: Some(o.pay_to.clone()),
                expired_at: IsoTime(o.expires_at),
            },
        ))
    }

    /// V4 (deprecated, no JWT): an order with no buyer; whoever presents the confirmed order
    /// id to V3 first binds it.
    pub(crate) fn http_vanity_reserve(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let body: PurchaseRequest = decode_body(&req.body)?;
        self.vanity_precheck(&body.alias_id, None)?;
        self.may_hold(now, &body.alias_id, None, &req.remote_addr)?;
        probes::probe!("vanity:reserved");
        let (_, p) = price(&body.alias_id);
        let o = self.create_order(
            now,
            OrderKind::Vanity,
            None,
            body.alias_id.to_string(),
            0,
            p,
            ALIAS_HOLD_MS,
        );
        self.admission_mut()
            .vanity
            .held(o.id.clone(), req.remote_addr.clone());
        Ok(HttpResponse::json(
            201,
            &ReserveOrder {
                order_id: o.id.clone(),
                alias_id: body.alias_id,
                price_usdt: o.price_usdt,
                price: o.price_usdt,
                pay_to: o.pay_to.clone(),
                expired_at: IsoTime(o.expires_at),
            },
        ))
    }

    /// V3 (JWT).
    pub(crate) fn http_vanity_bind(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let body: BindRequest = decode_body(&req.body)?;
        let not_found = || {
            ApiError::new(
                ErrorCode::ORDER_NOT_FOUND,
                "no such vanity order for this account",
            )
        };
        let mut o = self
            .state
            .commerce()
            .orders
            .get(&body.order_id)
            .cloned()
            .ok_or_else(not_found)?;
        if o.kind != OrderKind::Vanity || o.buyer.as_ref().is_some_and(|b| *b != user) {
            return Err(not_found());
        }
        let alias = AliasId::parse(&o.target).map_err(|_| not_found())?;
        if o.used {
            // A retry after a lost response is answered again; anything else is a conflict.
            // The alias's own row says so at once; the account (another shard's, with
            // several) may not have taken the bind yet.
            let bound_here = (self.state.commerce().aliases.get(&alias))
                .is_some_and(|a| a.user == user && a.fate == AliasFate::Bound);
            if bound_here || self.alias_of(&user)?.as_ref() == Some(&alias) {
                probes::probe!("vanity:bind-retry-answered");
                return Ok(HttpResponse::json(200, &BindResponse { alias_id: alias }));
            }
            return Err(ApiError::new(
                ErrorCode::ORDER_NOT_CONFIRMED,
                "this order was already used to bind its alias",
            ));
        }
        if o.state != OrderState::Confirmed {
            return Err(not_confirmed(o.state));
        }
        if self.alias_in_use(&alias)?
            || self
                .state
                .commerce()
                .aliases
                .get(&alias)
                .is_some_and(|a| a.user != user)
        {
            return Err(ApiError::new(
                ErrorCode::ALIAS_TAKEN,
                "binding conflict: this alias already belongs to an account",
            ));
        }
        let Some(account) = self.account(&user)?.map(|a| AccountRow::clone(&a)) else {
            return Err(not_found());
        };
        self.rebind(now, account, alias.clone());
        probes::probe!("vanity:bound");
        o.used = true;
        o.bound_at = Some(now);
        o.buyer = Some(user);
        self.state.put_order(o);
        Ok(HttpResponse::json(200, &BindResponse { alias_id: alias }))
    }

    /// Gives `account` the alias `alias`: its former alias is retired (it still routes to
    /// the account), the new one bound to it. The account row is its user's shard's: for a
    /// user of another shard it changes there, when that shard takes the notice.
    fn rebind(&mut self, now: UnixMs, mut account: AccountRow, alias: AliasId) {
        let user = account.uuid.clone();
        let old = account.alias_id.clone();
        account.rebind(alias.clone(), now);
        match self.config.shard.elsewhere(&user) {
            Some(shard) => {
                let notice = Notice::Rebind {
                    user: user.clone(),
                    alias: alias.clone(),
                    at: now,
                };
                self.send_notice(now, shard, notice);
            }
            None => {
                self.state.put_account(account);
                self.announce_alias(now, &user, &alias, now);
            }
        }
        self.state.put_alias_row(AliasRow {
            alias: old,
            user: user.clone(),
            fate: AliasFate::Retired,
            at: now,
        });
        self.state.put_alias_row(AliasRow {
            alias,
            user,
            fate: AliasFate::Bound,
            at: now,
        });
    }

    /// A bind the registry shard decided, for `user`, a user of this shard: its account takes
    /// `alias` unless a later bind was applied already. `false`: the account could not be read
    /// (it comes again).
    pub(crate) fn take_rebind(
        &mut self,
        now: UnixMs,
        user: &UserUuid,
        alias: &AliasId,
        at: UnixMs,
    ) -> bool {
        let Ok(account) = self.account(user) else {
            return false;
        };
        let Some(account) = account else {
            return true;
        };
        if account.alias_at >= at || account.alias_id == *alias {
            return true;
        }
        let mut account = AccountRow::clone(&account);
        account.rebind(alias.clone(), at);
        self.state.put_account(account);
        self.announce_alias(now, user, alias, at);
        true
    }

    /// `user`, a user of this shard, took `alias` (bound at `at`): every other shard's copy
    /// of its account takes it too.
    fn announce_alias(&mut self, now: UnixMs, user: &UserUuid, alias: &AliasId, at: UnixMs) {
        let place = self.config.shard;
        for i in 0..place.map().shards() {
            let shard = crate::handoff::ShardId(i);
            if shard != place.me() {
                let notice = Notice::Alias {
                    user: user.clone(),
                    alias: alias.clone(),
                    at,
                    shard,
                };
                self.send_notice(now, shard, notice);
            }
        }
    }
}

/// The refusal of a bind whose order is in `state` (not confirmed).
fn not_confirmed(state: OrderState) -> ApiError {
    let state = match state {
        OrderState::Pending => "pending",
        OrderState::Expired => "expired",
        OrderState::Confirmed => "confirmed",
    };
    ApiError::new(
        ErrorCode::ORDER_NOT_CONFIRMED,
        format!("the order is {state}; only a confirmed order can be bound"),
    )
}
