//! The report's three plots, drawn with `plotters` as SVG: the run's timeline (fault bands,
//! each device's connected spans, every message from send to delivery, violations), delivery
//! latency over time, and the delivery-latency histogram.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::timeline::{FaultClass, Timeline};

/// Width of every plot, in pixels.
const WIDTH_PX: u32 = 1200;
/// Height of one lane of the timeline, in pixels.
const LANE_PX: u32 = 26;
/// Height of the latency plots, in pixels.
const PLOT_HEIGHT_PX: u32 = 320;
/// Most histogram bins.
const HISTOGRAM_BINS: u64 = 40;

/// The colour of a fault class (bands are drawn translucent).
pub(super) fn class_colour(class: FaultClass) -> RGBColor {
    match class {
        FaultClass::Network => RGBColor(230, 126, 34),
        FaultClass::Process => RGBColor(192, 57, 43),
        FaultClass::Storage => RGBColor(142, 68, 173),
        FaultClass::Clock => RGBColor(41, 128, 185),
        FaultClass::Adversary => RGBColor(127, 140, 141),
    }
}

const CONNECTED: RGBColor = RGBColor(39, 174, 96);
const MESSAGE: RGBColor = RGBColor(52, 73, 94);
const LOST: RGBColor = RGBColor(231, 76, 60);
const VIOLATION: RGBColor = RGBColor(200, 0, 0);
const TRAFFIC: RGBColor = RGBColor(236, 240, 241);

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// A drawing failed (an SVG backend only fails on layout it cannot do).
#[derive(Debug, thiserror::Error)]
#[error("drawing the {what} plot: {detail}")]
pub struct PlotError {
    what: &'static str,
    detail: String,
}

fn err<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> PlotError {
    move |e| PlotError {
        what,
        detail: format!("{e:?}"),
    }
}

fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// The timeline: one row per lane, a row of marks and violation numbers on top.
pub(super) fn timeline(t: &Timeline) -> Result<String, PlotError> {
    let lanes = t.lanes.len().max(1);
    let height = 90 + LANE_PX * (u32::try_from(lanes).unwrap_or(u32::MAX) + 1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH_PX, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err("timeline"))?;
        draw_timeline(&root, t, lanes)?;
        root.present().map_err(err("timeline"))?;
    }
    Ok(svg)
}

fn draw_timeline(root: &Area<'_>, t: &Timeline, lanes: usize) -> Result<(), PlotError> {
    let e = err("timeline");
    let end_s = secs(t.end_ms).max(1.0);
    let rows = lanes as f64 + 1.0;
    let mut chart = ChartBuilder::on(root)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..end_s, 0.0..rows)
        .map_err(&e)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc("simulated seconds since the run started")
        .draw()
        .map_err(&e)?;
    // A lane's row: lane 0 at the top, just under the marks row.
    let row = |lane: usize| rows - 1.0 - lane as f64;
    if let Some((start, heal)) = t.traffic {
        chart
            .draw_series([Rectangle::new(
                [(secs(start), 0.0), (secs(heal), rows - 1.0)],
                TRAFFIC.filled(),
            )])
            .map_err(&e)?;
    }
    chart
        .draw_series(t.bands.iter().map(|b| {
            Rectangle::new(
                [(secs(b.start_ms), 0.0), (secs(b.end_ms), rows)],
                class_colour(b.class).mix(0.18).filled(),
            )
        }))
        .map_err(&e)?;
    chart
        .draw_series(t.lanes.iter().enumerate().flat_map(|(i, lane)| {
            let y = row(i);
            lane.connected.iter().map(move |&(a, b)| {
                Rectangle::new(
                    [(secs(a), y - 0.62), (secs(b), y - 0.38)],
                    CONNECTED.filled(),
                )
            })
        }))
        .map_err(&e)?;
    chart
        .draw_series(t.messages.iter().filter_map(|m| {
            let to = m.to?;
            let delivered = m.delivered_ms?;
            Some(PathElement::new(
                vec![
                    (secs(m.sent_ms), row(m.from) - 0.5),
                    (secs(delivered), row(to) - 0.5),
                ],
                MESSAGE.mix(0.35),
            ))
        }))
        .map_err(&e)?;
    chart
        .draw_series(
            t.messages
                .iter()
                .filter(|m| m.delivered_ms.is_none())
                .map(|m| Cross::new((secs(m.sent_ms), row(m.from) - 0.5), 4, LOST)),
        )
        .map_err(&e)?;
    chart
        .draw_series(t.marks.iter().map(|m| {
            TriangleMarker::new(
                (secs(m.at_ms), rows - 0.5),
                6,
                class_colour(m.class).filled(),
            )
        }))
        .map_err(&e)?;
    for (n, v) in t.violations.iter().enumerate() {
        let x = secs(v.at_ms.unwrap_or(t.end_ms));
        chart
            .draw_series([PathElement::new(
                vec![(x, 0.0), (x, rows)],
                VIOLATION.stroke_width(2),
            )])
            .map_err(&e)?;
        chart
            .draw_series([Text::new(
                format!("V{}", n + 1),
                (x, rows - 0.15),
                ("sans-serif", 13).into_font().color(&VIOLATION),
            )])
            .map_err(&e)?;
    }
    // Lane names in the left margin, at each lane's centre.
    for (i, lane) in t.lanes.iter().enumerate() {
        let (_, y_px) = chart.backend_coord(&(0.0, row(i) - 0.5));
        root.draw(&Text::new(
            lane.name.clone(),
            (14, y_px - 7),
            ("monospace", 13).into_font(),
        ))
        .map_err(&e)?;
    }
    let (_, y_px) = chart.backend_coord(&(0.0, rows - 0.5));
    root.draw(&Text::new(
        "faults",
        (14, y_px - 7),
        ("sans-serif", 12).into_font().color(&BLACK.mix(0.6)),
    ))
    .map_err(&e)?;
    Ok(())
}

