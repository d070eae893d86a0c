//! Plotters pieces shared by the run report's charts ([`crate::report`]) and the bench's
//! ([`crate::bench`]): drawing an SVG into a string, the font, the colour palette, the legend
//! box and its line swatches. It knows nothing of runs or benches.

use std::error::Error;

use plotters::chart::MeshStyle;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;

/// The font of every label.
pub const FONT: &str = "sans-serif";

/// What a drawing closure returns; plotters' errors are boxed.
pub type DrawResult<T = ()> = Result<T, Box<dyn Error>>;

/// Tableau's ten colours (red moved last: the report draws faults in red) plus two.
pub const PALETTE: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
    RGBColor(127, 127, 127),
    RGBColor(214, 39, 40),
    RGBColor(57, 59, 121),
    RGBColor(99, 121, 57),
];

/// The colour of series number `index`, cycling through [`PALETTE`].
pub fn palette(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

/// `#rrggbb` of a colour.
pub fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// Draws a `width` × `height` chart on white with `draw` and returns the SVG text.
pub fn svg(
    width: u32,
    height: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> DrawResult,
) -> anyhow::Result<String> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (width, height)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
        draw(&root).map_err(|e| anyhow::anyhow!("chart: {e}"))?;
        root.present().map_err(|e| anyhow::anyhow!("chart: {e}"))?;
    }
    Ok(text)
}

/// The mesh with the labels in [`FONT`]; the caller adds descriptions and formatters.
pub fn mesh<'a, 'b, 'c, X, Y>(
    chart: &'c mut ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>,
) -> MeshStyle<'a, 'c, X, Y, SVGBackend<'b>>
where
    X: Ranged + ValueFormatter<X::ValueType>,
    Y: Ranged + ValueFormatter<Y::ValueType>,
{
    let mut style = chart.configure_mesh();
    style.label_style((FONT, 12));
    style
}

/// The legend entry of a line series: a short stroke in its style.
pub fn swatch(style: ShapeStyle) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style)
}

/// Draws the labelled series' legend at `position`, in a light box.
pub fn legend<'a, 'b: 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, CT>,
    position: SeriesLabelPosition,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(position)
        .border_style(BLACK.mix(0.4))
        .background_style(WHITE.mix(0.9))
        .label_font((FONT, 12))
        .draw()?;
    Ok(())
}
