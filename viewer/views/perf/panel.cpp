// The Performance view (--view perf): the series to time (backends, CUDA greyed out with the reason
// where no device answers; variants; precisions; masks; the pass: forward, backward or both; heads,
// d and the N list), Run / Cancel and a progress bar (case in flight, estimate of the time left),
// the chart chosen (time, TFLOP/s, speed-up against a baseline series, roofline, peak memory) drawn
// as points arrive, with a hover tooltip of the exact figures, and a legend with every skipped N
// and its reason (and, when the sweep has backward cases, the backward's FLOP rule, stated once;
// backward series are drawn with hollow markers). The view spans the centre and the right column
// (a chart wants the width). Its logic (series, axes, ticks, ranges, roofline placement, the
// sweep's thread) is viewer/views/perf/perf_view.h; the numbers come from engine/bench.h, the
// engine of `attnlab bench`.
#include "viewer/views/perf/perf_view.h"

#include "viewer/ui/kit.h"

#include "core/backend.h"
#include "core/format.h"
#include "viewer/draw/strings.h"
#include "viewer/session/export.h"
#include "engine/registry.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

namespace attnlab::viewer {
namespace {

constexpr ImU32 kAxis = IM_COL32(200, 200, 200, 255);
constexpr ImU32 kGrid = IM_COL32(70, 70, 80, 255);
constexpr ImU32 kGridMinor = IM_COL32(45, 45, 52, 255);
constexpr ImU32 kRoof = IM_COL32(255, 255, 255, 200);

ImU32 series_colour(std::size_t i) { return okabe_ito(i); }

std::string g3(double v) { return format_number("%.3g", v); }

bool has(const std::vector<std::string>& v, const char* x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// A checkbox over membership of `value` in `list` (order kept as the engine's lists go).
void member_checkbox(const char* label, std::vector<std::string>& list, const char* value,
                     const std::vector<const char*>& order) {
  bool on = has(list, value);
  if (ImGui::Checkbox(label, &on)) {
    std::vector<std::string> next;
    for (const char* v : order)
      if ((v == std::string(value)) ? on : has(list, v)) next.emplace_back(v);
    list = next;
  }
}

// The marker of a series: staged circles, fused squares, the plain baseline diamonds; filled for
// the forward, hollow for the backward.
void marker(ImDrawList* dl, ImVec2 p, float r, ImU32 col, const bench::Case& proto) {
  const bool hollow = proto.backward();
  const float t = std::max(1.5f, r * 0.45f);  // the outline's thickness
  if (proto.variant == "fused") {
    if (hollow) dl->AddRect(ImVec2(p.x - r, p.y - r), ImVec2(p.x + r, p.y + r), col, 0, 0, t);
    else dl->AddRectFilled(ImVec2(p.x - r, p.y - r), ImVec2(p.x + r, p.y + r), col);
  } else if (proto.variant == "plain") {
    dl->AddQuadFilled(ImVec2(p.x, p.y - r * 1.3f), ImVec2(p.x + r * 1.3f, p.y), ImVec2(p.x, p.y + r * 1.3f),
                      ImVec2(p.x - r * 1.3f, p.y), col);
  } else if (hollow) {
    dl->AddCircle(p, r, col, 0, t);
  } else {
    dl->AddCircleFilled(p, r, col);
  }
}

struct Plot {
  ImVec2 a, b;  // the plot rectangle (inside the axes)
  LogAxis x, y;
  std::vector<float> y_labels;  // the middle heights of the y labels drawn
  ImVec2 at(double xv, double yv) const {
    return ImVec2(static_cast<float>(x.map(xv, a.x, b.x)), static_cast<float>(y.map(yv, b.y, a.y)));
  }
};

// The lines frame_axes keeps above the plot (the y axis's title) and below it (the x labels and
// title).
constexpr float kAboveLines = 1.4f, kBelowLines = 2.4f;

// Axes, grid, ticks and titles inside `r0`..`r1`; returns the plot rectangle.
Plot frame_axes(ImDrawList* dl, ImVec2 r0, ImVec2 r1, const LogAxis& x, const LogAxis& y, const char* x_title,
                const char* y_title, float font_px) {
  float label_w = 0;
  for (const Tick& t : y.ticks)
    if (!t.label.empty()) label_w = std::max(label_w, ImGui::CalcTextSize(t.label.c_str()).x);
  const float line = ImGui::GetTextLineHeight();
  Plot p;
  p.x = x;
  p.y = y;
  p.a = ImVec2(r0.x + label_w + font_px * 0.6f, r0.y + line * kAboveLines);
  p.b = ImVec2(r1.x - font_px * 0.8f, r1.y - line * kBelowLines);
  // The title shortened with "…" where the chart is narrower (a large UI scale), never cut mid-glyph.
  dl->AddText(ImVec2(r0.x, r0.y), kAxis, fit_text(y_title, r1.x - r0.x).c_str());
  // The x title centred under the plot, moved left to stay inside the chart, "…" where wider.
  const std::string xt = fit_text(x_title, r1.x - r0.x);
  const float tw = ImGui::CalcTextSize(xt.c_str()).x;
  dl->AddText(ImVec2(std::clamp((p.a.x + p.b.x - tw) / 2, r0.x, r1.x - tw), p.b.y + line * 1.25f), kAxis, xt.c_str());
  dl->PushClipRect(r0, r1, true);
  // The y labels from the bottom up, each a line above the last one drawn (a short plot, at a
  // large UI scale in a small window, had them written over each other); the grid lines all.
  float last_top = 1e9f;
  for (const Tick& t : y.ticks) {
    if (t.value < y.lo * 0.999 || t.value > y.hi * 1.001) continue;
    const float yy = static_cast<float>(y.map(t.value, p.b.y, p.a.y));
    dl->AddLine(ImVec2(p.a.x, yy), ImVec2(p.b.x, yy), t.major ? kGrid : kGridMinor, 1);
    if (!t.label.empty()) {
      const ImVec2 sz = ImGui::CalcTextSize(t.label.c_str());
      if (yy + sz.y / 2 > last_top) continue;
      dl->AddText(ImVec2(p.a.x - sz.x - font_px * 0.3f, yy - sz.y / 2), t.major ? kAxis : IM_COL32(150, 150, 150, 255),
                  t.label.c_str());
      last_top = yy - sz.y / 2;
      p.y_labels.push_back(yy);
    }
  }
  float last_right = -1e9f;
  for (const Tick& t : x.ticks) {
    if (t.value < x.lo * 0.999 || t.value > x.hi * 1.001) continue;
    const float xx = static_cast<float>(x.map(t.value, p.a.x, p.b.x));
    dl->AddLine(ImVec2(xx, p.a.y), ImVec2(xx, p.b.y), t.major ? kGrid : kGridMinor, 1);
    if (!t.label.empty()) {
      const ImVec2 sz = ImGui::CalcTextSize(t.label.c_str());
      if (xx - sz.x / 2 < last_right + font_px * 0.3f) continue;  // labels never overlap
      dl->AddText(ImVec2(xx - sz.x / 2, p.b.y + line * 0.15f), kAxis, t.label.c_str());
      last_right = xx + sz.x / 2;
    }
  }
  dl->PopClipRect();
  dl->AddRect(p.a, p.b, kAxis, 0, 0, 1.5f);
  return p;
}

void centred_note(ImDrawList* dl, ImVec2 a, ImVec2 b, const char* text) {
  const ImVec2 sz = ImGui::CalcTextSize(text);
  dl->AddText(ImVec2((a.x + b.x - sz.x) / 2, (a.y + b.y - sz.y) / 2), IM_COL32(170, 170, 170, 255), text);
}

void point_tooltip(Shell& app, const PerfSnapshot& snap, const PerfSeries& s, const PerfPoint& p) {
  const bench::Result& r = snap.results.at(p.result);
  ImGui::BeginTooltip();
  ImGui::TextUnformatted(fmt(tr(app.lang, S::PerfTip), s.label.c_str(), p.n, format_number("%.4g", r.median_ms).c_str(),
                             format_number("%.4g", r.min_ms).c_str(), format_number("%.4g", r.max_ms).c_str(), r.repeats,
                             format_number("%.3g", r.tflops).c_str(), format_number("%.3g", r.gbs).c_str(),
                             format_bytes(static_cast<double>(r.peak_bytes)).c_str(), r.reference.text(app.lang).c_str(),
                             format_number("%.2e", r.rel_err).c_str(), format_number("%.3g", p.intensity).c_str())
                             .c_str());
  ImGui::EndTooltip();
}

// Time, TFLOP/s or memory against N: one line per series, spread bars (min-max), hover.
// The charts draw into r0..r1 and return their plot (frame_axes').
Plot draw_n_chart(Shell& app, const PerfView& pv, const PerfSnapshot& snap, const std::vector<PerfSeries>& series,
                  ImVec2 r0, ImVec2 r1) {
  const PerfChart chart = pv.chart;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const Lang lang = app.lang;
  double lo = 0, hi = 0;
  const bool any = chart_range(series, chart, lo, hi);
  const double mem_wall = chart == PerfChart::Memory ? snap.host_room : 0;
  if (chart == PerfChart::Memory && mem_wall > 0 && any) hi = std::max(hi, mem_wall);
  const TickUnit unit = chart == PerfChart::Time ? TickUnit::Milliseconds
                        : chart == PerfChart::Memory ? TickUnit::Bytes
                                                     : TickUnit::Plain;
  const LogAxis ya = any ? log_axis(lo, hi, unit) : log_axis(1, 10, unit);
  const LogAxis xa = n_axis(all_ns(series, pv.spec.ns));
  // TFLOP/s: the forward's rule in the title; with backward cases the rule is under the legend.
  const S tflops = has_backward(snap.results) ? S::PerfAxisTflopsRule : S::PerfAxisTflops;
  const S title = chart == PerfChart::Time ? S::PerfAxisMs : chart == PerfChart::Tflops ? tflops : S::PerfAxisMemory;
  const Plot p = frame_axes(dl, r0, r1, xa, ya, tr(lang, S::PerfAxisN), tr(lang, title), app.font_px);
  if (!any) return p;  // draw_panel says why there are no points
  dl->PushClipRect(p.a, p.b, true);
  if (mem_wall > 0) {
    const float yy = p.at(xa.lo, mem_wall).y;
    // A ceiling, drawn as the roofline's are (white, dashed): the series' colours are the cases'.
    for (float x = p.a.x; x < p.b.x; x += 12) dl->AddLine(ImVec2(x, yy), ImVec2(std::min(x + 6, p.b.x), yy), kRoof, 2 * mark(app));
    dl->AddText(ImVec2(p.a.x + 6, yy + 2), kRoof, fmt(tr(lang, S::PerfMemWall), format_tick(mem_wall, TickUnit::Bytes).c_str()).c_str());
  }
  std::vector<ScreenPoint> hits;
  const float r = std::max(3.0f, app.font_px * 0.25f);
  for (std::size_t si = 0; si < series.size(); ++si) {
    const PerfSeries& s = series[si];
    const ImU32 col = series_colour(si);
    std::vector<ImVec2> line;
    for (std::size_t pi = 0; pi < s.points.size(); ++pi) {
      const PerfPoint& pt = s.points[pi];
      const double v = chart == PerfChart::Time ? pt.median_ms : chart == PerfChart::Tflops ? pt.tflops : pt.peak_bytes;
      if (!(v > 0)) continue;  // no figure (a log axis has no place for 0): the tooltip of another chart has the case
      const ImVec2 q = p.at(pt.n, v);
      line.push_back(q);
      if (chart != PerfChart::Memory) {
        const double a = chart == PerfChart::Time ? pt.min_ms : pt.tflops_lo;
        const double b = chart == PerfChart::Time ? pt.max_ms : pt.tflops_hi;
        dl->AddLine(p.at(pt.n, a), p.at(pt.n, b), col, 2 * mark(app));
      }
      hits.push_back({q.x, q.y, si, pi});
    }
    if (line.size() > 1) dl->AddPolyline(line.data(), static_cast<int>(line.size()), col, 0, 2.5f * mark(app));
    for (const ImVec2& q : line) marker(dl, q, r, col, s.proto);
  }
  dl->PopClipRect();
  if (ImGui::IsWindowHovered()) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    const int h = nearest_point(hits, m.x, m.y, app.font_px);
    if (h >= 0) point_tooltip(app, snap, series[hits[h].series], series[hits[h].series].points[hits[h].point]);
  }
  return p;
}

Plot draw_speedup(Shell& app, const PerfView& pv, const std::vector<PerfSeries>& series, ImVec2 r0, ImVec2 r1) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const Lang lang = app.lang;
  const std::size_t base = pv.baseline >= 0 && static_cast<std::size_t>(pv.baseline) < series.size()
                               ? static_cast<std::size_t>(pv.baseline)
                               : default_baseline(series);
  std::vector<std::vector<SpeedupPoint>> ups;
  double lo = 1, hi = 1;
  for (const PerfSeries& s : series) {
    ups.push_back(base < series.size() ? speedup_against(s, series[base]) : std::vector<SpeedupPoint>{});
    for (const SpeedupPoint& u : ups.back()) {
      lo = std::min(lo, u.speedup);
      hi = std::max(hi, u.speedup);
    }
  }
  const LogAxis ya = log_axis(lo, hi);
  const LogAxis xa = n_axis(all_ns(series, pv.spec.ns));
  const std::string title = std::string(tr(lang, S::PerfAxisSpeedup)) +
                            (base < series.size() ? " · " + series[base].label : std::string());
  const Plot p = frame_axes(dl, r0, r1, xa, ya, tr(lang, S::PerfAxisN), title.c_str(), app.font_px);
  dl->PushClipRect(p.a, p.b, true);
  const float y1 = p.at(xa.lo, 1).y;
  dl->AddLine(ImVec2(p.a.x, y1), ImVec2(p.b.x, y1), kRoof, 1.5f * mark(app));
  std::vector<ScreenPoint> hits;
  const float r = std::max(3.0f, app.font_px * 0.25f);
  for (std::size_t si = 0; si < series.size(); ++si) {
    std::vector<ImVec2> line;
    for (std::size_t k = 0; k < ups[si].size(); ++k) {
      line.push_back(p.at(ups[si][k].n, ups[si][k].speedup));
      hits.push_back({line.back().x, line.back().y, si, k});
    }
    if (line.size() > 1)
      dl->AddPolyline(line.data(), static_cast<int>(line.size()), series_colour(si), 0, 2.5f * mark(app));
    for (const ImVec2& q : line) marker(dl, q, r, series_colour(si), series[si].proto);
  }
  dl->PopClipRect();
  if (ImGui::IsWindowHovered()) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    const int h = nearest_point(hits, m.x, m.y, app.font_px);
    if (h >= 0) {
      const SpeedupPoint& u = ups[hits[h].series][hits[h].point];
      ImGui::SetTooltip("%s", fmt(tr(lang, S::PerfTipSpeedup), series[hits[h].series].label.c_str(), u.n,
                                  format_number("%.3g", u.speedup).c_str())
                                  .c_str());
    }
  }
  return p;
}

