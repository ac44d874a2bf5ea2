//! The vanity-alias order flow of Jepsen mode: vanity aliases bought by every client from a
//! pool one smaller than the clients (at least two compete for one alias), paid through the
//! payment-processor stand-in on 127.0.0.1,
//! whose webhooks go through the fault proxy, with duplicated and forged copies; some orders
//! are abandoned, and some are "paid" only by a forger signing with the wrong secret. Checked
//! after healing through the public API only:
//!
//! | oracle | what clients and the processor saw |
//! |---|---|
//! | `order-confirmed` | every genuinely paid order is `confirmed` within [`JEPSEN_COMMERCE_MS`] of healing, and its buyer can bind it (the alias becomes theirs) |
//! | `forged-refused` | an order nobody paid genuinely is never `confirmed`; every forged webhook copy is answered 401 |
//! | `alias-unique` | at most one confirmed order per alias; after the binds no two accounts have the same alias |
//! | `unexpected-answer` | a purchase is answered with the order or 409 (the alias is another buyer's); an order's status can be read; any other status, or a body the client cannot read, is quoted |
//!
//! The relay must take the processor's shared secret: the harness passes it to a relay it
//! starts as `{payment_secret}` in the command and as `RELAY_PAYMENT_WEBHOOK_SECRET` in its
//! environment; for `--relay-url`, `--payment-secret` must be the relay's (without one,
//! commerce is not run and says so).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand_chacha::ChaCha20Rng;
use rand_core::Rng as _;
use serde::Serialize;
use serde_json::json;
use wire::http::OrderState;

use super::apps::{App, History};
use crate::violation::{Oracle, Violation};
use client::{Client, ClientError};
use fault_proxy::ports::free_port;
use seam::net::{Endpoint, Tokio};
use standins::{PaymentProcessor, WebhookPlan};

/// After healing (and message delivery), every genuinely paid order must be confirmed and
/// bound within this long.
pub const JEPSEN_COMMERCE_MS: u64 = 30_000;
/// Attempts of a purchase or a bind whose response was lost.
const CALL_ATTEMPTS: u32 = 10;
/// Attempts of one webhook copy (enough to outlast the plan's kills and pauses).
const WEBHOOK_ATTEMPTS: u32 = 60;
/// Pause between webhook attempts and between retried calls.
const RETRY_MS: u64 = 500;

/// How an order was paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Paid {
    /// By the processor, with this many extra identical copies and forged copies.
    Genuine {
        /// Extra identical copies.
        duplicates: u32,
        /// Copies signed with a wrong secret, sent first.
        forged: u32,
    },
    /// Not at all.
    Abandoned,
    /// Only by a forger (wrong secret).
    ForgedOnly,
}

/// An order a client placed.
#[derive(Debug, Clone, Serialize)]
pub struct JepsenOrder {
    /// The buyer (client index).
    pub client: usize,
    /// The order.
    pub order_id: String,
    /// The alias it holds.
    pub alias: String,
    /// Whole USDT.
    pub price: u64,
    /// How it was paid.
    pub paid: Paid,
}

/// Why the order flow could not start (reported as a `setup` violation).
#[derive(Debug, thiserror::Error)]
pub(super) enum StartError {
    /// The featured aliases could not be read.
    #[error("vanity search failed: {0}")]
    Search(ClientError),
    /// The relay sells no alias.
    #[error("the relay lists no vanity alias for sale (GET vanity search with an empty query)")]
    NothingForSale,
    /// A stand-in could not get a port.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The processor, the forger and the orders of one run.
pub(super) struct VanityOrders {
    processor: PaymentProcessor,
    forger: PaymentProcessor,
    servers: Vec<tokio::task::JoinHandle<()>>,
    pool: Vec<String>,
    orders: Arc<Mutex<Vec<JepsenOrder>>>,
    unexpected: Arc<Mutex<Vec<String>>>,
}

impl Drop for VanityOrders {
    fn drop(&mut self) {
        for server in &self.servers {
            server.abort();
        }
    }
}

impl VanityOrders {
    /// Starts the processor (signing with `secret`) and a forger, both sending webhooks to
    /// `relay`, and picks a pool of `clients - 1` aliases (at least one) from the relay's
    /// featured ones.
    pub(super) async fn start(
        secret: &[u8],
        relay: &Endpoint,
        first: &Client<Tokio>,
        clients: usize,
    ) -> Result<Self, StartError> {
        let featured = retried(|| async { first.vanity().search("").await })
            .await
            .map_err(StartError::Search)?;
        let pool: Vec<String> = featured
            .iter()
            .take(clients.saturating_sub(1).max(1))
            .map(|i| i.alias_id.as_str().to_owned())
            .collect();
        if pool.is_empty() {
            return Err(StartError::NothingForSale);
        }
        let processor = PaymentProcessor::new(secret.to_vec(), relay.clone());
        let forger = PaymentProcessor::new(b"a-forger-guess".to_vec(), relay.clone());
        let mut servers = Vec::new();
        for p in [&processor, &forger] {
            let (p, addr) = (p.clone(), free_port()?);
            servers.push(tokio::spawn(async move {
                if let Err(error) = p.run::<Tokio>(addr, std::future::pending()).await {
                    tracing::warn!(%error, "payment stand-in stopped");
                }
            }));
        }
        Ok(Self {
            processor,
            forger,
            servers,
            pool,
            orders: Arc::default(),
            unexpected: Arc::default(),
        })
    }

