//! Reports: a terminal summary, JSON, JUnit XML and a self-contained HTML page.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::json;

use crate::model::{Level, Profile};
use crate::runner::{CaseReport, Status};
use crate::transcript::Direction;

/// Counts per status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Passed.
    pub pass: usize,
    /// Failed unexpectedly.
    pub fail: usize,
    /// Failed as expected.
    pub xfail: usize,
    /// Passed unexpectedly.
    pub xpass: usize,
    /// Skipped.
    pub skip: usize,
    /// A setup step failed: not checked.
    pub error: usize,
}

impl Counts {
    fn add(&mut self, s: Status) {
        match s {
            Status::Pass => self.pass += 1,
            Status::Fail => self.fail += 1,
            Status::ExpectedFail => self.xfail += 1,
            Status::UnexpectedPass => self.xpass += 1,
            Status::Skip => self.skip += 1,
            Status::Error => self.error += 1,
        }
    }

    /// Cases counted.
    pub fn total(&self) -> usize {
        self.pass + self.fail + self.xfail + self.xpass + self.skip + self.error
    }
}

/// Counts per area and overall.
pub fn counts(reports: &[CaseReport]) -> (BTreeMap<&'static str, Counts>, Counts) {
    let mut per: BTreeMap<&'static str, Counts> = BTreeMap::new();
    let mut all = Counts::default();
    for r in reports {
        per.entry(r.area).or_default().add(r.status);
        all.add(r.status);
    }
    (per, all)
}

/// The terminal summary: per-area counts, then failures, unexpected passes and skips with reasons.
pub fn summary(reports: &[CaseReport], relay: &str, profile: Profile) -> String {
    let (per, all) = counts(reports);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "conformance against {relay} (profile {}): {} cases",
        profile.name(),
        all.total()
    );
    let _ = writeln!(
        out,
        "{:<11} {:>5} {:>5} {:>5} {:>5} {:>5} {:>5}",
        "area", "pass", "fail", "error", "xfail", "xpass", "skip"
    );
    for (area, c) in &per {
        let _ = writeln!(
            out,
            "{area:<11} {:>5} {:>5} {:>5} {:>5} {:>5} {:>5}",
            c.pass, c.fail, c.error, c.xfail, c.xpass, c.skip
        );
    }
    let _ = writeln!(
        out,
        "{:<11} {:>5} {:>5} {:>5} {:>5} {:>5} {:>5}",
        "total", all.pass, all.fail, all.error, all.xfail, all.xpass, all.skip
    );
    for (title, status) in [
        ("failures", Status::Fail),
        (
            "errors (a setup step failed: the statement was not checked)",
            Status::Error,
        ),
        ("expected failures that passed", Status::UnexpectedPass),
        ("skipped", Status::Skip),
    ] {
        let listed: Vec<&CaseReport> = reports.iter().filter(|r| r.status == status).collect();
        if listed.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n{title}:");
        for r in listed {
            let _ = writeln!(
                out,
                "  {} [{}] {}: {}",
                r.id,
                r.level,
                r.source,
                r.reason.as_deref().unwrap_or("")
            );
        }
    }
    out
}

/// The JSON report.
pub fn json(reports: &[CaseReport], relay: &str, profile: Profile) -> String {
    let (per, all) = counts(reports);
    let areas: serde_json::Map<String, serde_json::Value> = per
        .iter()
        .map(|(a, c)| {
            (
                (*a).to_owned(),
                json!({"pass": c.pass, "fail": c.fail, "error": c.error, "expected_fail": c.xfail, "unexpected_pass": c.xpass, "skip": c.skip}),
            )
        })
        .collect();
    let v = json!({
        "relay": relay,
        "profile": profile,
        "totals": {"cases": all.total(), "pass": all.pass, "fail": all.fail, "error": all.error, "expected_fail": all.xfail, "unexpected_pass": all.xpass, "skip": all.skip},
        "must_failed": crate::runner::must_failed(reports),
        "areas": areas,
        "cases": reports,
    });
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

/// Escapes text for XML and HTML.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' && c != '\r' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn transcript_text(r: &CaseReport) -> String {
    let mut out = String::new();
    for e in &r.transcript {
        let arrow = match e.dir {
            Direction::Out => "->",
            Direction::In => "<-",
            Direction::Note => "##",
        };
        let _ = writeln!(out, "{arrow} {} {}", e.channel, e.text);
    }
    out
}

