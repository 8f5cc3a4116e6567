// The ImGui kit every panel draws with (the views' panels, viewer/views/*/panel*.cpp, and the
// app's, viewer/app/*_panel.cpp): the colours outside the viridis scale, printf into a
// std::string, the section heading, wrapped text (cached lines), the widths of a radio button, a
// button and a text as ImGui 1.86 lays them out with SameLine() only where the next item still
// fits, the clock of transient messages, the step names, the centre window, the centre's picture
// and textures, the colour bar and hatch, and draw_map (a matrix as the chain's heatmap, for the
// precision and diff views). It works on the Shell (viewer/ui/shell.h).
#pragma once

#include "viewer/draw/layout.h"
#include "viewer/ui/shell.h"

#include <imgui.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {

// Outside the viridis scale (which has no saturated orange): the selected query row.
constexpr ImU32 kHighlight = IM_COL32(255, 140, 0, 255);
inline const ImVec4 kHighlightV4(1.0f, 0.55f, 0.0f, 1.0f);
inline const ImVec4 kErrorV4(1.0f, 0.45f, 0.45f, 1.0f);
inline const ImVec4 kDimV4(0.7f, 0.7f, 0.7f, 1.0f);
// The colour of the i-th selected query (0: the selected one, kHighlight; then the others,
// Session::queries() order): frames in the heatmap, outlines in the row chart, the table.
ImU32 query_colour(int i);

std::string fmt(const char* f, ...);
// A value as the walk and decode tables print it: 4 significant digits, ±∞ and — for NaN.
std::string value4(double x);
// "[a, b, c, …]": the first max_items values of v by value4 ("—" when empty).
std::string values4(const std::vector<double>& v, std::size_t max_items);
// How many values (most at most) values4 can show in a table column's cells, the same count on
// every row the table's scroll shows and on row `also` (-1: none), each within the column's width:
// 0 where not even one fits (the cell shows "[…]", never a number cut short). Called at the
// column's first cell of a frame, where its width is known; `row(i)` gives row i's values.
std::size_t values_fitting(int rows, int also, std::size_t most,
                           const std::function<const std::vector<double>&(int)>& row);
// The i-th colour of the Okabe-Ito palette (told apart with the common colour-vision
// deficiencies and on a projector): the perf view's series, the decode view's splits.
ImU32 okabe_ito(std::size_t i);
// A heading line between control groups (ImGui 1.86 has no SeparatorText).
void section(const char* text);
// Text wrapped at spaces and around CJK characters (viewer/draw/strings.h wrap_lines), cached.
void wrapped(Shell& app, const std::string& text, const ImVec4* colour = nullptr);
// The same at `width` pixels (a tooltip, which has no width of its own until it is drawn); what
// ImGui::TextWrapped would break anywhere in Chinese text ("6." | "9%"), this breaks between
// wrap_units only.
void wrapped_at(Shell& app, const std::string& text, float width, const ImVec4* colour = nullptr);
// Under a map's legend at (x, y), `width` wide, where g pools cells into pixels: how many a pixel
// holds and what it shows of them (`what`), dim (the chain says the same under its heatmap).
void pooled_map_note(Shell& app, const PlotGeometry& g, float x, float y, float width, const char* what);
// The lines `text` breaks into at `width` pixels in the current font (wrapped_at's, from the
// cache), for a caller that measures them before it draws them.
const std::vector<std::string>& wrapped_lines(Shell& app, const std::string& text, float width);
// `wrapped` in at most `share` of the window's height (at least one line): where the text needs
// more, the last line shown ends in "…" and the whole text is the tooltip. An explanation above a
// plot that would otherwise push the plot out of a small window or a large UI scale.
void wrapped_capped(Shell& app, const std::string& text, float share, const ImVec4* colour = nullptr);
// The share of a centre window's height a map view's explanation may take (wrapped_capped).
constexpr float kExplanationShare = 0.2f;
// `text` shortened with "…" to `width` pixels in the current font (strings.h ellipsize).
std::string fit_text(const std::string& text, float width);
// `text` on one line in `colour`, shortened with "…" to what is left of the window's line, the
// whole text in its tooltip: a status line under a plot, which has one line of room. Returns the
// text as drawn.
std::string text_fit(const std::string& text, const ImVec4& colour);
// A radio button (a selectable) whose label is shortened with "…" to what is left of the window's
// line, the whole label in its tooltip: the controls at a large UI scale in a small window. The
// widget's id stays the label's (a label holding "##" is drawn as it is).
bool radio_fit(const char* label, bool active);
// A table row of one text line (ImGui's: the line and the cell padding above and below it), and
// the height of a table of `rows` such rows, its header rows among them, at most `limit`: a short
// table ends under its last row instead of drawing its column lines through an empty band.
float table_row_height();
float table_fit_height(int rows, float limit);
// A slider over a double (ImGui's SliderScalar): a value typed into it (Ctrl+click) is kept as
// typed, where a float slider would round it to fp32 (1e30 as 1.0000000150474662e+30, 1e40 as inf).
bool slider_double(const char* label, double& v, double lo, double hi, const char* format,
                   ImGuiSliderFlags flags = 0);