    /// The aliases the clients compete for.
    pub(super) fn pool(&self) -> &[String] {
        &self.pool
    }

    /// The orders placed so far.
    pub(super) fn orders(&self) -> Vec<JepsenOrder> {
        self.orders
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Client `me` buys an alias of the pool and pays for it as `rng` says.
    pub(super) async fn buy(
        &self,
        me: usize,
        client: &Client<Tokio>,
        rng: &mut ChaCha20Rng,
        history: &History,
    ) {
        let alias = self.pool[rng.next_u32() as usize % self.pool.len()].clone();
        let order = match retried(|| async { client.vanity().purchase(&alias).await }).await {
            Ok(order) => order,
            Err(e) => {
                // Taken by another client (409) is part of the scenario; no answer at all is
                // the faults'; anything else is quoted.
                history.push(
                    Some(me),
                    json!({"purchase": alias, "refused": e.to_string()}),
                );
                if !matches!(e, ClientError::Status(409, _)) && !transient(&e) {
                    self.unexpected
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(format!("client {me}'s purchase of {alias} (V2): {e}"));
                }
                return;
            }
        };
        let price = order.price_usdt;
        let paid = match rng.next_u32() % 10 {
            0..=6 => Paid::Genuine {
                duplicates: rng.next_u32() % 3,
                forged: rng.next_u32() % 2,
            },
            7 => Paid::Abandoned,
            _ => Paid::ForgedOnly,
        };
        let plan = WebhookPlan {
            max_attempts: WEBHOOK_ATTEMPTS,
            retry_delay_ms: RETRY_MS,
            delay_ms: rng.next_u64() % 2_000,
            duplicate_spacing_ms: 200 + rng.next_u64() % 1_500,
            ..WebhookPlan::paid(price)
        };
        let id = order.order_id.clone();
        let paid_at = match paid {
            Paid::Genuine { duplicates, forged } => self
                .processor
                .pay(
                    id,
                    WebhookPlan {
                        duplicates,
                        forged,
                        ..plan
                    },
                )
                .map(Some),
            Paid::ForgedOnly => self.forger.pay(id, plan).map(Some),
            Paid::Abandoned => Ok(None),
        };
        if let Err(e) = paid_at {
            history.push(Some(me), json!({"pay_failed": e.to_string()}));
            return;
        }
        let rec = JepsenOrder {
            client: me,
            order_id: order.order_id.as_str().to_owned(),
            alias,
            price,
            paid,
        };
        history.push(Some(me), json!({"order": rec}));
        self.orders
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(rec);
    }

    /// The commerce oracles, after healing: polls the orders, binds the paid ones, checks.
    pub(super) async fn check(
        &self,
        apps: &[App],
        history: &History,
        violations: &mut Vec<String>,
    ) {
        let orders = self.orders();
        let (states, errors) = poll_states(&orders, apps, history).await;
        for (o, e) in orders.iter().zip(&errors) {
            if let Some(e) = e {
                violations.push(violation(
                    Oracle::UnexpectedAnswer,
                    format!(
                        "the status of order {} (V5) could not be read: {e}",
                        o.order_id
                    ),
                ));
            }
        }
        for what in self
            .unexpected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            violations.push(violation(Oracle::UnexpectedAnswer, what.clone()));
        }
        let mut confirmed_per_alias: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (o, state) in orders.iter().zip(&states) {
            history.push(
                Some(o.client),
                json!({"order_state": o.order_id, "state": format!("{state:?}")}),
            );
            if *state == Some(OrderState::Confirmed) {
                confirmed_per_alias
                    .entry(o.alias.as_str())
                    .or_default()
                    .push(o.order_id.as_str());
            }
            if !is_genuine(o) {
                if *state == Some(OrderState::Confirmed) {
                    violations.push(violation(
                        Oracle::ForgedRefused,
                        format!(
                            "order {} (alias {}) is confirmed although nobody paid it genuinely ({:?})",
                            o.order_id, o.alias, o.paid
                        ),
                    ));
                }
            } else if *state == Some(OrderState::Confirmed) {
                self.bind(o, &apps[o.client].client, history, violations)
                    .await;
            } else {
                let now = state.map_or_else(
                    || "of a status that could not be read (see unexpected-answer)".to_owned(),
                    |s| format!("`{}`", format!("{s:?}").to_lowercase()),
                );
                violations.push(violation(
                    Oracle::OrderConfirmed,
                    format!(
                        "order {} (alias {}, client {}) was paid ({:?}) but is {now} {JEPSEN_COMMERCE_MS} ms after healing",
                        o.order_id, o.alias, o.client, o.paid
                    ),
                ));
            }
        }
        for (alias, ids) in &confirmed_per_alias {
            if ids.len() > 1 {
                violations.push(violation(
                    Oracle::AliasUnique,
                    format!("alias {alias} was sold twice: confirmed orders {ids:?}"),
                ));
            }
        }
        one_owner_per_alias(apps, violations).await;
        self.forged_refused(violations);
    }