/// JUnit XML: one `testsuite` per area; expected failures and skips are `skipped`.
pub fn junit(reports: &[CaseReport]) -> String {
    let (per, all) = counts(reports);
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"conformance\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">",
        all.total(),
        all.fail + all.xpass,
        all.error,
        all.skip + all.xfail
    );
    for (area, c) in &per {
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">",
            escape(area),
            c.total(),
            c.fail + c.xpass,
            c.error,
            c.skip + c.xfail
        );
        for r in reports.iter().filter(|r| r.area == *area) {
            let _ = write!(
                out,
                "    <testcase classname=\"conformance.{}\" name=\"{} [{}] {}\" time=\"{:.3}\">",
                escape(area),
                r.id,
                r.level,
                escape(r.statement),
                r.duration_ms as f64 / 1000.0
            );
            if let Some(f) = &r.faults {
                let first = r.first_attempt.as_ref().map_or_else(String::new, |a| {
                    format!(
                        "<property name=\"first_attempt\" value=\"{}\"/>",
                        escape(&serde_json::to_string(a).unwrap_or_default())
                    )
                });
                let _ = write!(
                    out,
                    "<properties><property name=\"faults\" value=\"{}\"/>{first}</properties>",
                    escape(&serde_json::to_string(f).unwrap_or_default())
                );
            }
            let reason = escape(r.reason.as_deref().unwrap_or(""));
            match r.status {
                Status::Pass => {}
                Status::Fail | Status::UnexpectedPass => {
                    let _ = write!(
                        out,
                        "<failure message=\"{reason}\">{}</failure>",
                        escape(&transcript_text(r))
                    );
                }
                Status::ExpectedFail => {
                    let _ = write!(
                        out,
                        "<skipped message=\"expected failure ({}): {reason}\"/>",
                        escape(r.expected_reason.as_deref().unwrap_or(""))
                    );
                }
                Status::Skip => {
                    let _ = write!(out, "<skipped message=\"{reason}\"/>");
                }
                Status::Error => {
                    let _ = write!(
                        out,
                        "<error message=\"{reason}\">{}</error>",
                        escape(&transcript_text(r))
                    );
                }
            }
            let _ = writeln!(
                out,
                "<system-out>{}</system-out></testcase>",
                escape(&format!("{}: {}", r.source, r.statement))
            );
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}\
table{border-collapse:collapse;margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}\
.pass{color:#1a7f37}.fail,.unexpected_pass,.error{color:#cf222e;font-weight:bold}.expected_fail{color:#9a6700}.skip{color:#6e7781}\
details{margin:2px 0}pre{background:#f6f8fa;padding:6px;white-space:pre-wrap;word-break:break-all;font-size:12px}\
code{font-size:12px}";

/// The self-contained HTML report (inline CSS, transcripts in `<details>`).
pub fn html(reports: &[CaseReport], relay: &str, profile: Profile) -> String {
    let (per, all) = counts(reports);
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Conformance report</title><style>{CSS}</style></head><body>"
    );
    let _ = write!(
        out,
        "<h1>Conformance report</h1><p>Relay: <code>{}</code>, profile <code>{}</code>. {} cases: {} pass, {} fail, {} errors (not checked: a setup step failed), {} expected failures, {} unexpected passes, {} skipped. MUST failures: {}.</p>",
        escape(relay),
        profile.name(),
        all.total(),
        all.pass,
        all.fail,
        all.error,
        all.xfail,
        all.xpass,
        all.skip,
        reports
            .iter()
            .filter(|r| matches!(r.status, Status::Fail | Status::Error) && r.level == Level::Must)
            .count()
    );
    out.push_str("<table><tr><th>area</th><th>pass</th><th>fail</th><th>error</th><th>xfail</th><th>xpass</th><th>skip</th></tr>");
    for (area, c) in &per {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(area),
            c.pass,
            c.fail,
            c.error,
            c.xfail,
            c.xpass,
            c.skip
        );
    }
    out.push_str("</table><table><tr><th>id</th><th>level</th><th>source</th><th>statement</th><th>outcome</th><th>reason and transcript</th></tr>");
    for r in reports {
        let status = serde_json::to_value(r.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = write!(
            out,
            "<tr id=\"{id}\"><td><code>{id}</code></td><td>{}</td><td>{}</td><td>{}</td><td class=\"{status}\">{}</td><td>",
            r.level,
            escape(r.source),
            escape(r.statement),
            r.status.label(),
            id = escape(r.id)
        );
        if let Some(f) = &r.faults {
            let _ = write!(
                out,
                "<div>faults (seed {}): <code>{}</code></div>",
                f.seed,
                escape(&serde_json::to_string(&f.connections).unwrap_or_default())
            );
        }
        if let Some(a) = &r.first_attempt {
            let _ = write!(
                out,
                "<div>first attempt (seed {}, a destructive toxic drawn: <code>{}</code>) failed: {}; run again without the destructive toxics</div>",
                a.faults.seed,
                escape(&serde_json::to_string(&a.faults.connections).unwrap_or_default()),
                escape(&a.reason)
            );
        }
        if let Some(reason) = &r.reason {
            let _ = write!(out, "<div>{}</div>", escape(reason));
        }
        if let Some(x) = &r.expected_reason {
            let _ = write!(out, "<div><em>expected failure: {}</em></div>", escape(x));
        }
        let _ = write!(
            out,
            "<details><summary>wire transcript ({} entries, {} ms)</summary><pre>{}</pre></details></td></tr>",
            r.transcript.len(),
            r.duration_ms,
            escape(&transcript_text(r))
        );
    }
    out.push_str("</table></body></html>\n");
    out
}
