//! A storm of sockets: many at once, in waves turmoil's accept queue takes.

use std::net::SocketAddr;

use turmoil::net::TcpStream;

use super::Findings;
use super::http::RawAccount;
use super::ws::{open_ws, ws_query};
use crate::bounds::{RELAY, RELAY_PORT, STORM_WAVE, STORM_WAVE_MS};
use crate::time::sleep_ms;
use crate::violation::{Oracle, Violation};

/// Many sockets at once (in waves turmoil's accept queue takes): a third authenticated (the
/// same account, so each kicks the previous one), a third with a bad token (must be refused),
/// a third silent TCP connections.
pub(super) async fn storm(account: &RawAccount, sockets: u32, hold_ms: u64) -> Findings {
    let mut found = Findings::new();
    let mut held = Vec::new();
    let mut silent = Vec::new();
    for i in 0..sockets {
        if i > 0 && (i as usize).is_multiple_of(STORM_WAVE) {
            sleep_ms(STORM_WAVE_MS).await;
        }
        match i % 3 {
            0 => {
                if let Ok(Ok(ws)) = open_ws(&ws_query(account)).await {
                    held.push(ws);
                }
            }
            1 => {
                let query = format!("user_uuid={}&token=forged.{i}.token", account.uuid);
                if let Ok(Ok(ws)) = open_ws(&query).await {
                    found.push(Violation::new(
                        Oracle::Authz,
                        "relay upgraded a WebSocket with a forged token".to_owned(),
                    ));
                    held.push(ws);
                }
            }
            _ => {
                if let Ok(s) =
                    TcpStream::connect(SocketAddr::from((turmoil::lookup(RELAY), RELAY_PORT))).await
                {
                    silent.push(s);
                }
            }
        }
    }
    sleep_ms(hold_ms).await;
    drop(held);
    drop(silent);
    found
}
