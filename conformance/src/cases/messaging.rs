//! MSG: messages, exactly-once, offline sync, typing (SPEC §What the service does 4, §Wire
//! envelope, §Events; PROTOCOL §3.1-3.2, §9; ARCHITECTURE "One message, end to end").

use serde_json::json;

use super::online;
use crate::ctx::{Ctx, Kind, fields, s, u};
use crate::model::{Case, CaseResult};
use crate::{case, ensure};

/// Cases of this area.
pub const CASES: &[Case] = &[
    case!(
        "MSG-001",
        Must,
        "PROTOCOL §3.1-3.2, §9",
        "A `msg` `{id, to, conv_id, crypto_v, payload}` is answered with `ack {id, seq}` (seq an integer).",
        [],
        ack
    ),
    case!(
        "MSG-002",
        Must,
        "PROTOCOL §3.2, §9",
        "An online recipient gets `msg {id, from, conv_id, seq, at, payload}` with the sender's id, the ack's seq and the payload unchanged.",
        [],
        delivery_shape
    ),
    case!(
        "MSG-003",
        Must,
        "SPEC §What the service does 4; PROTOCOL §9",
        "`seq` increases monotonically per conversation.",
        [],
        seq_monotonic
    ),
    case!(
        "MSG-004",
        Must,
        "PROTOCOL §9",
        "A duplicate message id is answered with the same ack seq and delivered only once.",
        [],
        duplicate_id
    ),
    case!(
        "MSG-005",
        Must,
        "SPEC §What the service does 4; PROTOCOL §2.2, §9",
        "Messages for an offline recipient are kept and replayed as `msg` frames after it connects and sends `sync`.",
        [],
        offline_sync
    ),
    case!(
        "MSG-006",
        Must,
        "PROTOCOL §9",
        "An undelivered message (no `delivered` receipt) is replayed again on the next connection.",
        [],
        replay_until_delivered
    ),
    case!(
        "MSG-007",
        Must,
        "PROTOCOL §9",
        "After a `delivered` receipt up to its seq, a message is not replayed again.",
        [],
        no_replay_after_delivered
    ),
    case!(
        "MSG-008",
        Must,
        "PROTOCOL §9",
        "Several offline messages are replayed in seq order.",
        [],
        replay_order
    ),
    case!(
        "MSG-009",
        Must,
        "SPEC §What the service does 4",
        "Both members' messages share the conversation's seq sequence.",
        [],
        shared_seq
    ),
    case!(
        "MSG-010",
        Must,
        "PROTOCOL §3.2, §0",
        "`at` of a delivered message is epoch milliseconds.",
        [],
        at_epoch_ms
    ),
    case!(
        "MSG-011",
        Should,
        "ARCHITECTURE wire: server msg",
        "`crypto_v` of the sender is echoed to the recipient.",
        [],
        crypto_v_echo
    ),
    case!(
        "MSG-012",
        Must,
        "PROTOCOL §9",
        "A `msg` without `crypto_v` (iOS) is accepted.",
        [],
        no_crypto_v
    ),
    case!(
        "MSG-013",
        Must,
        "PROTOCOL §9 (TS re-sends on reconnect)",
        "A message re-sent with the same id on a new connection gets the same seq and is not delivered twice.",
        [],
        resend_after_reconnect
    ),
    case!(
        "MSG-014",
        Should,
        "SPEC §Limits (message size limits: not shown); wire::limits MAX_MSG_PAYLOAD_BYTES",
        "A payload above the relay's limit (--max-payload-bytes; our relay: 48 KiB) is refused (no ack; our relay: an `error` frame naming the id) and is not delivered.",
        [],
        payload_too_large
    ),
    case!(
        "MSG-015",
        Must,
        "SPEC §Events typing; PROTOCOL §3.1-3.2",
        "`typing {to, conv_id}` reaches the online peer as `typing {from, conv_id}`.",
        [],
        typing
    ),
    case!(
        "MSG-016",
        Should,
        "PROTOCOL §3.1 typing",
        "Typing notices are ephemeral: an offline peer does not get them after sync.",
        [],
        typing_not_stored
    ),
    case!(
        "MSG-017",
        Should,
        "ARCHITECTURE One message step 3",
        "A `msg` whose `to` is not the conversation's other member is refused (no ack) and not delivered.",
        [],
        wrong_to
    ),
    case!(
        "MSG-018",
        Must,
        "PROTOCOL §2.2",
        "A message sent while the recipient is online but before it synced still arrives exactly once.",
        [],
        send_before_sync
    ),
];

