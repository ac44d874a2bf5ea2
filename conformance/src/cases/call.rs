//! CALL: ICE configuration and transparent call signalling (SPEC §What the service does 10,
//! §Events call signalling; PROTOCOL §1.8 K1, §3.3-3.6).

use client_core::crypto::signal::{NonceCache, SignalEnvelope, open_signal, seal_signal};
use serde_json::{Map, Value, json};
use wire::http::paths;

use super::online;
use crate::ctx::{Ctx, Kind, Pair, fields, s};
use crate::model::{Case, CaseResult, Failure};
use crate::{case, ensure};

/// The senders' clock for signal timestamps (the relay never sees it: it is inside the ciphertext).
const SIGNAL_NOW_MS: u64 = 1_767_225_600_000;

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "CALL-001",
        Must,
        "PROTOCOL §1.8 K1",
        "GET /api/v1/calls/ice-config returns `{ttl, ice_transport_policy, ice_servers: [{urls: [..]}]}`.",
        [],
        ice_config
    ),
    case!(
        "CALL-002",
        Must,
        "PROTOCOL §1.8 K1",
        "GET /api/v1/calls/ice-config?mode=relay answers ice_transport_policy `relay`.",
        [],
        ice_relay
    ),
    case!(
        "CALL-003",
        Must,
        "SPEC §Events call signalling; PROTOCOL §3.3",
        "`call_offer` is relayed to `to` with call_id, crypto_v 2 and the payload byte for byte; the callee opens and verifies the signed inner object.",
        [],
        offer
    ),
    case!(
        "CALL-004",
        Must,
        "PROTOCOL §3.3",
        "`call_answer` is relayed back to the caller.",
        [],
        answer
    ),
    case!(
        "CALL-005",
        Must,
        "PROTOCOL §3.3",
        "`call_ice` is relayed.",
        [],
        ice
    ),
    case!(
        "CALL-006",
        Must,
        "PROTOCOL §3.3",
        "`call_reject` is relayed.",
        [],
        reject
    ),
    case!(
        "CALL-007",
        Must,
        "PROTOCOL §3.3",
        "`call_hangup` is relayed.",
        [],
        hangup
    ),
    case!(
        "CALL-008",
        Should,
        "PROTOCOL §3.1, §3.4 (Android)",
        "`call_invite` is relayed.",
        [],
        invite
    ),
    case!(
        "CALL-009",
        Must,
        "PROTOCOL §3.3",
        "The relay overwrites `from` with the authenticated sender (a forged `from` never reaches the peer).",
        [],
        forged_from
    ),
    case!(
        "CALL-010",
        Should,
        "PROTOCOL §3.3 (relay drops frames with empty call_id)",
        "A call signal without call_id is refused and not relayed.",
        [],
        missing_call_id
    ),
    case!(
        "CALL-011",
        Should,
        "PROTOCOL §3.3 (relayed transparently); ARCHITECTURE wire: PEER_OFFLINE",
        "A call signal for an offline peer is never stored for later (our relay answers error PEER_OFFLINE).",
        [],
        offline_peer
    ),
    case!(
        "CALL-012",
        Should,
        "SPEC §What the service does 5, 10; ARCHITECTURE (only contacts call each other)",
        "Call signals between non-contacts are not relayed (our relay also answers an error frame).",
        [],
        non_contacts
    ),
];

fn signal(
    ctx: &mut Ctx,
    p: &Pair,
    kind: &str,
    call_id: &str,
    extra: &[(&str, Value)],
) -> Result<Value, Failure> {
    let mut fields = Map::new();
    fields.insert("type".into(), Value::from(kind));
    fields.insert("call_id".into(), Value::from(call_id));
    fields.insert("from".into(), Value::from(p.a.alias.as_str()));
    for (k, v) in extra {
        fields.insert((*k).to_owned(), v.clone());
    }
    let signing = p.a.identity.signing_key.clone();
    let payload = seal_signal(&p.key, &signing, fields, SIGNAL_NOW_MS, ctx.rng())
        .map_err(|e| Failure::Fail(format!("sealing: {e}")))?;
    Ok(
        json!({"type": kind, "to": p.b.alias, "call_id": call_id, "from": p.a.alias, "crypto_v": 2, "payload": payload}),
    )
}