Plot draw_roofline(Shell& app, const PerfSnapshot& snap, const std::vector<PerfSeries>& series, ImVec2 r0, ImVec2 r1) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const Lang lang = app.lang;
  double x_lo, x_hi, y_lo, y_hi;
  roofline_ranges(series, snap.roofs, x_lo, x_hi, y_lo, y_hi);
  const LogAxis xa = log_axis(x_lo, x_hi), ya = log_axis(y_lo, y_hi);
  const Plot p = frame_axes(dl, r0, r1, xa, ya, tr(lang, S::PerfAxisIntensity), tr(lang, S::PerfAxisGflops), app.font_px);
  dl->PushClipRect(p.a, p.b, true);
  float label_y = p.a.y + 4;
  // The roofs' labels go on top of the series, each on a dark plate: a point under a label had
  // turned "GFLOP/s" into "G□LOP/s".
  std::vector<std::pair<ImVec2, std::string>> labels;
  for (const Roof& roof : snap.roofs) {
    if (roof.ridge() <= 0) continue;
    const double top = roof.ceilings.compute_gflops();
    const bool peak = roof.ceilings.peak_gflops > 0;
    const ImVec2 left = p.at(xa.lo, roof.attainable(xa.lo)), ridge = p.at(roof.ridge(), top),
                 right = p.at(xa.hi, top);
    const ImVec2 pts[] = {left, ridge, right};
    dl->AddPolyline(pts, 3, kRoof, 0, 2.5f * mark(app));
    const std::string gemm = fmt(tr(lang, peak ? S::PerfRoofPeak : S::PerfRoofGemm), roof.backend.c_str(), g3(top).c_str());
    if (peak && roof.ceilings.gemm_gflops > 0) {
      // The SGEMM probe: a point under the roof (what a tuned library reaches), labelled, dashed.
      const float gy = p.at(xa.lo, roof.ceilings.gemm_gflops).y;
      for (float x = p.a.x; x < p.b.x; x += 12) dl->AddLine(ImVec2(x, gy), ImVec2(std::min(x + 6, p.b.x), gy), kRoof, 1.0f);
      const std::string pt = fmt(tr(lang, S::PerfGemmPoint), roof.backend.c_str(), g3(roof.ceilings.gemm_gflops).c_str());
      labels.push_back({ImVec2(p.b.x - ImGui::CalcTextSize(pt.c_str()).x - 6, gy + 2), pt});
    }
    const std::string bw = fmt(tr(lang, S::PerfRoofBw), roof.backend.c_str(), g3(roof.ceilings.bandwidth_gbs).c_str());
    const float gw = ImGui::CalcTextSize(gemm.c_str()).x;
    labels.push_back({ImVec2(std::max(ridge.x, p.b.x - gw - 6), ridge.y - ImGui::GetTextLineHeight() - 2), gemm});
    labels.push_back({ImVec2(p.a.x + 6, label_y), bw});
    label_y += ImGui::GetTextLineHeight();
  }
  std::vector<ScreenPoint> hits;
  const float r = std::max(3.0f, app.font_px * 0.28f);
  for (std::size_t si = 0; si < series.size(); ++si) {
    std::vector<ImVec2> line;
    for (std::size_t pi = 0; pi < series[si].points.size(); ++pi) {
      const PerfPoint& pt = series[si].points[pi];
      line.push_back(p.at(pt.intensity, pt.gflops));
      hits.push_back({line.back().x, line.back().y, si, pi});
    }
    if (line.size() > 1)
      dl->AddPolyline(line.data(), static_cast<int>(line.size()), series_colour(si), 0, 1.5f * mark(app));
    for (const ImVec2& q : line) marker(dl, q, r, series_colour(si), series[si].proto);
  }
  for (const auto& [at, text] : labels) {
    const ImVec2 sz = ImGui::CalcTextSize(text.c_str());
    dl->AddRectFilled(ImVec2(at.x - 2, at.y), ImVec2(at.x + sz.x + 2, at.y + sz.y), IM_COL32(20, 20, 24, 200), 2);
    dl->AddText(at, kRoof, text.c_str());
  }
  dl->PopClipRect();
  for (const Roof& roof : snap.roofs)
    if (roof.ridge() <= 0 && !roof.ceilings.note.empty())
      dl->AddText(ImVec2(p.a.x + 6, p.b.y - ImGui::GetTextLineHeight() - 4), IM_COL32(255, 115, 115, 255),
                  fmt(tr(lang, S::PerfRoofMissing), roof.backend.c_str(), roof.ceilings.note.c_str()).c_str());
  if (ImGui::IsWindowHovered()) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    const int h = nearest_point(hits, m.x, m.y, app.font_px);
    if (h >= 0) point_tooltip(app, snap, series[hits[h].series], series[hits[h].series].points[hits[h].point]);
  }
  return p;
}

