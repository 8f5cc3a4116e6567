// The precision view (--view precision): the error of every cell of the current step against the
// fp64 reference chain, absolute or relative to the row's scale, on a log colour scale (max-pooled
// per pixel when the matrix has more cells than the plot has pixels), its max, mean and where the
// max sits, a histogram of log10 error, and the exact cell under the pointer (the run's value, fp64,
// their difference and its distance in ulps of the run's precision). The numbers come from
// viewer/views/precision/precision_view.h; the reference is the view's companion run.
#include "viewer/views/precision/precision_view.h"

#include "viewer/ui/kit.h"

#include "core/format.h"
#include "viewer/draw/strings.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace attnlab::viewer {
namespace {

std::string num(double v) {
  if (std::isinf(v)) return v < 0 ? "−∞" : "∞";
  if (v == 0) return "0";
  return format_number("%.3g", v);
}

void histogram(Shell& app, const ErrorMap& m, float height) {
  const Lang lang = app.lang;
  std::vector<float> counts(m.hist.begin(), m.hist.end());
  const float top = *std::max_element(counts.begin(), counts.end());
  ImGui::TextColored(kDimV4, "%s", tr(lang, S::PrecHist));
  const float w = ImGui::GetContentRegionAvail().x;
  ImGui::PlotHistogram("##prec_hist", counts.data(), static_cast<int>(counts.size()), 0, nullptr, 0,
                       std::max(1.0f, top), ImVec2(w, height));
  // The decade ticks under the bars.
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 lo = ImGui::GetItemRectMin(), hi = ImGui::GetItemRectMax();
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  const float per_decade = (hi.x - lo.x) / (kHistHi - kHistLo);
  for (int d = kHistLo; d <= kHistHi; d += 2) {
    const std::string t = std::to_string(d);
    const float x = lo.x + per_decade * (d - kHistLo);
    const float tw = ImGui::CalcTextSize(t.c_str()).x;
    dl->AddLine(ImVec2(x, hi.y), ImVec2(x, hi.y + 4), text);
    dl->AddText(ImVec2(std::clamp(x - tw / 2, lo.x, hi.x - tw), hi.y + 4), text, t.c_str());
  }
  ImGui::Dummy(ImVec2(w, app.font_px * 1.2f));
  ImGui::TextColored(kDimV4, tr(lang, S::PrecHistAxis), kHistPerDecade, kHistLo, kHistHi, m.zeros);
}

}  // namespace