async fn relayed(ctx: &mut Ctx, kind: &str, extra: &[(&str, Value)]) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let call_id = ctx.uuid();
    let f = signal(ctx, &p, kind, &call_id, extra)?;
    wa.send(&f).await?;
    let got = wb.expect(kind).await?;
    ensure!(s(&got, "call_id")? == call_id, "call_id changed: {got}");
    ensure!(s(&got, "from")? == p.a.alias, "from is {}", got["from"]);
    ensure!(got["payload"] == f["payload"], "payload changed in transit");
    ensure!(
        got.get("crypto_v") == Some(&json!(2)),
        "crypto_v is {:?}",
        got.get("crypto_v")
    );
    let env = SignalEnvelope {
        frame_type: kind,
        from: &p.a.alias,
        call_id: &call_id,
    };
    let peer = p.a.identity.signing_key.public_key();
    open_signal(
        &p.key,
        s(&got, "payload")?,
        env,
        Some(&peer),
        SIGNAL_NOW_MS,
        &mut NonceCache::new(),
    )
    .map_err(|e| Failure::Fail(format!("the callee cannot open the relayed signal: {e}")))?;
    Ok(())
}

async fn ice_config(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let v = ctx.get(paths::ICE_CONFIG, Some(&a.token)).await?.ok()?;
    fields(
        "K1",
        &v,
        &[
            ("ttl", Kind::Uint),
            ("ice_transport_policy", Kind::NonEmpty),
            ("ice_servers", Kind::Arr),
        ],
    )?;
    for srv in v["ice_servers"].as_array().into_iter().flatten() {
        fields("ice server", srv, &[("urls", Kind::Arr)])?;
    }
    Ok(())
}

async fn ice_relay(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let v = ctx
        .get(&format!("{}?mode=relay", paths::ICE_CONFIG), Some(&a.token))
        .await?
        .ok()?;
    ensure!(
        v["ice_transport_policy"] == "relay",
        "policy is {}",
        v["ice_transport_policy"]
    );
    Ok(())
}

async fn offer(ctx: &mut Ctx) -> CaseResult {
    relayed(
        ctx,
        "call_offer",
        &[
            (
                "sdp",
                Value::from(
                    "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n",
                ),
            ),
            ("sdp_type", Value::from("offer")),
        ],
    )
    .await
}

async fn answer(ctx: &mut Ctx) -> CaseResult {
    relayed(
        ctx,
        "call_answer",
        &[
            ("sdp", Value::from("v=0\r\n")),
            ("sdp_type", Value::from("answer")),
        ],
    )
    .await
}

async fn ice(ctx: &mut Ctx) -> CaseResult {
    relayed(ctx, "call_ice", &[("candidate", json!({"candidate": "candidate:1 1 udp 2122260223 192.0.2.1 54400 typ host", "sdpMid": "0", "sdpMLineIndex": 0}))]).await
}

async fn reject(ctx: &mut Ctx) -> CaseResult {
    relayed(ctx, "call_reject", &[]).await
}

async fn hangup(ctx: &mut Ctx) -> CaseResult {
    relayed(ctx, "call_hangup", &[]).await
}

async fn invite(ctx: &mut Ctx) -> CaseResult {
    relayed(ctx, "call_invite", &[("mode", Value::from("audio"))]).await
}

async fn forged_from(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let call_id = ctx.uuid();
    let mut f = signal(ctx, &p, "call_hangup", &call_id, &[])?;
    f["from"] = Value::from("someone_else");
    wa.send(&f).await?;
    let got = wb.expect("call_hangup").await?;
    ensure!(
        s(&got, "from")? == p.a.alias,
        "forged from reached the peer: {}",
        got["from"]
    );
    Ok(())
}

async fn missing_call_id(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let call_id = ctx.uuid();
    let mut f = signal(ctx, &p, "call_hangup", &call_id, &[])?;
    if let Some(o) = f.as_object_mut() {
        o.remove("call_id");
    }
    let refusal = wa.refuses(&f).await?;
    wb.expect_none("call_hangup").await?;
    refusal.in_our_words(None)
}

async fn offline_peer(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let call_id = ctx.uuid();
    let f = signal(
        ctx,
        &p,
        "call_offer",
        &call_id,
        &[
            ("sdp", Value::from("v=0")),
            ("sdp_type", Value::from("offer")),
        ],
    )?;
    let refusal = wa.refuses(&f).await?;
    let mut wb = ctx.connect(&p.b, "B").await?;
    wb.expect_none("call_offer").await?;
    refusal.in_our_words(Some("PEER_OFFLINE"))
}

async fn non_contacts(ctx: &mut Ctx) -> CaseResult {
    let a = ctx.account().await?;
    let c = ctx.account().await?;
    let mut wa = ctx.connect(&a, "A").await?;
    let mut wc = ctx.connect(&c, "C").await?;
    let call_id = ctx.uuid();
    let f = json!({"type": "call_offer", "to": c.alias, "call_id": call_id, "from": a.alias, "crypto_v": 2, "payload": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="});
    let refusal = wa.refuses(&f).await?;
    wc.expect_none("call_offer").await?;
    refusal.in_our_words(None)
}
