//! A relay team's own conformance cases: the same `Case`, levels, citations, hooks and reports
//! as the built-in suite, registered after it by `src/main.rs`.

use conformance::ctx::Ctx;
use conformance::model::{Case, CaseResult};
use conformance::{case, ensure};
use serde_json::json;

/// The team's cases (ids of an area of its own: `TEAM-NNN`).
pub const CASES: &[Case] = &[
    case!(
        "TEAM-001",
        Should,
        "our relay's notes §Health",
        "`GET /healthz` answers 200 while the relay serves.",
        [],
        healthz
    ),
    case!(
        "TEAM-002",
        Must,
        "our relay's notes §Messaging",
        "A message to an online contact arrives once, from its sender's alias, with its payload intact.",
        [],
        message_arrives_from_its_sender
    ),
];

async fn healthz(ctx: &mut Ctx) -> CaseResult {
    let r = ctx.get("/healthz", None).await?;
    ensure!(r.status == 200, "GET /healthz answered {}", r.status);
    Ok(())
}

async fn message_arrives_from_its_sender(ctx: &mut Ctx) -> CaseResult {
    let p = ctx.pair().await?;
    let mut wa = ctx.connect(&p.a, "A").await?;
    let mut wb = ctx.connect(&p.b, "B").await?;
    let (id, m) = ctx.msg(&p.key, &p.b, &p.conv, "hello from a team case");
    wa.send_msg(&id, &m).await?;
    let got = wb.expect("msg").await?;
    ensure!(got["from"] == json!(p.a.alias), "from: {}", got["from"]);
    ensure!(
        got["payload"] == m["payload"],
        "the payload changed on the way"
    );
    wb.expect_none("msg").await
}