void draw_panel(PrecisionView& v, Shell& app, const Layout& l) {
  const Lang lang = app.lang;
  Session& c = app.session;
  const int step = app.play.step();
  const PrecisionView::Status st = v.update(c, step, v.kind());
  const int shown = st == PrecisionView::Status::Ok ? v.step() : step;
  const std::string title = fmt("%s  ·  %s  ·  %s###heatmap", tr(lang, S::ViewPrecision),
                                fmt(tr(lang, S::StepOf), shown).c_str(), step_name(lang, shown, c.problem()));
  begin_centre(l, title);
  // The settings and the explanation, scrolled where with them the map would keep less than its
  // minimum: the figures as laid out (below_h), the column labels and a map 5 lines tall.
  begin_header(v.header, "##prec_head", v.below_h + map_min_height());
  const char* prec = to_string(c.precision()).data();
  ImGui::TextColored(kHighlightV4, "%s: %s", tr(lang, S::RunPrecision), prec);
  same_line_if_fits(radio_width(tr(lang, S::PrecAbs)));
  if (ImGui::RadioButton(tr(lang, S::PrecAbs), v.kind() == ErrorKind::Abs)) v.set_kind(ErrorKind::Abs);
  same_line_if_fits(radio_width(tr(lang, S::PrecRel)));
  if (ImGui::RadioButton(tr(lang, S::PrecRel), v.kind() == ErrorKind::Rel)) v.set_kind(ErrorKind::Rel);
  map_view_controls(app, true);
  wrapped_capped(app, fmt(tr(lang, S::PrecDescription), prec, format_number("%.6g", c.problem().temperature).c_str()),
                 kExplanationShare, &kDimV4);
  if (v.kind() == ErrorKind::Rel) wrapped_capped(app, tr(lang, S::PrecRelDef), kExplanationShare / 2, &kDimV4);
  end_header(v.header);
  const float below_top = ImGui::GetCursorPosY();
  if (st == PrecisionView::Status::Streamed) {
    wrapped(app, fmt(tr(lang, S::PrecNeedsStages), kKeepStagesMaxTokens, c.n(), kKeepStagesMaxTokens), &kHighlightV4);
    ImGui::End();
    return;
  }
  if (st == PrecisionView::Status::Failed) {
    wrapped(app, fmt(tr(lang, S::PrecRefError), reference_error_of(c).text(lang).c_str()), &kErrorV4);
    ImGui::End();
    return;
  }
  if (st != PrecisionView::Status::Ok) {
    ImGui::TextColored(kHighlightV4, "%s", tr(lang, S::PrecComputing));
    ImGui::End();
    return;
  }
  if (v.output_only()) wrapped(app, tr(lang, S::FusedOnlyOutput), &kHighlightV4);
  const ErrorMap& m = v.map();
  const Problem& p = c.problem();
  const std::vector<std::string>& cols = c.column_labels(shown);
  if (m.max == 0) {
    wrapped(app, tr(lang, S::PrecExact), &kHighlightV4);
  } else if (m.arg_row >= 0) {
    const CellError at = v.cell(c, m.arg_row, m.arg_col);
    wrapped(app,
            fmt(tr(lang, S::PrecSummary), num(m.max).c_str(), num(at.ulps).c_str(), num(m.mean).c_str(), m.zeros,
                m.rows * m.cols - m.masked) +
                "  ·  " +
                fmt(tr(lang, S::DiffMaxAt), token_label(p.query_tokens(), m.arg_row).c_str(),
                    m.arg_col < static_cast<int>(cols.size()) ? cols[m.arg_col].c_str() : "?"),
            &kHighlightV4);
  }
  if (m.non_finite > 0) wrapped(app, fmt(tr(lang, S::PrecNonFinite), m.non_finite), &kErrorV4);
  v.below_h = ImGui::GetCursorPosY() - below_top;

  const float fp = app.font_px;
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float hist_h = std::clamp(avail.y * 0.2f, fp * 3, fp * 6);
  // The histogram (with its title, axis and caption) only where the map keeps at least half the
  // room: at a large UI scale in a small window the map comes first.
  const bool show_hist = avail.y - hist_h - fp * 4.6f >= std::max(avail.y * 0.5f, fp * 6);
  const Rect area{origin.x, origin.y + fp * 0.3f, avail.x,
                  std::max(0.0f, show_hist ? avail.y - hist_h - fp * 4.6f : avail.y - fp * 0.6f)};
  const ValueRange range = m.colour_range();
  char key[160];
  std::snprintf(key, sizeof key, "prec|%llu|%d|%d|%d", static_cast<unsigned long long>(c.revision()), shown,
                static_cast<int>(v.kind()), v.computed());
  const MapPlot mp = draw_map(app, area, m.rows, m.cols, p.query_tokens(), cols, c.query(), key, [&](const PlotGeometry& g) {
    RasterInput in;
    in.values = m.err.data();
    in.rows = m.rows;
    in.cols = m.cols;
    in.range = range;
    in.log_scale = true;
    in.pool = PoolMode::Max;  // a pooled pixel shows the largest error of its block
    return rasterize(in, g);
  });
  app.range = range;
  app.range_log = true;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  v.map_label_scale = mp.label_scale;
  v.map_all_labels = mp.all_labels;
  v.map_too_small = mp.too_small;
  if (mp.g.px_w > 0) {
    const Rect& L = mp.legend;
    const float bar_h = std::min(mp.g.h, std::max(fp * 6, L.h * 0.55f));
    draw_colour_bar(dl, L.x, mp.g.y, fp * 0.9f, bar_h, viridis_table(), legend_labels(range, true));
    float y = mp.g.y + bar_h + fp * 0.6f;
    // The legend's words broken by the lab's line breaking (ImGui's breaks at spaces only, which
    // Chinese has few of). Where the scale is clamped (kLogDecades below the largest error, as the
    // chain's log scale), it says below what the errors take the bottom colour.
    char lo_text[32];
    std::snprintf(lo_text, sizeof lo_text, "%.2e", range.lo);
    const std::string zero = m.colour_clamped() ? fmt(tr(lang, S::PrecLegendClamped), static_cast<int>(kLogDecades), lo_text)
                                                : std::string(tr(lang, S::PrecLegendZero));
    for (const std::string& words : {std::string(tr(lang, S::PrecLegendLog)), zero}) {
      ImGui::SetCursorScreenPos(ImVec2(L.x, y));
      ImGui::BeginGroup();  // every line at the legend's x
      wrapped_at(app, words, L.w);
      ImGui::EndGroup();
      y = ImGui::GetCursorScreenPos().y + fp * 0.2f;
    }
    if (m.masked > 0) {
      draw_hatch(dl, ImVec2(L.x, y), ImVec2(L.x + fp * 0.9f, y + fp), mark(app));
      dl->AddText(ImVec2(L.x + fp * 1.2f, y), text, tr(lang, S::Masked));
      y += fp * 1.4f;
    }
    pooled_map_note(app, mp.g, L.x, y, L.w, tr(lang, S::PoolLargestError));
  }
  if (show_hist) {
    ImGui::SetCursorScreenPos(ImVec2(origin.x, area.bottom() + fp * 0.6f));
    histogram(app, m, hist_h);
  }

  if (mp.hover) {
    const CellError e = v.cell(c, mp.hover->row, mp.hover->col);
    ImGui::BeginTooltip();
    ImGui::Text("%s: %s", tr(lang, S::TipStage), step_name(lang, shown, c.problem()));
    ImGui::Text("%s: %s", tr(lang, S::TipQuery), indexed_label(p.query_tokens(), e.row).c_str());
    ImGui::Text("%s: %s (#%d)", tr(lang, shown == 4 ? S::TipOutputDim : S::TipKey),
                e.col < static_cast<int>(cols.size()) ? cols[e.col].c_str() : "?", e.col);
    if (e.masked) {
      ImGui::Text("%s", tr(lang, S::TipMasked));
    } else {
      ImGui::Text("%s: %.9g", fmt(tr(lang, S::PrecTipRun), prec).c_str(), e.value);
      ImGui::Text("%s: %.17g", tr(lang, S::PrecTipFp64), e.ref);
      ImGui::Text("%s: %s", tr(lang, S::PrecTipAbs), num(e.abs_err).c_str());
      ImGui::Text("%s: %s", tr(lang, S::PrecTipRel), num(e.rel_err).c_str());
      ImGui::Text("%s: %s", fmt(tr(lang, S::PrecTipUlps), prec).c_str(), num(e.ulps).c_str());
    }
    ImGui::EndTooltip();
  }
  ImGui::End();
}

}  // namespace attnlab::viewer