// A collapsing header ("label###id") whose label is shortened with "…" to the window's width,
// the whole label in its tooltip.
bool header_fit(const char* label, const char* id, ImGuiTreeNodeFlags flags = 0);
// `text` broken into lines (wrap_lines, cached; wrap_balanced with `balanced`) at `width` pixels,
// joined by '\n', each line that is still too wide (one long word) shortened with "…": a table
// header or a selectable's label.
std::string wrapped_text(Shell& app, const std::string& text, float width, bool balanced = false);
// A selectable whose label is broken into lines (wrap_lines) at the window's width, the id the
// label's: the steps' names, which the learner reads whole.
bool selectable_wrapped(Shell& app, const char* label, bool selected);
// What the panels' own marks (markers, swatches, frames) are multiplied by: layout.h mark_scale.
inline float mark(const Shell& app) { return mark_scale(app.font_px); }
float radio_width(const char* label);
float button_width(const char* label);
float text_width(const char* text);
void same_line_if_fits(float width);
double seconds_now();
// `tex` as a streaming RGBA texture of w x h pixels with nearest-pixel scaling, re-created when
// its size (tex_w, tex_h) changes; false (and the reason on the status line) when SDL refuses.
bool ensure_texture(Shell& app, SDL_Texture*& tex, int& tex_w, int& tex_h, int w, int h);
// Step 1 … 4's name; step 2's names the score mods where p has them.
const char* step_name(Lang l, int step, const Problem& p);

// The centre window (the heatmap's place) of the chain, precision, diff and heads views: fixed, no
// scrolling (the plot takes the wheel). `title` ends in "###heatmap"; its words are shortened with
// "…" where the title bar is too narrow for them. End it with ImGui::End().
void begin_centre(const Layout& l, const std::string& title);
// The centre and the right column together, for a view without the information panel
// (View::info_panel false), with `flags` beside the fixed window's. End it with ImGui::End().
void begin_wide(const Layout& l, const std::string& title, ImGuiWindowFlags flags = 0);

// The part of a panel above its plot (settings, explanations), in a child region of the height
// left (at least 2.5 lines) and scrolled wherever with it what goes under it (the plot, and what
// the panel keeps in view above the plot) would have less than `below_min` pixels: a large UI
// scale in a small window. The header's height as last laid out (the previous frame's) decides;
// it is the same either way, so the choice does not flip from frame to frame. begin_header, the
// header's widgets, end_header (ScrollHeader: layout.h).
void begin_header(ScrollHeader& hd, const char* id, float below_min);
void end_header(ScrollHeader& hd);

// The heatmap's pixels (w x h, packed RGBA) into the one SDL texture (re-created when the size
// changes), kept for the PNG export, with the key of what they show and the raster time.
void upload_texture(Shell& app, std::vector<std::uint32_t> px, int w, int h, const std::string& key,
                    std::chrono::steady_clock::time_point t0);
// Hatched swatch (the legend's "masked" entry and masked cells' look in the legend); `scale`:
// its stripes' width and spacing (mark).
void draw_hatch(ImDrawList* dl, ImVec2 a, ImVec2 b, float scale = 1);
// A vertical colour bar of `table` (its top the table's end), its three labels (top, middle,
// bottom) to the right; on a bar under three lines tall the ends only, under two "bottom ⋯ top"
// beside its middle.
void draw_colour_bar(ImDrawList* dl, float x, float y, float w, float h, const std::array<Rgb8, 256>& table,
                     const std::array<std::string, 3>& labels);

