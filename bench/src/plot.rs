//! PNG line charts for the benchmark results (plotters, bitmap backend).
//! Text is drawn with DejaVu Sans embedded from `bench/assets/` (ab_glyph),
//! so plots render the same on any machine, with no system font library.

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;

static FONT: Once = Once::new();

fn register_font() {
    FONT.call_once(|| {
        let bytes: &'static [u8] = include_bytes!("../assets/DejaVuSans.ttf");
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .unwrap_or_else(|_| panic!("embedded DejaVu Sans is a valid font"));
    });
}

/// One line of a chart.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A chart: title, axis labels, lines; `log_y` for a logarithmic y axis.
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub series: Vec<Series>,
    pub log_y: bool,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Why a chart was not drawn.
#[derive(Debug)]
pub enum PlotError {
    NoPoints(std::path::PathBuf),
    /// The drawing backend's message (plotters' errors are generic over
    /// the backend, so their text is what is kept).
    Draw(String),
}

impl std::fmt::Display for PlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlotError::NoPoints(p) => write!(f, "{}: no points to plot", p.display()),
            PlotError::Draw(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for PlotError {}

/// Draws `chart` to a 900×560 PNG at `path`.
pub fn line_chart(path: &Path, chart: &Chart<'_>) -> Result<(), PlotError> {
    register_font();
    let pts = chart.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        return Err(PlotError::NoPoints(path.to_path_buf()));
    }
    if x0 == x1 {
        x1 = x0 + 1.0;
    }
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| PlotError::Draw(e.to_string()))?;
    let mut b = ChartBuilder::on(&root);
    b.caption(chart.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70);
    let series_style = |i: usize| COLORS[i % COLORS.len()];
    macro_rules! draw {
        ($ctx:expr) => {{
            let mut ctx = $ctx;
            ctx.configure_mesh()
                .x_desc(chart.x_label)
                .y_desc(chart.y_label)
                .label_style(("sans-serif", 14))
                .draw()
                .map_err(|e| PlotError::Draw(e.to_string()))?;
            for (i, s) in chart.series.iter().enumerate() {
                let c = series_style(i);
                ctx.draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
                    .map_err(|e| PlotError::Draw(e.to_string()))?
                    .label(s.name.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                    });
                ctx.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(|e| PlotError::Draw(e.to_string()))?;
            }
            ctx.configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(|e| PlotError::Draw(e.to_string()))?;
        }};
    }
    if chart.log_y {
        let lo = (y0.max(1e-9) / 1.5).max(1e-9);
        let hi = y1.max(lo * 10.0) * 1.5;
        draw!(b
            .build_cartesian_2d(x0..x1, (lo..hi).log_scale())
            .map_err(|e| PlotError::Draw(e.to_string()))?);
    } else {
        let hi = if y1 <= 0.0 { 1.0 } else { y1 * 1.1 };
        draw!(b
            .build_cartesian_2d(x0..x1, 0f64.min(y0)..hi)
            .map_err(|e| PlotError::Draw(e.to_string()))?);
    }
    root.present().map_err(|e| PlotError::Draw(e.to_string()))
}

/// Draws `chart` to `bench/results/<file>` (or `results/quick/` under
/// `--quick`) and reports the path written, or the error, on the console.
pub fn save_chart(file: &str, chart: &Chart<'_>) {
    let p = crate::results_path(file);
    match line_chart(&p, chart) {
        Ok(()) => println!("wrote {}", p.display()),
        Err(e) => eprintln!("plot {file}: {e}"),
    }
}
