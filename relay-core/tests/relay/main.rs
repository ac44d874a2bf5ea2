//! Tier-1 tests: the relay driven in memory under a virtual clock (no sockets, no sleeps),
//! tier-2 proptest against a naive model, and durability across a simulated crash.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::needless_pass_by_value
)]

mod abuse;
mod account_edges;
mod backlog;
mod blob_store;
mod bounds;
mod calls;
mod channel_bounds;
mod channels;
mod confirm_redelivery;
mod credentials;
mod destination_rules;
mod durability;
mod group_commit;
mod hardening;
mod http;
mod http_surface;
mod lazy_accounts;
mod lazy_queues;
mod lazy_relations;
mod limit_values;
mod media;
mod media_edges;
mod message_edges;
mod message_expiry;
mod messaging;
mod model;
mod model_shards;
mod orders;
mod paged_sync;
mod pricing_rules;
mod push;
mod push_edges;
mod push_gone;
mod rate_windows;
mod read_ahead;
mod redaction;
mod refunds;
mod relay_api;
mod relay_restart;
mod shard_friends;
mod shard_registry;
mod shard_start;
mod shards;
mod state_rows;
mod stores;
mod tokens;
mod vanity;
mod webhook_reports;
mod world;
