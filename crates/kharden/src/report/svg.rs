//! A line chart in SVG, drawn by `plotters` (SVG backend only): log2 x axis (CPU counts), log10
//! y axis, one line per series with a dot at each point, and a legend.

use plotters::element::DashedPathElement;
use plotters::prelude::*;

pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

/// Dark2 (ColorBrewer): colours that stay distinct in print and for most colour vision.
/// Line charts cycle through the first six, the results figures through all eight.
pub(super) const COLORS: [RGBColor; 8] = [
    RGBColor(0x1b, 0x9e, 0x77),
    RGBColor(0xd9, 0x5f, 0x02),
    RGBColor(0x75, 0x70, 0xb3),
    RGBColor(0xe7, 0x29, 0x8a),
    RGBColor(0x66, 0xa6, 0x1e),
    RGBColor(0xe6, 0xab, 0x02),
    RGBColor(0xa6, 0x76, 0x1d),
    RGBColor(0x66, 0x66, 0x66),
];
const LINE_COLORS: usize = 6;

/// The chart as SVG text. Points a log axis cannot show (x or y not finite and positive) are
/// left out.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let shown = points_where(series, |x, y| {
        x.is_finite() && x > 0.0 && y.is_finite() && y > 0.0
    });
    let mut svg = String::new();
    draw(&mut svg, [title, x_label, y_label], series, &shown)
        // The SVG backend writes into a String and the ranges are finite and positive.
        .unwrap_or_else(|e| unreachable!("plotters failed on an in-memory SVG: {e}"));
    svg.push('\n');
    svg
}

/// Each series' points that `keep` accepts (what the chart's axes can show).
fn points_where(series: &[Series], keep: impl Fn(f64, f64) -> bool) -> Vec<Vec<(f64, f64)>> {
    series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .copied()
                .filter(|&(x, y)| keep(x, y))
                .collect()
        })
        .collect()
}

/// The axis ranges: the data's x extent, and y widened to whole decades.
fn ranges(points: impl Iterator<Item = (f64, f64)>) -> ((f64, f64), (f64, f64)) {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in points {
        (x0, x1) = (x0.min(x), x1.max(x));
        (y0, y1) = (y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (1.0, 2.0, 1.0, 10.0); // nothing to show
    }
    if x0 >= x1 {
        x1 = x0 * 2.0;
    }
    let (d0, d1) = (y0.log10().floor(), y1.log10().ceil());
    ((x0, x1), (10f64.powf(d0), 10f64.powf(d1.max(d0 + 1.0))))
}

/// Draws `series` (with the points of each that are `shown`) under `[title, x label, y label]`.
fn draw(
    svg: &mut String,
    [title, x_label, y_label]: [&str; 3],
    series: &[Series],
    shown: &[Vec<(f64, f64)>],
) -> Result<(), String> {
    let ((x0, x1), (y0, y1)) = ranges(shown.iter().flatten().copied());
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let root = SVGBackend::with_string(svg, (760, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((x0..x1).log_scale().base(2.0), (y0..y1).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&|x| format!("{x}"))
        .light_line_style(WHITE)
        .draw()
        .map_err(e)?;
    draw_lines(&mut chart, series, shown)?;
    root.present().map_err(e)
}

/// The series' lines and dots, and the legend, on `chart` (log or linear axes alike).
fn draw_lines<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    series: &[Series],
    shown: &[Vec<(f64, f64)>],
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    for (i, (s, pts)) in series.iter().zip(shown).enumerate() {
        let color = COLORS[i % LINE_COLORS];
        let style = color.stroke_width(2);
        let line = if s.dashed {
            chart.draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style))
        } else {
            chart.draw_series(LineSeries::new(pts.clone(), style))
        };
        let dashed = s.dashed;
        line.map_err(e)?
            .label(s.label.as_str())
            .legend(move |(x, y)| {
                let ends = vec![(x, y), (x + 20, y)];
                if dashed {
                    DashedPathElement::new(ends, 6, 4, style).into_dyn()
                } else {
                    PathElement::new(ends, style).into_dyn()
                }
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(e)?;
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

/// A chart with linear axes (values that may be zero or negative, such as gains), the
/// ranges widened by a tenth on each side.
pub fn linear_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let shown = points_where(series, |x, y| x.is_finite() && y.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, 0.0f64, 0.0f64);
    for &(x, y) in shown.iter().flatten() {
        (x0, x1) = (x0.min(x), x1.max(x));
        (y0, y1) = (y0.min(y), y1.max(y));
    }
    if x0 >= x1 {
        (x0, x1) = (x0.min(0.0), x0.max(0.0) + 1.0);
    }
    let pad = ((y1 - y0) * 0.1).max(1.0);
    let mut svg = String::new();
    {
        let mut draw = || -> Result<(), String> {
            let e = |e: DrawingAreaErrorKind<_>| e.to_string();
            let root = SVGBackend::with_string(&mut svg, (760, 460)).into_drawing_area();
            root.fill(&WHITE).map_err(e)?;
            let mut chart = ChartBuilder::on(&root)
                .caption(title, ("sans-serif", 15))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(x0..x1, (y0 - pad)..(y1 + pad))
                .map_err(e)?;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .light_line_style(WHITE)
                .draw()
                .map_err(e)?;
            draw_lines(&mut chart, series, &shown)?;
            root.present().map_err(e)
        };
        draw().unwrap_or_else(|e| unreachable!("plotters failed on an in-memory SVG: {e}"));
    }
    svg.push('\n');
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_has_every_series_and_escapes_labels() {
        let s = [
            Series {
                label: "a & b".into(),
                points: vec![(4.0, 1.5), (8.0, 3.0), (16.0, 0.0)],
                dashed: false,
            },
            Series {
                label: "c".into(),
                points: vec![(4.0, 20.0), (8.0, 30.0)],
                dashed: true,
            },
        ];
        let svg = line_chart("t <1>", "x", "y", &s);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a &amp; b") && svg.contains("t &lt;1&gt;"));
        // two dots for the first series (y = 0 cannot be shown on a log axis), two for the second
        assert_eq!(svg.matches("<circle").count(), 4);
        // y from 1 to 100 in decades, x labelled with the CPU counts
        for label in ["1.0", "10.0", "100.0", "4", "8"] {
            assert!(
                svg.contains(&format!("\n{label}\n</text>")),
                "{label}: {svg}"
            );
        }
    }

    #[test]
    fn linear_chart_shows_negative_and_zero_values() {
        let s = [Series {
            label: "gain".into(),
            points: vec![(1.0, -2.0), (2.0, 0.0), (3.0, 5.0)],
            dashed: false,
        }];
        let svg = linear_chart("t", "x", "y", &s);
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("gain"));
    }

    #[test]
    fn empty_chart_is_still_a_chart() {
        assert!(line_chart("t", "x", "y", &[]).contains("</svg>"));
    }
}
