//! Run reports people look at: one self-contained HTML page per run (`simulate --report DIR`
//! writes one per failing seed, and one for `--seed`; Jepsen mode one per seed that did not
//! pass) and a summary page for a sweep.
//!
//! A page holds, with no external file: the verdict and the facts of the run (scenario, fault
//! plan, counts, the command that replays it); each violation, numbered and placed at the
//! message it names; a timeline (fault plan as bands, each client device's connected spans,
//! every message from send to delivery, lost ones crossed, violations as red lines); delivery
//! latency over time and its histogram (SVG drawn with `plotters`); the faults as a table; and
//! the run's trace or history, folded.
//!
//! ```text
//!   let page = report::seed_page(&Timeline::from_run(&run_report, "simulate --seed 17"))?;
//!   std::fs::write(dir.join(report::seed_file(17)), page)?;
//! ```

mod plots;
pub mod timeline;

use std::fmt::Write as _;

pub use self::plots::PlotError;
use self::timeline::FaultClass;
pub use self::timeline::Timeline;

/// A seed's page file name in a report directory.
pub fn seed_file(seed: u64) -> String {
    format!("seed-{seed}.html")
}

/// The summary page's file name in a report directory.
pub const INDEX_FILE: &str = "index.html";

/// One seed's line on the summary page.
#[derive(Debug, Clone)]
pub struct SummaryRow {
    /// The seed.
    pub seed: u64,
    /// `pass`, `fail`, `setup` (or `panic`).
    pub verdict: String,
    /// Oracles that found violations, with how many each.
    pub oracles: Vec<(String, usize)>,
    /// Whether the seed has a page of its own.
    pub page: bool,
}