void draw_legend(Shell& app, PerfView& pv, const std::vector<PerfSeries>& series) {
  pv.legend_lines.clear();
  const Lang lang = app.lang;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float sw = ImGui::GetTextLineHeight();
  for (std::size_t i = 0; i < series.size(); ++i) {
    const PerfSeries& s = series[i];
    const ImVec2 c = ImGui::GetCursorScreenPos();
    const bool none = s.points.empty();
    marker(dl, ImVec2(c.x + sw / 2, c.y + sw / 2), sw * 0.32f, none ? IM_COL32(110, 110, 110, 255) : series_colour(i),
           s.proto);
    ImGui::Dummy(ImVec2(sw, sw));
    ImGui::SameLine();
    // Wrapped at the panel's width, beside the marker: the whole name, its pass last, stays read.
    const float width = std::max(40.0f, ImGui::GetContentRegionAvail().x);
    ImGui::BeginGroup();
    wrapped_at(app, s.label, width, none ? &kDimV4 : nullptr);
    ImGui::EndGroup();
    pv.legend_lines.push_back(wrapped_lines(app, s.label, width));
    ImGui::Indent(sw * 1.2f);
    // Skipped N with their reasons; consecutive N with one reason are listed once.
    for (std::size_t k = 0; k < s.skipped.size();) {
      std::size_t e = k;
      while (e + 1 < s.skipped.size() && s.skipped[e + 1].reason.en == s.skipped[k].reason.en) ++e;
      std::string ns = std::to_string(s.skipped[k].n);
      if (e > k) ns += "–" + std::to_string(s.skipped[e].n);
      // Where CUDA is off, its cases give the reason the line above the chart gives.
      const std::string why = legend_reason(s.proto.backend, s.skipped[k].reason, pv.cuda_ok, pv.cuda_reason, lang);
      const std::string line = fmt(tr(lang, S::PerfSkippedN), ns.c_str(), why.c_str());
      wrapped(app, line, &kDimV4);
      k = e + 1;
    }
    if (s.pending > 0) ImGui::TextColored(kDimV4, tr(lang, S::PerfPending), static_cast<int>(s.pending));
    ImGui::Unindent(sw * 1.2f);
  }
}

