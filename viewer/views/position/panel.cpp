// The position view (--view position): the selected query's scaled scores against the relative
// distance of every key, without position, with RoPE at θ (a slider), ALiBi's line and RoPE alone
// on the query against itself; the sentences that say what each curve shows and the caveats. The
// curves come from viewer/views/position/position_view.h; keys beyond the plot's pixel columns are
// drawn as each column's range (min to max), so a curve of 65536 keys stays a curve. The content
// curves set the y-range; the ALiBi line is clipped, marked where it leaves. Keys the mask hides
// from the query are drawn grey on every curve.
#include "viewer/views/position/position_view.h"

#include "viewer/ui/kit.h"

#include "core/format.h"
#include "viewer/draw/strings.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace attnlab::viewer {
namespace {

constexpr ImU32 kPlain = IM_COL32(170, 170, 170, 255);
constexpr ImU32 kRope = kHighlight;
constexpr ImU32 kAlibi = IM_COL32(90, 200, 120, 255);
constexpr ImU32 kSelf = IM_COL32(90, 150, 255, 255);
constexpr ImU32 kAxis = IM_COL32(130, 130, 130, 255);
constexpr ImU32 kMasked = IM_COL32(110, 110, 110, 160);  // every curve over the keys the mask hides

struct Curve {
  const std::vector<double>* values;
  ImU32 colour;
  float width;
};

// One curve over the plot: x = Δ = pos - j (left: keys after the query, right: keys before it),
// each pixel column the range of the keys it covers; keys the mask hides in kMasked (a column
// whose keys are all hidden).
void draw_curve(ImDrawList* dl, const PositionCurves& c, const Curve& cv, ImVec2 a, ImVec2 b, double lo, double hi) {
  const std::vector<double>& v = *cv.values;
  if (v.empty()) return;
  const int m = c.keys;
  const double dmin = c.pos - (m - 1), dmax = c.pos;
  const float w = b.x - a.x, h = b.y - a.y;
  const auto x_of = [&](double d) { return a.x + static_cast<float>((d - dmin) / std::max(1.0, dmax - dmin)) * w; };
  const auto y_of = [&](double y) { return b.y - static_cast<float>((y - lo) / (hi - lo)) * h; };
  const int cols = std::max(1, static_cast<int>(w));
  if (m <= cols) {
    // One polyline per run of keys on the same side of the mask.
    std::vector<ImVec2> pts;
    for (int j = m - 1; j >= 0; --j) {
      pts.emplace_back(x_of(c.pos - j), y_of(v[j]));
      if (j == 0 || c.masked[j - 1] != c.masked[j]) {
        if (j > 0) pts.emplace_back(x_of(c.pos - j + 1), y_of(v[j - 1]));
        dl->AddPolyline(pts.data(), static_cast<int>(pts.size()), c.masked[j] ? kMasked : cv.colour, 0,
                        c.masked[j] ? 1 : cv.width);
        pts.clear();
      }
    }
    return;
  }
  std::vector<double> mn(cols, std::numeric_limits<double>::infinity()), mx(cols, -std::numeric_limits<double>::infinity());
  std::vector<char> seen(cols, 0);  // a key the query sees in the column
  for (int j = 0; j < m; ++j) {
    const int px = std::clamp(static_cast<int>((c.pos - j - dmin) / (dmax - dmin) * (cols - 1)), 0, cols - 1);
    mn[px] = std::min(mn[px], v[j]);
    mx[px] = std::max(mx[px], v[j]);
    seen[px] |= !c.masked[j];
  }
  for (int px = 0; px < cols; ++px)
    if (mn[px] <= mx[px])
      dl->AddLine(ImVec2(a.x + px, y_of(mn[px])), ImVec2(a.x + px, y_of(mx[px]) - 1), seen[px] ? cv.colour : kMasked, 1);
}

void legend_line(Shell& app, ImU32 colour, const std::string& text) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 at = ImGui::GetCursorScreenPos();
  dl->AddLine(ImVec2(at.x, at.y + app.font_px * 0.55f), ImVec2(at.x + app.font_px * 1.5f, at.y + app.font_px * 0.55f),
              colour, 3 * mark(app));
  ImGui::Dummy(ImVec2(app.font_px * 1.8f, app.font_px));
  ImGui::SameLine();
  // Wrapped beside the swatch (a group keeps the lines after the first under the first): at a
  // large UI scale the ALiBi entry is wider than the panel.
  ImGui::BeginGroup();
  wrapped(app, text);
  ImGui::EndGroup();
}

}  // namespace