async fn ack(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, _wb) = online(ctx).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "hello");
    let a = wa.send_msg(&id, &m).await?;
    fields("ack", &a, &[("id", Kind::NonEmpty), ("seq", Kind::Uint)])
}

async fn delivery_shape(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "shape");
    let a = wa.send_msg(&id, &m).await?;
    let d = wb.expect("msg").await?;
    fields(
        "delivered msg",
        &d,
        &[
            ("id", Kind::NonEmpty),
            ("from", Kind::NonEmpty),
            ("conv_id", Kind::NonEmpty),
            ("seq", Kind::Uint),
            ("at", Kind::Uint),
            ("payload", Kind::NonEmpty),
        ],
    )?;
    ensure!(s(&d, "id")? == id, "delivered id differs");
    ensure!(s(&d, "from")? == p.a.alias, "from is not the sender");
    ensure!(s(&d, "conv_id")? == p.conv, "conv_id differs");
    ensure!(
        u(&d, "seq")? == u(&a, "seq")?,
        "delivered seq {} != ack seq {}",
        d["seq"],
        a["seq"]
    );
    ensure!(d["payload"] == m["payload"], "payload changed in transit");
    Ok(())
}

async fn seq_monotonic(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, _wb) = online(ctx).await?;
    let mut last = None;
    for i in 0..4 {
        let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, &format!("n{i}"));
        let seq = u(&wa.send_msg(&id, &m).await?, "seq")?;
        if let Some(prev) = last {
            ensure!(seq > prev, "seq {seq} after {prev}");
        }
        last = Some(seq);
    }
    Ok(())
}

async fn duplicate_id(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "once");
    let first = u(&wa.send_msg(&id, &m).await?, "seq")?;
    let second = u(&wa.send_msg(&id, &m).await?, "seq")?;
    ensure!(
        first == second,
        "duplicate id acked with seq {second}, first was {first}"
    );
    let wanted = id.clone();
    wb.expect_where("msg", |v| v["id"] == wanted.as_str())
        .await?;
    wb.expect_none_where("msg", |v| v["id"] == id.as_str())
        .await
}

async fn offline_sync(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "while you were away");
    wa.send_msg(&id, &m).await?;
    let mut wb = ctx.connect(&p.b, "B").await?;
    let d = wb.expect("msg").await?;
    ensure!(
        s(&d, "id")? == id && d["payload"] == m["payload"],
        "replayed frame differs: {d}"
    );
    ensure!(
        Ctx::decrypt(&p.key, s(&d, "payload")?)? == "while you were away",
        "replayed payload decrypts to something else"
    );
    Ok(())
}

async fn replay_until_delivered(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "again");
    wa.send_msg(&id, &m).await?;
    {
        let mut wb = ctx.connect(&p.b, "B1").await?;
        wb.expect("msg").await?;
    }
    let mut wb2 = ctx.connect(&p.b, "B2").await?;
    let d = wb2.expect("msg").await?;
    ensure!(
        s(&d, "id")? == id,
        "the unreceipted message was not replayed"
    );
    Ok(())
}

async fn no_replay_after_delivered(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "receipted");
    wa.send_msg(&id, &m).await?;
    {
        let mut wb = ctx.connect(&p.b, "B1").await?;
        let d = wb.expect("msg").await?;
        wb.send(&json!({"type": "delivered", "conv_id": p.conv, "seq": d["seq"], "to": p.a.alias, "crypto_v": 1})).await?;
        wa.expect("delivered").await?;
    }
    let mut wb2 = ctx.connect(&p.b, "B2").await?;
    wb2.expect_none("msg").await
}

async fn replay_order(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let mut ids = Vec::new();
    for i in 0..3 {
        let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, &format!("o{i}"));
        wa.send_msg(&id, &m).await?;
        ids.push(id);
    }
    let mut wb = ctx.connect(&p.b, "B").await?;
    let mut last = 0;
    for id in &ids {
        let d = wb.expect("msg").await?;
        ensure!(
            s(&d, "id")? == id,
            "replay order: expected {id}, got {}",
            d["id"]
        );
        let seq = u(&d, "seq")?;
        ensure!(seq > last, "replayed seq {seq} not increasing");
        last = seq;
    }
    Ok(())
}

async fn shared_seq(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let (id1, m1) = ctx.msg(&p.key, &p.b, &p.conv, "from a");
    let s1 = u(&wa.send_msg(&id1, &m1).await?, "seq")?;
    let (id2, m2) = ctx.msg(&p.key, &p.a, &p.conv, "from b");
    let s2 = u(&wb.send_msg(&id2, &m2).await?, "seq")?;
    ensure!(
        s2 > s1,
        "B's seq {s2} does not follow A's {s1} in the same conversation"
    );
    Ok(())
}