// What the sweep runs: backends, variants, precisions, masks, the pass, heads, d and N.
void settings(Shell& app, PerfView& pv, const PerfSnapshot& snap) {
  const Lang lang = app.lang;
  bench::Spec& sp = pv.spec;
  const bool running = snap.running;
  ImGui::BeginDisabled(running);
  ImGui::TextUnformatted(tr(lang, S::PerfBackends));
  ImGui::SameLine();
  member_checkbox("CPU", sp.backends, "cpu", {"cpu", "cuda"});
  ImGui::SameLine();
  ImGui::BeginDisabled(!pv.cuda_ok);
  member_checkbox("CUDA", sp.backends, "cuda", {"cpu", "cuda"});
  ImGui::EndDisabled();
  if (!pv.cuda_ok && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("%s", fmt(tr(lang, S::PerfCudaOff), cuda_reason_text(pv.cuda_reason, lang).c_str()).c_str());
  same_line_if_fits(text_width(tr(lang, S::PerfVariants)) + 2 * radio_width("staged") + app.font_px * 2);
  ImGui::TextUnformatted(tr(lang, S::PerfVariants));
  ImGui::SameLine();
  member_checkbox(tr(lang, S::TermStaged), sp.variants, "staged", {"staged", "fused"});
  ImGui::SameLine();
  member_checkbox(tr(lang, S::TermFused), sp.variants, "fused", {"staged", "fused"});
  same_line_if_fits(text_width(tr(lang, S::PerfPrecisions)) + 2 * radio_width("fp32") + app.font_px * 2);
  ImGui::TextUnformatted(tr(lang, S::PerfPrecisions));
  ImGui::SameLine();
  member_checkbox("fp32", sp.precisions, "fp32", {"fp32", "bf16"});
  ImGui::SameLine();
  member_checkbox("bf16", sp.precisions, "bf16", {"fp32", "bf16"});
  same_line_if_fits(text_width(tr(lang, S::PerfMasks)) + radio_width(tr(lang, S::MaskNone)) +
                    radio_width(tr(lang, S::MaskCausal)) + app.font_px * 2);
  ImGui::TextUnformatted(tr(lang, S::PerfMasks));
  ImGui::SameLine();
  member_checkbox(tr(lang, S::MaskNone), sp.masks, "none", {"none", "causal"});
  ImGui::SameLine();
  member_checkbox(tr(lang, S::MaskCausal), sp.masks, "causal", {"none", "causal"});
  // The pass, as `attnlab bench --pass`: one of three.
  const struct {
    const char* name;
    S label;
  } passes[] = {{"forward", S::PerfPassForward}, {"backward", S::PerfPassBackward}, {"both", S::PerfPassBoth}};
  float pass_w = text_width(tr(lang, S::PerfPass)) + app.font_px;
  for (const auto& ps : passes) pass_w += radio_width(tr(lang, ps.label));
  same_line_if_fits(pass_w);
  ImGui::TextUnformatted(tr(lang, S::PerfPass));
  const std::string pass_now = bench::passes_name(sp.passes);
  for (const auto& ps : passes) {
    ImGui::SameLine();
    if (ImGui::RadioButton(fmt("%s##perf_pass_%s", tr(lang, ps.label), ps.name).c_str(), pass_now == ps.name))
      sp.passes = bench::parse_passes("pass", ps.name);
  }

  int heads = sp.heads.empty() ? 1 : sp.heads[0], d = sp.ds.empty() ? 64 : sp.ds[0];
  ImGui::TextUnformatted(tr(lang, S::PerfHeads));
  ImGui::SameLine();
  ImGui::SetNextItemWidth(app.font_px * 6);
  if (ImGui::InputInt("##perf_heads", &heads, 1, 4)) sp.heads = {std::clamp(heads, 1, 4096)};
  ImGui::SameLine();
  ImGui::TextUnformatted(tr(lang, S::PerfD));
  ImGui::SameLine();
  ImGui::SetNextItemWidth(app.font_px * 6);
  if (ImGui::InputInt("##perf_d", &d, 16, 64)) sp.ds = {std::clamp(d, 1, kMaxHeadDim)};
  same_line_if_fits(text_width(tr(lang, S::PerfN)) + app.font_px * 10);
  ImGui::TextUnformatted(tr(lang, S::PerfN));
  ImGui::SameLine();
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s", pv.n_text.c_str());
  ImGui::SetNextItemWidth(app.font_px * 9);
  if (ImGui::InputText("##perf_n", buf, sizeof buf)) {
    pv.n_text = buf;
    try {
      sp.ns = parse_n_list("N", pv.n_text);
      pv.n_error.clear();
    } catch (const InputError& e) {
      pv.n_error = e.what();
    }
  }
  ImGui::EndDisabled();
  if (!pv.n_error.empty()) ImGui::TextColored(kErrorV4, "%s", pv.n_error.c_str());
}

// Run (or Cancel), the exports and the progress, and why CUDA is off.
void actions(Shell& app, PerfView& pv, const PerfSnapshot& snap) {
  const Lang lang = app.lang;
  bench::Spec& sp = pv.spec;
  const bool running = snap.running;
  const bool chosen = !sp.backends.empty() && !sp.variants.empty() && !sp.precisions.empty() && !sp.masks.empty();
  if (running) {
    if (ImGui::Button(fmt("%s###perf_run", tr(lang, S::PerfCancel)).c_str())) pv.run.cancel();
  } else {
    ImGui::BeginDisabled(!chosen || !pv.n_error.empty());
    if (ImGui::Button(fmt("%s###perf_run", tr(lang, S::PerfRun)).c_str())) {
      try {
        pv.run.start(sp);
        pv.started = true;
        pv.baseline = -1;
      } catch (const InputError& e) {
        pv.n_error = e.what();
      }
    }
    ImGui::EndDisabled();
  }
  ImGui::SameLine();
  ImGui::BeginDisabled(snap.results.empty() || running);
  if (ImGui::Button(tr(lang, S::PerfExportCsv))) {
    const std::string name = unused_name(export_stem(app.export_dir, "attnlab-perf"), ".csv");
    try {
      write_perf_csv(name, snap.results);
      set_status(app, [name](Lang l) { return fmt(tr(l, S::PerfExported), name.c_str()); });
    } catch (const std::exception& e) {
      set_status(app, [m = message_of(e)](Lang l) { return std::string(tr(l, S::ErrorPrefix)) + m.text(l); });
    }
  }
  ImGui::EndDisabled();
  ImGui::SameLine();
  if (ImGui::Button(tr(lang, S::PerfExportPng))) app.screenshot_requested = true;
  ImGui::SameLine();
  // Progress: cases done, the one in flight, the time left.
  const float frac = snap.total ? static_cast<float>(snap.done) / static_cast<float>(snap.total) : 0.0f;
  std::string overlay;
  if (!pv.started) {
    overlay = tr(lang, S::PerfIdle);
  } else if (snap.measuring) {
    overlay = tr(lang, S::PerfMeasuring);
  } else if (snap.running) {
    const std::string what = snap.in_flight >= 0 ? snap.results[static_cast<std::size_t>(snap.in_flight)].c.label() : "";
    overlay = fmt(tr(lang, S::PerfProgress), static_cast<int>(snap.done), static_cast<int>(snap.total), what.c_str(),
                  duration_text(snap.eta_s).c_str());
  } else if (!snap.error.empty()) {
    overlay = fmt(tr(lang, S::PerfError), snap.error.c_str());
  } else if (snap.cancelled) {
    overlay = fmt(tr(lang, S::PerfCancelled), static_cast<int>(snap.done), static_cast<int>(snap.total));
  } else {
    overlay = fmt(tr(lang, S::PerfDone), static_cast<int>(snap.total), duration_text(snap.elapsed_s).c_str());
  }
  if (!chosen && !running) overlay = tr(lang, S::PerfNothingChosen);
  ImGui::ProgressBar(pv.started ? frac : 0.0f, ImVec2(-1, 0), overlay.c_str());
  // One line, shortened with "…" where the panel is narrower (Chinese at a large UI scale), whole in
  // its tooltip.
  pv.cuda_off_room = pv.cuda_ok ? 0 : ImGui::GetContentRegionAvail().x;
  pv.cuda_off = pv.cuda_ok ? std::string()
                           : text_fit(fmt(tr(lang, S::PerfCudaOff), cuda_reason_text(pv.cuda_reason, lang).c_str()), kDimV4);
  pv.cuda_off_w = pv.cuda_ok ? 0 : text_width(pv.cuda_off.c_str());
}

}  // namespace