/// Escapes `s` for HTML and XML text and attributes (control characters other than
/// newline, tab and carriage return, which XML 1.0 forbids, become spaces).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1260px}\
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}\
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}\
.verdict{padding:2px 10px;border-radius:4px;color:#fff;font-weight:bold}\
.pass{background:#27ae60}.fail{background:#c0392b}.setup,.panic{background:#d35400}\
.v{margin:6px 0;white-space:pre-wrap;font-family:monospace;font-size:13px}\
.chip{display:inline-block;width:12px;height:12px;margin:0 4px 0 14px;vertical-align:middle}\
pre{font-size:12px;background:#f7f7f7;padding:8px;overflow-x:auto}";

fn head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>\n",
        escape(title)
    )
}

fn ms(t: u64) -> String {
    format!("{:.1} s", t as f64 / 1000.0)
}

/// The page of one run.
pub fn seed_page(t: &Timeline) -> Result<String, PlotError> {
    let mut out = head(&t.title);
    let verdict = escape(&t.verdict);
    let _ = writeln!(
        out,
        "<h1>{} <span class=\"verdict {verdict}\">{verdict}</span></h1>",
        escape(&t.title)
    );
    out.push_str("<table>");
    for (k, v) in &t.facts {
        let _ = write!(out, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
    }
    out.push_str("</table>\n");
    violations_section(&mut out, t);
    out.push_str("<h2>Timeline</h2>\n");
    legend(&mut out);
    out.push_str(&plots::timeline(t)?);
    latency_section(&mut out, t)?;
    faults_section(&mut out, t);
    let _ = write!(
        out,
        "<h2>Log</h2><details><summary>{} lines</summary><pre>",
        t.log.len()
    );
    for line in &t.log {
        out.push_str(&escape(line));
        out.push('\n');
    }
    out.push_str("</pre></details>\n</body></html>\n");
    Ok(out)
}

fn violations_section(out: &mut String, t: &Timeline) {
    let _ = writeln!(out, "<h2>Violations ({})</h2>", t.violations.len());
    if t.violations.is_empty() {
        out.push_str("<p>None: every oracle held.</p>\n");
    }
    for (n, v) in t.violations.iter().enumerate() {
        let when = v.at_ms.map_or_else(
            || "checked at the end of the run".to_owned(),
            |at| format!("at {} (the message it names was sent)", ms(at)),
        );
        let _ = writeln!(
            out,
            "<div class=\"v\" id=\"v{}\"><b>V{} [{}]</b> {}<br>{}</div>",
            n + 1,
            n + 1,
            escape(&v.oracle),
            escape(&when),
            escape(&v.detail)
        );
    }
}

fn legend(out: &mut String) {
    out.push_str("<p>");
    for class in [
        FaultClass::Network,
        FaultClass::Process,
        FaultClass::Storage,
        FaultClass::Clock,
        FaultClass::Adversary,
    ] {
        let c = plots::class_colour(class);
        let _ = write!(
            out,
            "<span class=\"chip\" style=\"background:rgba({},{},{},0.35)\"></span>{} fault",
            c.0,
            c.1,
            c.2,
            class.name()
        );
    }
    out.push_str(
        "<span class=\"chip\" style=\"background:#27ae60\"></span>socket open\
         <span class=\"chip\" style=\"background:#34495e\"></span>message, send to delivery\
         <span class=\"chip\" style=\"background:#e74c3c\"></span>never delivered (×)\
         <span class=\"chip\" style=\"background:#c80000\"></span>violation (V<i>n</i>)\
         <span class=\"chip\" style=\"background:#ecf0f1;border:1px solid #ccc\"></span>traffic window</p>\n",
    );
}

fn latency_section(out: &mut String, t: &Timeline) -> Result<(), PlotError> {
    let mut latencies: Vec<u64> = t.messages.iter().filter_map(|m| m.latency_ms()).collect();
    latencies.sort_unstable();
    let pct = |p: usize| {
        latencies
            .get((latencies.len() * p / 100).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let _ = writeln!(
        out,
        "<h2>Delivery latency</h2><p>{} messages sent, {} delivered, {} never delivered; p50 {} ms, p99 {} ms, max {} ms</p>",
        t.messages.len(),
        latencies.len(),
        t.messages.len() - latencies.len(),
        pct(50),
        pct(99),
        latencies.last().copied().unwrap_or(0)
    );
    out.push_str(&plots::latency_over_time(t)?);
    out.push_str(&plots::latency_histogram(t)?);
    Ok(())
}

fn faults_section(out: &mut String, t: &Timeline) {
    let _ = writeln!(
        out,
        "<h2>Faults ({} lasting, {} instant)</h2><table><tr><th>from</th><th>to</th><th>class</th><th>fault</th></tr>",
        t.bands.len(),
        t.marks.len()
    );
    let mut rows: Vec<(u64, String)> = t
        .bands
        .iter()
        .map(|b| {
            (
                b.start_ms,
                format!(
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    ms(b.start_ms),
                    ms(b.end_ms),
                    b.class.name(),
                    escape(&b.label)
                ),
            )
        })
        .chain(t.marks.iter().map(|m| {
            (
                m.at_ms,
                format!(
                    "<tr><td>{}</td><td></td><td>{}</td><td>{}</td></tr>",
                    ms(m.at_ms),
                    m.class.name(),
                    escape(&m.label)
                ),
            )
        }))
        .collect();
    rows.sort_by_key(|r| r.0);
    for (_, row) in rows {
        out.push_str(&row);
    }
    out.push_str("</table>\n");
}

/// The summary page of a sweep: `facts` (command, counts, time) and one row per seed, each
/// failing seed linked to its page.
pub fn summary_page(title: &str, facts: &[(String, String)], rows: &[SummaryRow]) -> String {
    let mut out = head(title);
    let failing = rows.iter().filter(|r| r.verdict != "pass").count();
    let _ = writeln!(
        out,
        "<h1>{}</h1><p>{} seeds, {failing} not passing.</p><table>",
        escape(title),
        rows.len()
    );
    for (k, v) in facts {
        let _ = write!(out, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
    }
    out.push_str(
        "</table><h2>Seeds</h2><table><tr><th>seed</th><th>verdict</th><th>violations</th></tr>\n",
    );
    for r in rows.iter().filter(|r| r.verdict != "pass") {
        summary_row(&mut out, r);
    }
    for r in rows.iter().filter(|r| r.verdict == "pass") {
        summary_row(&mut out, r);
    }
    out.push_str("</table></body></html>\n");
    out
}

fn summary_row(out: &mut String, r: &SummaryRow) {
    let seed = if r.page {
        format!("<a href=\"{}\">{}</a>", seed_file(r.seed), r.seed)
    } else {
        r.seed.to_string()
    };
    let oracles: Vec<String> = r
        .oracles
        .iter()
        .map(|(o, n)| format!("{} ×{n}", escape(o)))
        .collect();
    let verdict = escape(&r.verdict);
    let _ = writeln!(
        out,
        "<tr><td>{seed}</td><td><span class=\"verdict {verdict}\">{verdict}</span></td><td>{}</td></tr>",
        oracles.join(", ")
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::timeline::{Band, Lane, Mark, MessageSpan, PlacedViolation};
    use super::*;

    fn sample() -> Timeline {
        Timeline {
            title: "seed 3 <x>".into(),
            verdict: "fail".into(),
            facts: vec![("replay".into(), "simulate --seed 3".into())],
            end_ms: 60_000,
            traffic: Some((5_000, 50_000)),
            bands: vec![Band {
                start_ms: 10_000,
                end_ms: 20_000,
                label: "partition c0 <-> relay".into(),
                class: FaultClass::Network,
            }],
            marks: vec![Mark {
                at_ms: 30_000,
                label: "power off relay".into(),
                class: FaultClass::Process,
            }],
            lanes: vec![
                Lane {
                    name: "c0".into(),
                    connected: vec![(1_000, 10_000), (21_000, 60_000)],
                },
                Lane {
                    name: "c1".into(),
                    connected: vec![(1_000, 60_000)],
                },
            ],
            messages: vec![
                MessageSpan {
                    id: "m-0000001".into(),
                    from: 0,
                    to: Some(1),
                    sent_ms: 6_000,
                    delivered_ms: Some(6_150),
                },
                MessageSpan {
                    id: "m-0000002".into(),
                    from: 1,
                    to: None,
                    sent_ms: 12_000,
                    delivered_ms: None,
                },
            ],
            violations: vec![PlacedViolation {
                oracle: "liveness".into(),
                detail: "m-0000002 never delivered <script>".into(),
                at_ms: Some(12_000),
            }],
            log: vec!["    6000 c0/d0 sent m-0000001".into()],
        }
    }

    #[test]
    fn a_page_is_self_contained_escaped_and_has_its_three_plots() {
        let page = seed_page(&sample()).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert_eq!(
            page.matches("<svg").count(),
            3,
            "timeline, latency, histogram"
        );
        assert!(
            !page.contains("<script"),
            "nothing executable, details escaped"
        );
        assert!(page.contains("&lt;script&gt;"));
        assert!(page.contains("seed 3 &lt;x&gt;"));
        assert!(page.contains("V1 [liveness]"));
        assert!(page.contains("at 12.0 s"));
        assert!(page.contains("2 messages sent, 1 delivered, 1 never delivered"));
        assert!(
            !page.contains("src=") && !page.contains("href=\"http"),
            "no external file"
        );
    }

    #[test]
    fn an_empty_run_still_draws() {
        let t = Timeline {
            title: "seed 0".into(),
            verdict: "setup".into(),
            ..Timeline::default()
        };
        let page = seed_page(&t).unwrap();
        assert_eq!(page.matches("<svg").count(), 3);
    }

    #[test]
    fn the_summary_lists_failing_seeds_first_with_links() {
        let rows = vec![
            SummaryRow {
                seed: 1,
                verdict: "pass".into(),
                oracles: vec![],
                page: false,
            },
            SummaryRow {
                seed: 2,
                verdict: "fail".into(),
                oracles: vec![("seq-order".into(), 2)],
                page: true,
            },
        ];
        let page = summary_page("sweep", &[("command".into(), "simulate".into())], &rows);
        let fail = page.find("href=\"seed-2.html\"").unwrap();
        let pass = page.find("<td>1</td>").unwrap();
        assert!(fail < pass);
        assert!(page.contains("seq-order ×2"));
        assert!(page.contains("2 seeds, 1 not passing"));
    }
}