async fn at_epoch_ms(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "when");
    wa.send_msg(&id, &m).await?;
    let at = u(&wb.expect("msg").await?, "at")?;
    ensure!(
        (1_500_000_000_000..10_000_000_000_000).contains(&at),
        "`at` {at} is not epoch milliseconds"
    );
    Ok(())
}

async fn crypto_v_echo(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "v");
    wa.send_msg(&id, &m).await?;
    let d = wb.expect("msg").await?;
    ensure!(
        d.get("crypto_v") == Some(&json!(1)),
        "crypto_v not echoed: {d}"
    );
    Ok(())
}

async fn no_crypto_v(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let (id, mut m) = ctx.msg(&p.key, &p.b, &p.conv, "ios");
    if let Some(o) = m.as_object_mut() {
        o.remove("crypto_v");
    }
    wa.send_msg(&id, &m).await?;
    wb.expect("msg").await?;
    Ok(())
}

async fn resend_after_reconnect(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "outbox");
    let first = u(&wa.send_msg(&id, &m).await?, "seq")?;
    drop(wa);
    let mut wa2 = ctx.connect(&p.a, "A2").await?;
    let second = u(&wa2.send_msg(&id, &m).await?, "seq")?;
    ensure!(
        first == second,
        "re-sent id got seq {second}, first {first}"
    );
    let wanted = id.clone();
    wb.expect_where("msg", |v| v["id"] == wanted.as_str())
        .await?;
    wb.expect_none_where("msg", |v| v["id"] == id.as_str())
        .await
}

async fn payload_too_large(ctx: &mut Ctx) -> CaseResult {
    let Some(limit) = ctx.limits().max_payload_bytes else {
        return Err(crate::model::Failure::Skip(
            "the documents give no message size limit (SPEC §Limits: \"Message size limits: not shown\"); give yours with --max-payload-bytes N".into(),
        ));
    };
    let (p, mut wa, mut wb) = online(ctx).await?;
    let id = ctx.uuid();
    let big = "A".repeat(limit + 4);
    let m = json!({"type": "msg", "id": id, "to": p.b.alias, "conv_id": p.conv, "crypto_v": 1, "payload": big});
    let refusal = wa.refuses(&m).await?;
    wb.expect_none("msg").await?;
    refusal.in_our_words(None)
}

async fn typing(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    wa.send(&json!({"type": "typing", "to": p.b.alias, "conv_id": p.conv, "crypto_v": 1}))
        .await?;
    let t = wb.expect("typing").await?;
    ensure!(
        s(&t, "from")? == p.a.alias && s(&t, "conv_id")? == p.conv,
        "typing frame: {t}"
    );
    Ok(())
}

async fn typing_not_stored(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    wa.send(&json!({"type": "typing", "to": p.b.alias, "conv_id": p.conv, "crypto_v": 1}))
        .await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "fence");
    wa.send_msg(&id, &m).await?;
    let mut wb = ctx.connect(&p.b, "B").await?;
    wb.expect("msg").await?;
    wb.expect_none("typing").await
}

async fn wrong_to(ctx: &mut Ctx) -> CaseResult {
    let (p, mut wa, mut wb) = online(ctx).await?;
    let c = ctx.account().await?;
    let mut wc = ctx.connect(&c, "C").await?;
    let (_id, m) = ctx.msg(&p.key, &c, &p.conv, "misrouted");
    let refusal = wa.refuses(&m).await?;
    wc.expect_none("msg").await?;
    wb.expect_none("msg").await?;
    refusal.in_our_words(None)
}

async fn send_before_sync(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let v = ctx
        .post(wire::http::paths::WS_TICKET, Some(&p.b.token), &json!({}))
        .await?
        .ok()?;
    let t = s(&v, "ticket")?.to_owned();
    ctx.transcript.secret(&t);
    let path = format!("/ws?user_uuid={}&ticket={t}", p.b.uuid);
    let mut wb = ctx
        .open_ws(seam::net::WsRequest::new(path.clone()), &path, "B")
        .await
        .map_err(|e| format!("B refused: {e}"))?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "early");
    wa.send_msg(&id, &m).await?;
    wb.send(&json!({"type": "sync", "crypto_v": 1})).await?;
    let wanted = id.clone();
    wb.expect_where("msg", |v| v["id"] == wanted.as_str())
        .await?;
    wb.expect_none_where("msg", |v| v["id"] == id.as_str())
        .await
}
