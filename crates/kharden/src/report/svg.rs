//! A small SVG line chart: log2 x axis (CPU counts), log10 y axis, one polyline per series.

use std::fmt::Write;

pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

const COLORS: &[&str] = &[
    "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02",
];

pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let (w, h, left, right, top, bottom) = (760.0, 460.0, 70.0, 200.0, 40.0, 50.0);
    let pts = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x.log2());
        x1 = x1.max(x.log2());
        y0 = y0.min(y.max(1e-9).log10());
        y1 = y1.max(y.max(1e-9).log10());
    }
    if x0 >= x1 {
        x1 = x0 + 1.0;
    }
    y0 = y0.floor();
    y1 = y1.ceil().max(y0 + 1.0);
    let px = |x: f64| left + (x.log2() - x0) / (x1 - x0) * (w - left - right);
    let py = |y: f64| top + (1.0 - (y.max(1e-9).log10() - y0) / (y1 - y0)) * (h - top - bottom);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{left}" y="22" font-size="15">{}</text>"#,
        escape(title)
    );
    let (plot_bottom, plot_right) = (h - bottom, w - right);
    let _ = writeln!(
        s,
        r#"<line x1="{left}" y1="{plot_bottom}" x2="{plot_right}" y2="{plot_bottom}" stroke="black"/><line x1="{left}" y1="{top}" x2="{left}" y2="{plot_bottom}" stroke="black"/>"#
    );
    let mut xt = x0.floor();
    while xt <= x1 {
        let x = px(2f64.powf(xt));
        let _ = writeln!(
            s,
            r##"<line x1="{x}" y1="{top}" x2="{x}" y2="{plot_bottom}" stroke="#ddd"/><text x="{x}" y="{}" text-anchor="middle">{}</text>"##,
            plot_bottom + 16.0,
            2f64.powf(xt)
        );
        xt += 1.0;
    }
    for e in y0 as i32..=y1 as i32 {
        let y = py(10f64.powi(e));
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{y}" x2="{plot_right}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            left - 6.0,
            y + 4.0,
            10f64.powi(e)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (left + plot_right) / 2.0,
        h - 12.0,
        escape(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">{}</text>"#,
        (top + plot_bottom) / 2.0,
        (top + plot_bottom) / 2.0,
        escape(y_label)
    );
    for (i, ser) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let dash = if ser.dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let path: Vec<String> = ser
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
            path.join(" ")
        );
        for &(x, y) in &ser.points {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                px(x),
                py(y)
            );
        }
        let ly = top + 16.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            plot_right + 10.0,
            plot_right + 30.0,
            plot_right + 35.0,
            ly + 4.0,
            escape(&ser.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