// The labels around a placed plot, as the chain view's heatmap has them and the precision and
// diff maps share. Columns: plan_column_labels (heatmap.h) for the visible columns, whose widths
// width_of(c) gives (a sample of at most ~128 of them, and the last); column_label_height: the
// room above the plot the plan needs at font size fp.
ColumnLabelPlan column_label_plan(const PlotGeometry& g, int labels, const std::function<float(int)>& width_of);
float column_label_height(const ColumnLabelPlan& plan, float fp);
// Every `plan.stride`-th visible column's label above the plot (size_of(c): its measured size),
// centred on the column's visible part, none on a sliver narrower than the label; on two staggered
// lines, shortened with "…", as the plan says.
void draw_column_labels(ImDrawList* dl, const PlotGeometry& g, const std::vector<std::string>& labels,
                        const std::function<ImVec2(int)>& size_of, const ColumnLabelPlan& plan, ImU32 colour);
// Row r's label left of the plot, centred on its visible part, where at least most of a line of
// it is visible.
void draw_row_label(ImDrawList* dl, const PlotGeometry& g, const std::string& label, ImVec2 size, int r,
                    ImU32 colour, float fp);
// The width the labels of a plot's `rows` rows need: the widest up to 64 rows, else the widest of
// a sample of about 128 and the last (an index, the widest of indices); 0 without labels.
float row_labels_width(const std::vector<std::string>& labels, int rows);
// Every how many rows draw_row_ticks labels: 1 while rows are 1.15 lines tall, else tick_stride's.
int row_tick_stride(const PlotGeometry& g, float fp);
// The rows' labels: every row_tick_stride-th (every row's while rows are 1.15 lines tall), none
// within a line of a `marked` row (-1: none; the selected queries), which the caller draws in
// its colour.
void draw_row_ticks(ImDrawList* dl, const PlotGeometry& g, const std::vector<std::string>& labels,
                    const std::function<ImVec2(int)>& size_of, const std::vector<int>& marked, ImU32 colour, float fp);

// A matrix drawn as the chain view's heatmap is, for the precision and diff views: placed in
// `area` with the labels of its visible rows and columns (all where they fit, else ticks, as the
// chain's) and a legend column on the right, the image from `raster` (called only when `key` changes), the selected
// row framed in orange (-1: none). What it placed and the cell under the pointer.
struct MapPlot {
  PlotGeometry g;
  Rect legend;
  std::optional<Cell> hover;
  float label_scale = 1;    // the labels' size, a share of the text's
  bool all_labels = false;  // every visible row's and column's label shown whole
  // Less than two lines of plot (a large UI scale in a small window): no map, the chain's note
  // (make the window larger, or Ctrl −) in its place, g.px_w 0. The map had shrunk to a few pixels
  // or nothing, its colour bar to a strip.
  bool too_small = false;
};
// Wheel zooms, drag pans, double-click shows the whole matrix again (Shell::map_view, shared by
// the precision and diff views); map_view_controls draws the reset button and the zoom.
MapPlot draw_map(Shell& app, const Rect& area, int rows, int cols, const std::vector<std::string>& row_labels,
                 const std::vector<std::string>& col_labels, int highlight_row, const std::string& key,
                 const std::function<std::vector<std::uint32_t>(const PlotGeometry&)>& raster);
// What a map keeps under a scrolled header (begin_header), in pixels: its column labels and a plot
// 5 lines tall, 7 lines in all.
float map_min_height();
// The width a map keeps at least beside a panel's other parts, in lines (font sizes): its row
// labels, a plot 8 lines wide and its legend.
constexpr float kMapMinWidthLines = 17;
// "Reset view" and the zoom of Shell::map_view, on the current line when `same_line` and they fit.
void map_view_controls(Shell& app, bool same_line);

// The transient status line (saved, copied, a refusal worded for the user), for 4 seconds, worded
// when it is drawn in the language shown; a plain string (SDL's own words) in every language.
void set_status(Shell& app, std::function<std::string(Lang)> text);
void set_status(Shell& app, const std::string& text);

}  // namespace attnlab::viewer