/// Delivery latency of every delivered message against its send time, with the fault bands.
pub(super) fn latency_over_time(t: &Timeline) -> Result<String, PlotError> {
    let e = err("latency");
    let points: Vec<(f64, f64)> = t
        .messages
        .iter()
        .filter_map(|m| Some((secs(m.sent_ms), m.latency_ms()? as f64)))
        .collect();
    let max_ms = points.iter().map(|p| p.1).fold(1.0, f64::max) * 1.05;
    let end_s = secs(t.end_ms).max(1.0);
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (WIDTH_PX, PLOT_HEIGHT_PX)).into_drawing_area();
        root.fill(&WHITE).map_err(&e)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..end_s, 0.0..max_ms)
            .map_err(&e)?;
        chart
            .configure_mesh()
            .x_desc("sent at (simulated s)")
            .y_desc("send to delivery (ms)")
            .draw()
            .map_err(&e)?;
        chart
            .draw_series(t.bands.iter().map(|b| {
                Rectangle::new(
                    [(secs(b.start_ms), 0.0), (secs(b.end_ms), max_ms)],
                    class_colour(b.class).mix(0.15).filled(),
                )
            }))
            .map_err(&e)?;
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&p| Circle::new(p, 2, MESSAGE.mix(0.6).filled())),
            )
            .map_err(&e)?;
        root.present().map_err(&e)?;
    }
    Ok(svg)
}

/// The delivery-latency histogram (ms), in at most [`HISTOGRAM_BINS`] bins.
pub(super) fn latency_histogram(t: &Timeline) -> Result<String, PlotError> {
    let e = err("histogram");
    let latencies: Vec<u64> = t.messages.iter().filter_map(|m| m.latency_ms()).collect();
    let max = latencies.iter().copied().max().unwrap_or(0).max(1);
    let width = max.div_ceil(HISTOGRAM_BINS).max(1);
    let mut counts = vec![0u64; usize::try_from(max / width + 1).unwrap_or(1)];
    for l in &latencies {
        if let Some(c) = usize::try_from(l / width)
            .ok()
            .and_then(|i| counts.get_mut(i))
        {
            *c += 1;
        }
    }
    let top = counts.iter().copied().max().unwrap_or(0).max(1) as f64 * 1.05;
    let right = (width * counts.len() as u64) as f64;
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (WIDTH_PX, PLOT_HEIGHT_PX)).into_drawing_area();
        root.fill(&WHITE).map_err(&e)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..right, 0.0..top)
            .map_err(&e)?;
        chart
            .configure_mesh()
            .x_desc(format!("send to delivery (ms; bins of {width} ms)"))
            .y_desc("messages")
            .draw()
            .map_err(&e)?;
        chart
            .draw_series(counts.iter().enumerate().map(|(i, &c)| {
                let x0 = (i as u64 * width) as f64;
                Rectangle::new([(x0, 0.0), (x0 + width as f64, c as f64)], MESSAGE.filled())
            }))
            .map_err(&e)?;
        root.present().map_err(&e)?;
    }
    Ok(svg)
}