    /// Every webhook signed with a wrong secret (the forger's, and the processor's forged
    /// copies) was answered 401.
    fn forged_refused(&self, violations: &mut Vec<String>) {
        for d in self
            .forger
            .deliveries()
            .iter()
            .chain(self.processor.deliveries().iter().filter(|d| d.forged))
        {
            if let Some(status) = d.status
                && status != 401
            {
                violations.push(violation(
                    Oracle::ForgedRefused,
                    format!(
                        "a webhook for order {} signed with a wrong secret was answered {status}, not 401",
                        d.order_id
                    ),
                ));
            }
        }
    }

    /// The buyer of a confirmed order binds it: the alias must become theirs.
    async fn bind(
        &self,
        o: &JepsenOrder,
        client: &Client<Tokio>,
        history: &History,
        violations: &mut Vec<String>,
    ) {
        match retried(|| async { client.vanity().bind(&o.order_id).await }).await {
            Ok(bound) if bound.alias_id.as_str() == o.alias => {
                history.push(Some(o.client), json!({"bound": o.alias}));
            }
            other => violations.push(violation(
                Oracle::OrderConfirmed,
                format!(
                    "client {} could not bind its confirmed order {} for {}: {:?}",
                    o.client,
                    o.order_id,
                    o.alias,
                    other.map(|b| b.alias_id)
                ),
            )),
        }
    }
}

/// The V5 state of every order, and the last answer that could not be read when none
/// could: polled until every genuinely paid order is confirmed (or [`JEPSEN_COMMERCE_MS`]
/// passed); the others are read along.
async fn poll_states(
    orders: &[JepsenOrder],
    apps: &[App],
    history: &History,
) -> (Vec<Option<OrderState>>, Vec<Option<String>>) {
    let deadline = history.now() + JEPSEN_COMMERCE_MS;
    let mut states: Vec<Option<OrderState>> = vec![None; orders.len()];
    let mut errors: Vec<Option<String>> = vec![None; orders.len()];
    loop {
        for ((o, state), error) in orders.iter().zip(states.iter_mut()).zip(errors.iter_mut()) {
            if *state == Some(OrderState::Confirmed) {
                continue;
            }
            match apps[o.client]
                .client
                .vanity()
                .order_status(&o.order_id)
                .await
            {
                Ok(s) => {
                    *state = Some(s.status);
                    *error = None;
                }
                Err(e) if transient(&e) => {}
                Err(e) => *error = state.is_none().then(|| e.to_string()),
            }
        }
        let waiting = orders
            .iter()
            .zip(&states)
            .any(|(o, s)| is_genuine(o) && *s != Some(OrderState::Confirmed));
        if !waiting || history.now() >= deadline {
            return (states, errors);
        }
        tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
    }
}

/// After the binds, no two accounts have the same alias.
async fn one_owner_per_alias(apps: &[App], violations: &mut Vec<String>) {
    let mut owners: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, app) in apps.iter().enumerate() {
        if let Ok(Some(alias)) = app.client.alias_id().await {
            owners.entry(alias).or_default().push(i);
        }
    }
    for (alias, clients) in owners.iter().filter(|(_, c)| c.len() > 1) {
        violations.push(violation(
            Oracle::AliasUnique,
            format!("clients {clients:?} all have alias {alias}"),
        ));
    }
}

/// A violation as the report's text.
fn violation(oracle: Oracle, detail: String) -> String {
    Violation::new(oracle, detail).to_string()
}

fn is_genuine(o: &JepsenOrder) -> bool {
    matches!(o.paid, Paid::Genuine { .. })
}

/// A call that got no answer (worth repeating: the relay returns the same order or bind).
fn transient(e: &ClientError) -> bool {
    matches!(e, ClientError::Transport(_) | ClientError::NotAuthenticated)
        || matches!(e, ClientError::Status(s, _) if *s >= 500)
}

/// `call` until it gets an answer (a success, or a refusal that is not [`transient`]), at most
/// [`CALL_ATTEMPTS`] times, [`RETRY_MS`] apart.
async fn retried<T, F, Fut>(call: F) -> Result<T, ClientError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let mut answer = call().await;
    for _ in 1..CALL_ATTEMPTS {
        match &answer {
            Err(e) if transient(e) => {
                tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
                answer = call().await;
            }
            _ => break,
        }
    }
    answer
}

/// The secret a run's relay and processor share, from the seed (not a real secret: the relay
/// is the harness's own throwaway process).
pub(super) fn run_secret(seed: u64) -> String {
    format!("jepsen-webhook-secret-{seed:016x}")
}
