//! Commerce helpers: vanity aliases and channels for the cases that buy, bind and sell.
//!
//! * [`Ctx::free_alias`] hands each case of a run a different alias for sale: the first call
//!   collects the relay's whole vanity inventory (every search prefix) into the run's shared
//!   pool, later calls take from it. An exhausted pool skips the case.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use wire::http::paths;

use super::Ctx;
use super::accounts::Account;
use super::requests::{Resp, s};
use crate::verdict::Failure;

impl Ctx {
    /// A vanity alias for sale that no other case of this run was handed (a setup step).
    pub async fn free_alias(&mut self) -> Result<Value, Failure> {
        self.free_alias_unchecked()
            .await
            .map_err(|f| f.in_setup("finding a vanity alias for sale (V1)"))
    }

    async fn free_alias_unchecked(&mut self) -> Result<Value, Failure> {
        let shared = Arc::clone(&self.shared);
        let mut pool = shared.alias_pool.lock().await;
        if pool.is_none() {
            let mut all: BTreeMap<String, Value> = BTreeMap::new();
            let mut queries = vec![String::new()];
            queries.extend(
                (b'0'..=b'9')
                    .chain(b'a'..=b'z')
                    .map(|c| char::from(c).to_string()),
            );
            for q in queries {
                let path = if q.is_empty() {
                    paths::VANITY_SEARCH.to_owned()
                } else {
                    format!("{}?q={q}", paths::VANITY_SEARCH)
                };
                let list = self.get(&path, None).await?.ok()?;
                for item in list.as_array().into_iter().flatten() {
                    if let Some(a) = item.get("alias_id").and_then(Value::as_str) {
                        all.insert(a.to_owned(), item.clone());
                    }
                }
            }
            *pool = Some(all.into_values().rev().collect());
        }
        pool.as_mut().and_then(VecDeque::pop_front).ok_or_else(|| {
            Failure::Skip("the relay's vanity inventory is exhausted for this run".into())
        })
    }

    /// Creates a channel owned by `owner`; returns its id (a setup step).
    pub async fn create_channel(
        &mut self,
        owner: &Account,
        public: bool,
    ) -> Result<String, Failure> {
        let name = format!("conf {}", self.word());
        async {
            let v = self
                .post(
                    paths::CHANNELS,
                    Some(&owner.token),
                    &json!({"name": name, "description": "conformance", "is_public": public}),
                )
                .await?
                .ok()?;
            Ok(s(&v, "channel_id")?.to_owned())
        }
        .await
        .map_err(|f: Failure| f.in_setup("creating a channel (CH4)"))
    }

    /// Lists `channel` for sale at `price` by `owner` (web/Android path).
    pub async fn list_for_sale(
        &mut self,
        owner: &Account,
        channel: &str,
        price: u64,
    ) -> Result<Resp, Failure> {
        self.post(
            paths::LIST_CHANNEL,
            Some(&owner.token),
            &json!({"channel_id": channel, "price_usdt": price}),
        )
        .await
    }
}