void draw_panel(PositionView& v, Shell& app, const Layout& l) {
  const Lang lang = app.lang;
  Session& s = app.session;
  ImGui::SetNextWindowPos(ImVec2(l.heatmap.x, l.heatmap.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.heatmap.w, l.heatmap.h), ImGuiCond_Always);
  ImGui::Begin(fmt("%s###position", ptr(lang, PT::Label)).c_str(), nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
  const PositionCurves& c = v.update(s);
  const Problem& p = s.problem();
  wrapped(app, fmt(ptr(lang, PT::Title), token_label(p.query_tokens(), c.query).c_str(), c.pos), &kHighlightV4);

  // θ: a log slider; the problem's own θ until it is moved.
  // The grab within the slider's range; the text the θ in use, which a --rope beyond the range
  // (or beyond float) may be: a format without '%' is shown as it is.
  const double theta_now = v.theta(s);
  double theta = std::clamp(theta_now, kRopeThetaMin, kRopeThetaMax);
  const std::string theta_text = short_number(theta_now);
  ImGui::TextUnformatted(ptr(lang, PT::Theta));
  ImGui::SameLine();
  ImGui::SetNextItemWidth(std::min(ImGui::GetContentRegionAvail().x, app.font_px * 16));
  // With an odd d_k no θ changes anything drawn: the slider is greyed out, and says why.
  ImGui::BeginDisabled(!c.rope_possible);
  if (slider_double("###ptheta", theta, kRopeThetaMin, kRopeThetaMax, theta_text.c_str(),
                    ImGuiSliderFlags_Logarithmic))
    v.set_theta(theta);
  if (!c.rope_possible && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("%s", fmt(ptr(lang, PT::OddDim), p.d_k()).c_str());
  if (p.mods.rope_theta > 0) {
    // Beside the slider where it fits, else under it (a large UI scale).
    const std::string own =
        fmt("%s (%s)###pown", ptr(lang, PT::UseProblemTheta), short_number(p.mods.rope_theta).c_str());
    same_line_if_fits(button_width(own.c_str()));
    if (ImGui::SmallButton(own.c_str())) v.set_theta(p.mods.rope_theta);
  }
  ImGui::EndDisabled();
  if (c.rope_possible) {
    // A wavelength in positions: three digits when short, whole positions when long (never 2.08476e+06).
    const double wave = rope_wavelength(c.theta, p.d_k() / 2 - 1, p.d_k());
    wrapped(app, fmt(ptr(lang, PT::ThetaHint), format_number(wave < 100 ? "%.3g" : "%.0f", wave).c_str()), &kDimV4);
  } else {
    wrapped(app, fmt(ptr(lang, PT::OddDim), p.d_k()), &kErrorV4);
  }

  // The plot, then the sentences under it.
  // The plot takes what the sentences under it leave, but never less than about half the panel:
  // at a large UI scale the text would leave the curves a strip (the panel scrolls to the rest).
  const float text_h = app.font_px * 11;
  const ImVec2 at = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float plot_h = std::max({app.font_px * 8, ImGui::GetWindowHeight() * 0.45f, avail.y - text_h});
  const ImVec2 a(at.x + app.font_px * 3.5f, at.y + app.font_px * 0.5f);
  const ImVec2 b(at.x + avail.x - app.font_px * 0.5f, at.y + plot_h - app.font_px * 2);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  // The content curves set the range; the ALiBi line is clipped to it.
  const double lo = v.plot_range().lo, hi = v.plot_range().hi;
  dl->AddRect(a, b, kAxis);
  // Zero line and the query's own key (Δ = 0).
  const auto y_of = [&](double y) { return b.y - static_cast<float>((y - lo) / (hi - lo)) * (b.y - a.y); };
  const double dmin = c.pos - (c.keys - 1), dmax = c.pos;
  const auto x_of = [&](double d) { return a.x + static_cast<float>((d - dmin) / std::max(1.0, dmax - dmin)) * (b.x - a.x); };
  if (lo < 0 && hi > 0) dl->AddLine(ImVec2(a.x, y_of(0)), ImVec2(b.x, y_of(0)), kAxis);
  if (dmin <= 0 && dmax >= 0) dl->AddLine(ImVec2(x_of(0), a.y), ImVec2(x_of(0), b.y), IM_COL32(255, 255, 255, 90));
  dl->PushClipRect(a, b, true);
  const float ms = mark(app);  // the curves as thick as their legend's lines, with the text
  draw_curve(dl, c, {&c.alibi, kAlibi, 2 * ms}, a, b, lo, hi);
  draw_curve(dl, c, {&c.self, kSelf, 1.5f * ms}, a, b, lo, hi);
  draw_curve(dl, c, {&c.plain, kPlain, 1.5f * ms}, a, b, lo, hi);
  draw_curve(dl, c, {&c.rope, kRope, 2 * ms}, a, b, lo, hi);
  dl->PopClipRect();
  // Where the ALiBi line leaves the plot: a green mark on the lower edge at ±|Δ| (lo < 0: the
  // content range includes 0, where the line starts).
  const double exit_distance = -lo / c.slope;
  const bool alibi_leaves = c.slope > 0 && exit_distance < std::max(std::abs(dmin), std::abs(dmax));
  if (alibi_leaves)
    for (const double d : {-exit_distance, exit_distance}) {
      if (d < dmin || d > dmax) continue;
      const float x = x_of(d), t = app.font_px * 0.35f;
      dl->AddTriangleFilled(ImVec2(x - t, b.y - t * 1.6f), ImVec2(x + t, b.y - t * 1.6f), ImVec2(x, b.y), kAlibi);
    }
  // Axis labels: the ends of Δ and of the scores. Δ's title goes between the ends where it clears
  // them, else on the line under them (shortened only where the panel is narrower than it).
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  const std::string left = std::to_string(static_cast<long long>(dmin));
  const std::string right = std::to_string(static_cast<long long>(dmax));
  const float left_w = ImGui::CalcTextSize(left.c_str()).x, right_w = ImGui::CalcTextSize(right.c_str()).x;
  dl->AddText(ImVec2(a.x, b.y + 2), text, left.c_str());
  dl->AddText(ImVec2(b.x - right_w, b.y + 2), text, right.c_str());
  const std::string axis = fit_text(ptr(lang, PT::AxisDistance), avail.x);
  const float axis_w = ImGui::CalcTextSize(axis.c_str()).x, gap = app.font_px * 0.5f;
  const float axis_x = (a.x + b.x - axis_w) / 2;
  if (axis_x >= a.x + left_w + gap && axis_x + axis_w + gap <= b.x - right_w)
    dl->AddText(ImVec2(axis_x, b.y + 2), text, axis.c_str());
  else
    dl->AddText(ImVec2(std::clamp(axis_x, at.x, at.x + avail.x - axis_w), b.y + 2 + ImGui::GetTextLineHeight()), text,
                axis.c_str());
  dl->AddText(ImVec2(at.x, a.y), text, format_number("%.3g", hi).c_str());
  dl->AddText(ImVec2(at.x, b.y - app.font_px), text, format_number("%.3g", lo).c_str());
  // The score axis: its title inside the plot's top-left corner (the margin holds its two ends),
  // and its 0 beside the zero line where that clears them.
  dl->AddText(ImVec2(a.x + gap * 0.5f, a.y + 2), ImGui::ColorConvertFloat4ToU32(kDimV4), fit_text(ptr(lang, PT::AxisScore), b.x - a.x - gap).c_str());
  if (lo < 0 && hi > 0) {
    const float y0 = y_of(0) - app.font_px * 0.5f;
    if (y0 > a.y + app.font_px * 1.2f && y0 < b.y - app.font_px * 2.2f) dl->AddText(ImVec2(at.x, y0), text, "0");
  }
  // The key under the cursor: its four values.
  ImGui::InvisibleButton("##pplot", ImVec2(avail.x, plot_h));
  if (ImGui::IsItemHovered() && c.keys > 0) {
    const float mx = ImGui::GetIO().MousePos.x;
    const double d = dmin + (mx - a.x) / std::max(1.f, b.x - a.x) * (dmax - dmin);
    const int j = std::clamp(static_cast<int>(std::lround(c.pos - d)), 0, c.keys - 1);
    const auto num = [](const std::vector<double>& x, int k) {
      return x.empty() ? std::string("—") : format_number("%.4g", x[k]);
    };
    std::string tip = fmt(ptr(lang, PT::Tip), j, c.pos - j, num(c.plain, j).c_str(), num(c.rope, j).c_str(),
                          num(c.alibi, j).c_str(), num(c.self, j).c_str());
    if (c.masked[j]) tip += std::string("\n") + ptr(lang, PT::TipMasked);
    ImGui::SetTooltip("%s", tip.c_str());
  }

  legend_line(app, kPlain, ptr(lang, PT::Plain));
  if (c.rope_possible) {
    legend_line(app, kRope, ptr(lang, PT::Rope));
    legend_line(app, kSelf, ptr(lang, PT::Self));
  }
  const std::string slope = format_number("%.4g", c.slope);
  const std::string slope_source =
      c.slope_given        ? std::string(ptr(lang, PT::SlopeGiven))
      : c.slope_heads == 1 ? std::string(ptr(lang, PT::SlopeStandardOne))
                           : fmt(ptr(lang, PT::SlopeStandard), c.slope_heads);
  legend_line(app, kAlibi, fmt(ptr(lang, PT::Alibi), slope.c_str(), slope_source.c_str()));
  if (c.masked_keys > 0) legend_line(app, kMasked, fmt(ptr(lang, PT::MaskedKeys), c.masked_keys, c.keys));
  if (alibi_leaves) {
    const auto far = std::min_element(c.alibi.begin(), c.alibi.end());
    wrapped(app, fmt(ptr(lang, PT::AlibiLeaves), format_number("%.3g", lo).c_str(), format_number("%.4g", exit_distance).c_str(),
                     format_number("%.4g", *far).c_str()),
            &kDimV4);
  }
  if (c.shift_error >= 0)
    wrapped(app, fmt(ptr(lang, PT::Shift), kPositionShift, format_number("%.2g", c.shift_error).c_str()));
  wrapped(app, fmt(ptr(lang, c.alibi_on ? PT::Sentence : PT::SentenceAlibiOff), slope.c_str(), slope_source.c_str()),
          &kDimV4);
  wrapped(app, ptr(lang, c.rope_possible ? PT::Lesson : PT::LessonOddDim));
  wrapped(app, ptr(lang, PT::Caveats), &kDimV4);
  ImGui::End();
}

}  // namespace attnlab::viewer