void draw_panel(PerfView& v, Shell& app, const Layout& l) {
  const Lang lang = app.lang;
  // The centre and the right column together: a chart wants the width.
  begin_wide(l, fmt("%s###perf", tr(lang, S::ViewPerf)));
  const PerfSnapshot snap = v.run.snapshot();
  // The settings above the chart, scrolled where with them the chart would keep less than its
  // minimum (begin_header); Run and the progress always show.
  // The chart's minimum: Run's rows and the chart chooser as laid out (below_h), the chart's
  // titles and axis labels (frame_axes') and a plot 5 lines tall.
  const float line = ImGui::GetTextLineHeight();
  const float plot_min = line * (kAboveLines + kBelowLines + 5);
  const float chart_min = v.below_h + plot_min;
  // A window too small for both the settings' scrolled strip (two and a half lines) and that
  // minimum (a large UI scale in a small window): the whole panel scrolls instead, the settings
  // whole at its top and the chart at its minimum under them (the chart had shrunk to a line).
  const bool scrolled_before = v.panel_scrolls;
  v.panel_scrolls = v.below_h > 0 && ImGui::GetContentRegionAvail().y < line * 2.5f + chart_min;
  if (v.panel_scrolls) {
    ImGui::BeginChild("##perf_panel", ImVec2(0, 0), false);
    settings(app, v, snap);
    v.settings_header.scrolled = false;
  } else {
    begin_header(v.settings_header, "##perf_controls", chart_min);
    settings(app, v, snap);
    end_header(v.settings_header);
  }
  const float below_top = ImGui::GetCursorPosY();
  actions(app, v, snap);
  const std::vector<PerfSeries> series = build_series(snap.results, lang);

  // The chart chooser, and the baseline for the speed-up chart.
  const struct {
    PerfChart c;
    S label;
  } charts[] = {{PerfChart::Time, S::PerfChartTime},
                {PerfChart::Tflops, S::PerfChartTflops},
                {PerfChart::Speedup, S::PerfChartSpeedup},
                {PerfChart::Roofline, S::PerfChartRoofline},
                {PerfChart::Memory, S::PerfChartMemory}};
  for (std::size_t i = 0; i < std::size(charts); ++i) {
    if (i) same_line_if_fits(radio_width(tr(lang, charts[i].label)));
    if (ImGui::RadioButton(tr(lang, charts[i].label), v.chart == charts[i].c)) v.chart = charts[i].c;
  }
  if (v.chart == PerfChart::Speedup && !series.empty()) {
    const std::size_t base = v.baseline >= 0 && static_cast<std::size_t>(v.baseline) < series.size()
                                 ? static_cast<std::size_t>(v.baseline)
                                 : default_baseline(series);
    ImGui::SameLine();
    ImGui::TextUnformatted(tr(lang, S::PerfBaseline));
    ImGui::SameLine();
    ImGui::SetNextItemWidth(app.font_px * 12);
    if (ImGui::BeginCombo("##perf_base", series[base].label.c_str())) {
      for (std::size_t i = 0; i < series.size(); ++i)
        if (ImGui::Selectable(series[i].label.c_str(), i == base)) v.baseline = static_cast<int>(i);
      ImGui::EndCombo();
    }
  }

  v.below_h = ImGui::GetCursorPosY() - below_top;

  // Chart on the left, legend on the right.
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float legend_w = std::clamp(avail.x * 0.28f, app.font_px * 11, app.font_px * 22);
  const float hint_h = v.chart == PerfChart::Roofline ? ImGui::GetTextLineHeightWithSpacing() * 3 : 0;
  const ImVec2 c0 = ImGui::GetCursorScreenPos();
  const ImVec2 c1(c0.x + avail.x - legend_w - 8, c0.y + std::max(avail.y - hint_h, plot_min));
  ImGui::BeginChild("##perf_chart", ImVec2(c1.x - c0.x, c1.y - c0.y), false, ImGuiWindowFlags_NoScrollbar);
  const Plot p = v.chart == PerfChart::Speedup    ? draw_speedup(app, v, series, c0, c1)
                 : v.chart == PerfChart::Roofline ? draw_roofline(app, snap, series, c0, c1)
                                                  : draw_n_chart(app, v, snap, series, c0, c1);
  // No point on any chart: before Run, say to press it; during a run, that points come; after
  // one, that no case gave any. Points, but none with a figure for this chart: say so.
  double lo = 0, hi = 0;
  if (std::none_of(series.begin(), series.end(), [](const PerfSeries& s) { return !s.points.empty(); }))
    centred_note(ImGui::GetWindowDrawList(), p.a, p.b,
                 tr(lang, !v.started     ? S::PerfPressRun
                          : snap.running ? S::PerfNoPoints
                          : snap.cancelled && snap.done == 0 ? S::PerfCancelledNone
                                                             : S::PerfNoCase));
  else if (v.chart != PerfChart::Speedup && !chart_range(series, v.chart, lo, hi))
    centred_note(ImGui::GetWindowDrawList(), p.a, p.b, tr(lang, S::PerfNoFigure));
  v.plot = {p.a.x, p.a.y, p.b.x - p.a.x, p.b.y - p.a.y};
  v.y_labels = p.y_labels;
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("##perf_legend", ImVec2(legend_w, c1.y - c0.y), true);
  draw_legend(app, v, series);
  if (v.chart == PerfChart::Time || v.chart == PerfChart::Tflops)
    wrapped(app, tr(lang, S::PerfSpread), &kDimV4);
  if (has_backward(snap.results)) {
    wrapped(app, backward_flop_rule_text(lang), &kDimV4);
    if (v.chart == PerfChart::Roofline) wrapped(app, tr(lang, S::PerfRoofBackward), &kDimV4);
  }
  ImGui::EndChild();
  if (hint_h > 0) wrapped(app, tr(lang, S::PerfRoofHint), &kDimV4);
  if (v.panel_scrolls) {
    if (!scrolled_before) ImGui::SetScrollHereY(1.0f);  // on becoming a scroll: down to the chart
    ImGui::EndChild();
  }
  ImGui::End();
}

}  // namespace attnlab::viewer
