//! `reproduce all --figures DIR`: two pictures of every reproduction. `added-costs.svg`: each
//! mechanism row's M/B, published (x) against simulated (y), log-log, with the diagonal and
//! the band its tolerance allows; `rows.svg`: every other published row's simulated figure
//! over its published one, with the tolerance band. One colour per experiment; a hollow mark
//! is a row not counted as a prediction (fitted, derived, or met by a null model too).

use super::judge::{ADDED_TOLERANCE_PCT, ADDED_TOLERANCE_PP};
use super::svg::COLORS;
use super::{Figure, Reproduction, Row};
use plotters::prelude::*;

/// The two figures, for `reps` as `reproduce all` ran them.
pub fn figures(reps: &[Reproduction]) -> Vec<Figure> {
    vec![
        Figure {
            name: "added-costs".into(),
            svg: draw(reps, Kind::Added),
        },
        Figure {
            name: "rows".into(),
            svg: draw(reps, Kind::Rows),
        },
    ]
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Added,
    Rows,
}

/// A row's point: (x, y) as the figure plots it, or None where it has no place in it.
fn point(r: &Row, kind: Kind, index: usize) -> Option<(f64, f64)> {
    let p = r.published?;
    match (kind, &r.added) {
        (Kind::Added, Some(a)) => {
            Some((1.0 + a.published_pct / 100.0, 1.0 + a.simulated_pct / 100.0))
        }
        // A gain in points: simulated minus published, shown as a ratio around 1 per 100 points.
        (Kind::Rows, None) if r.error_pct.is_none() => {
            Some((index as f64, 1.0 + (r.simulated - p) / 100.0))
        }
        (Kind::Rows, None) => Some((index as f64, r.simulated / p)),
        _ => None,
    }
}

fn draw(reps: &[Reproduction], kind: Kind) -> String {
    let mut series: Vec<(&str, Vec<((f64, f64), bool)>)> = vec![];
    let mut index = 0;
    for rep in reps {
        let mut pts = vec![];
        for r in &rep.rows {
            if let Some(p) = point(r, kind, index) {
                pts.push((p, r.is_prediction() && !r.null_passes));
                index += 1;
            }
        }
        if !pts.is_empty() {
            series.push((rep.experiment.as_str(), pts));
        }
    }
    let mut svg = String::new();
    let drawn = match kind {
        Kind::Added => added_chart(&mut svg, &series),
        Kind::Rows => rows_chart(&mut svg, &series, index.max(1) as f64),
    };
    drawn.unwrap_or_else(|e| unreachable!("plotters failed on an in-memory SVG: {e}"));
    svg.push('\n');
    svg
}

type Points<'a> = [(&'a str, Vec<((f64, f64), bool)>)];

fn added_chart(svg: &mut String, series: &Points) -> Result<(), String> {
    let all = series.iter().flat_map(|(_, p)| p.iter().map(|(xy, _)| *xy));
    let (lo, hi) = all.fold((0.9f64, 2.0f64), |(lo, hi), (x, y)| {
        (lo.min(x).min(y), hi.max(x).max(y))
    });
    let (lo, hi) = (lo * 0.9, hi * 1.2);
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let root = SVGBackend::with_string(svg, (760, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "What each mechanism adds: M/B, published against simulated",
            ("sans-serif", 15),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("published M/B (mechanism row over its baseline)")
        .y_desc("simulated M/B")
        .light_line_style(WHITE)
        .draw()
        .map_err(e)?;
    // The diagonal and the band within which an added cost passes: 20% of it, or 2 points.
    let xs: Vec<f64> = (0..=200)
        .map(|i| lo * (hi / lo).powf(i as f64 / 200.0))
        .collect();
    let band = |sign: f64| {
        xs.iter()
            .map(|&x| {
                let added = x - 1.0;
                let off =
                    (added.abs() * ADDED_TOLERANCE_PCT / 100.0).max(ADDED_TOLERANCE_PP / 100.0);
                (x, (x + sign * off).max(lo))
            })
            .collect::<Vec<_>>()
    };
    chart
        .draw_series(LineSeries::new(
            xs.iter().map(|&x| (x, x)),
            BLACK.stroke_width(1),
        ))
        .map_err(e)?;
    for sign in [-1.0, 1.0] {
        chart
            .draw_series(DashedLineSeries::new(
                band(sign),
                5,
                4,
                BLACK.mix(0.5).stroke_width(1),
            ))
            .map_err(e)?;
    }
    marks(&mut chart, series)?;
    root.present().map_err(e)
}

fn rows_chart(svg: &mut String, series: &Points, n: f64) -> Result<(), String> {
    let all = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(xy, _)| xy.1));
    let (lo, hi) = all.fold((0.5f64, 2.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let root = SVGBackend::with_string(svg, (760, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Every other row: simulated over published (gains: 1 + points/100; dashed: 15%)",
            ("sans-serif", 15),
        )
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(-1.0..n, (lo * 0.9..hi * 1.1).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("row")
        .y_desc("simulated / published")
        .x_labels(0)
        .light_line_style(WHITE)
        .draw()
        .map_err(e)?;
    for y in [0.85, 1.0, 1.15] {
        let style = if y == 1.0 {
            BLACK.stroke_width(1)
        } else {
            BLACK.mix(0.5).stroke_width(1)
        };
        chart
            .draw_series(DashedLineSeries::new([(-1.0, y), (n, y)], 5, 4, style))
            .map_err(e)?;
    }
    marks(&mut chart, series)?;
    root.present().map_err(e)
}

/// One colour per experiment: filled marks for predictions, hollow for the rest; a legend.
fn marks<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    series: &Points,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(pts.iter().map(|&(p, predicted)| {
                let style = if predicted {
                    color.filled()
                } else {
                    color.stroke_width(2)
                };
                Circle::new(p, 4, style)
            }))
            .map_err(e)?
            .label(*name)
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mechanism_row_and_every_other_row_is_drawn() {
        let mut rows = vec![
            Row::compared("base", "ns", 100.0, 100.0, 10.0),
            Row::compared("on", "ns", 150.0, 140.0, 10.0),
            Row::compared_points("gain", 5.0, 3.0, 3.0, false),
        ];
        rows[1].baseline = Some("base".into());
        let mut rep = Reproduction {
            rows,
            ..Reproduction::new("x & y", "")
        };
        rep.judge("t").unwrap();
        let f = figures(&[rep]);
        assert_eq!(f[0].name, "added-costs");
        assert_eq!(
            f[0].svg.matches("<circle").count(),
            1 + 1,
            "one row and its legend mark"
        );
        assert_eq!(
            f[1].svg.matches("<circle").count(),
            2 + 1,
            "two rows and the legend mark"
        );
        assert!(f[0].svg.contains("x &amp; y"));
    }
}
