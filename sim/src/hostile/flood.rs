//! A flood of malformed frames: every one must be answered with an error frame, unless the
//! relay closed the socket with a close code.

use std::cell::RefCell;
use std::rc::Rc;

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};

use super::Findings;
use super::http::{RawAccount, field};
use super::ws::{op, open_ws, ws_query};
use crate::time::{sim_ms, sleep_ms};
use crate::violation::{Oracle, Violation};
use crate::world::HostCtx;

/// How long a flood waits for the answers to its last frames.
const FLOOD_ANSWER_WAIT_MS: u64 = 10_000;
/// Text frames between `MAX_FRAME_BYTES` and the WebSocket library's hard limit get an error
/// frame `FRAME_TOO_LARGE`; this one is in between.
const OVERSIZE_FRAME_BYTES: usize = wire::limits::MAX_FRAME_BYTES + 6 * 1024;

/// Malformed frames as fast as the link takes them; every one must be answered with an error
/// frame, unless the relay closed the socket with a close code.
pub(super) async fn flood(ctx: &HostCtx, account: &RawAccount, frames: u32, roll: u64) -> Findings {
    let mut found = Findings::new();
    let started = sim_ms();
    let Ok(Ok((mut reader, mut writer))) = open_ws(&ws_query(account)).await else {
        return found;
    };
    let mut rng = ChaCha20Rng::seed_from_u64(roll);
    let counter = Rc::new(RefCell::new(FloodSeen::default()));
    let seen = Rc::clone(&counter);
    let read = tokio::task::spawn_local(async move {
        loop {
            let frame = match reader.next().await {
                Ok(Some(frame)) => frame,
                Ok(None) => {
                    seen.borrow_mut().end = Some((sim_ms(), None));
                    break;
                }
                Err(e) => {
                    seen.borrow_mut().end = Some((sim_ms(), Some(e.kind())));
                    break;
                }
            };
            let mut s = seen.borrow_mut();
            if let Some(code) = frame.close_code() {
                s.close = Some(code);
                break;
            }
            if frame.opcode == op::CLOSE {
                s.close = Some(0);
                break;
            }
            if frame
                .json()
                .is_some_and(|v| field(&v, "type").as_deref() == Some("error"))
            {
                s.errors += 1;
            }
        }
        seen.borrow_mut().ended = true;
    });
    let mut expected = 0u64;
    for i in 0..frames {
        let (opcode, payload, answered) = bad_frame(&mut rng, i);
        if !writer.send(opcode, &payload).await {
            break;
        }
        expected += u64::from(answered);
        if counter.borrow().ended {
            break;
        }
    }
    let until = sim_ms() + FLOOD_ANSWER_WAIT_MS;
    while sim_ms() < until && counter.borrow().errors < expected && !counter.borrow().ended {
        sleep_ms(100).await;
    }
    let s = *counter.borrow();
    // A relay that powered off meanwhile took the socket with it, unanswered frames and all
    // (and turmoil tells no one: the socket looks open).
    let relay_died = ctx
        .world
        .borrow()
        .relay_off_ms
        .iter()
        .any(|t| (started..=sim_ms()).contains(t));
    if s.errors < expected && s.close.is_none() && !relay_died {
        found.push(Violation::new(
            Oracle::BadInput,
            format!(
                "{} of {expected} malformed frames got no error frame and the socket was not closed with a code ({})",
                expected - s.errors,
                match s.end {
                Some((at, None)) => format!("it ended silently: end of stream at {at} ms"),
                Some((at, Some(kind))) => format!("it ended silently: read failed ({kind}) at {at} ms"),
                None if s.ended => "it ended silently".to_owned(),
                None => "it is still open".to_owned(),
            }
            ),
        ));
    }
    read.abort();
    found
}

#[derive(Debug, Default, Clone, Copy)]
struct FloodSeen {
    errors: u64,
    close: Option<u16>,
    ended: bool,
    /// When the stream ended without a Close frame, and the read error if it failed.
    end: Option<(u64, Option<std::io::ErrorKind>)>,
}

/// One malformed frame: `(opcode, payload, whether an error frame must answer it)`.
fn bad_frame(rng: &mut ChaCha20Rng, i: u32) -> (u8, Vec<u8>, bool) {
    match rng.next_u32() % 10 {
        0 => (op::TEXT, b"{not json".to_vec(), true),
        1 => (op::TEXT, b"[1,2,3]".to_vec(), true),
        2 => (op::TEXT, br#"{"type":"msg"}"#.to_vec(), true),
        3 => (
            op::TEXT,
            format!(r#"{{"type":"msg","id":{i},"to":[],"conv_id":null,"payload":7}}"#).into_bytes(),
            true,
        ),
        4 => (
            op::TEXT,
            br#"{"type":"delivered","conv_id":"c","seq":"x"}"#.to_vec(),
            true,
        ),
        5 => {
            let big = "A".repeat(OVERSIZE_FRAME_BYTES);
            (
                op::TEXT,
                format!(r#"{{"type":"ping","pad":"{big}"}}"#).into_bytes(),
                true,
            )
        }
        6 => (op::BINARY, vec![0xff, 0x00, 0x13, 0x37], true),
        7 => (op::PING, b"hi".to_vec(), false),
        // Well-formed, of a type no client may send (a server frame's, then a made-up one).
        8 => {
            let t = if i.is_multiple_of(2) {
                "ack"
            } else {
                "subscribe_all"
            };
            (op::TEXT, format!(r#"{{"type":"{t}"}}"#).into_bytes(), true)
        }
        _ => (op::TEXT, br#"{"type":"typing"}"#.to_vec(), true),
    }
}
