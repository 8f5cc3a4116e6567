// The caveat bar at the bottom (mask sentence, caveat, the newest status or refusal) and the F1
// key help window.
#include "viewer/app/app.h"
#include "viewer/ui/kit.h"

#include "core/stats.h"
#include "viewer/draw/strings.h"

#include <imgui.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {

// ---- caveat bar and help ----------------------------------------------------------------------

namespace {

// What the bar says: the mask sentence and the caveat, then the last line in its colour (a fresh
// status, which is newer than any refusal still standing; a refusal; else the keys), each as the
// lines it wraps into at the bar's `width`.
struct CaveatText {
  std::vector<std::string> text, last;
  ImVec4 last_colour = kDimV4;
};
CaveatText caveat_text(App& app, float width) {
  const Lang lang = app.lang;
  Session& c = app.session;
  CaveatText t;
  const float inner = std::max(40.0f, width - 2 * ImGui::GetStyle().WindowPadding.x);
  t.text = wrapped_lines(app, app.shown_view().mask_sentence(c, lang) + " " + caveat(lang), inner);
  std::string last;
  if (app.status && seconds_now() < app.status_until) {
    last = app.status(lang);
    t.last_colour = kHighlightV4;
  } else if (!c.error().empty()) {
    last = tr(lang, S::ErrorPrefix) + c.error_text(lang);
    t.last_colour = kErrorV4;
  } else {
    last = keyboard_line(app);
  }
  t.last = wrapped_lines(app, last, inner);
  return t;
}

}  // namespace

// The layout gives the bar this height (compute_layout's caveat_px), so that a long mask sentence
// at a large UI scale pushes the panels up instead of cutting off the bar's last line. Measured at
// the frame's start and drawn at its end (draw_caveat makes the text again, from the wrap cache):
// the bar then says the status or refusal a panel set during the frame.
float caveat_height(App& app, float width) {
  const CaveatText t = caveat_text(app, width);
  const ImGuiStyle& st = ImGui::GetStyle();
  const float lines = static_cast<float>(t.text.size() + t.last.size());
  return lines * ImGui::GetTextLineHeight() + std::max(0.0f, lines - 1) * st.ItemSpacing.y + 2 * st.WindowPadding.y;
}

void draw_caveat(App& app, const Layout& l) {
  const CaveatText t = caveat_text(app, l.caveat.w);
  ImGui::SetNextWindowPos(ImVec2(l.caveat.x, l.caveat.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.caveat.w, l.caveat.h), ImGuiCond_Always);
  ImGui::Begin("###caveat", nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoBringToFrontOnFocus |
                   ImGuiWindowFlags_NoScrollbar);
  const auto lines = [](const std::vector<std::string>& ls) {
    for (const std::string& line : ls) ImGui::TextUnformatted(line.data(), line.data() + line.size());
  };
  const ImGuiStyle& st = ImGui::GetStyle();
  const float line_h = ImGui::GetTextLineHeight();
  const int text_lines = static_cast<int>(t.text.size()), last_lines = static_cast<int>(t.last.size());
  const float text_h =
      caveat_text_height(ImGui::GetContentRegionAvail().y, text_lines, last_lines, line_h, st.ItemSpacing.y);
  // All of the text's height (the room unbounded): then it is drawn as it always was.
  if (text_h >= caveat_text_height(FLT_MAX, text_lines, last_lines, line_h, st.ItemSpacing.y)) {
    lines(t.text);
  } else {
    // The bar at its largest cannot hold every line: the last ones (keys, status, refusal) stay
    // in sight, and the text above them scrolls with the wheel.
    ImGui::BeginChild("##caveat_text", ImVec2(0, std::max(1.0f, text_h)), false, ImGuiWindowFlags_NoScrollbar);
    lines(t.text);
    ImGui::EndChild();
  }
  ImGui::PushStyleColor(ImGuiCol_Text, t.last_colour);
  lines(t.last);
  ImGui::PopStyleColor();
  ImGui::End();
}

void draw_help(App& app) {
  if (!app.show_help) return;
  const Lang lang = app.lang;
  const ImVec2 ds = ImGui::GetIO().DisplaySize;
  ImGui::SetNextWindowPos(ImVec2(ds.x / 2, ds.y / 2), ImGuiCond_Always, ImVec2(0.5f, 0.5f));
  // Within the window: at a large UI scale the descriptions wrap and the table scrolls (a line
  // had been cut off at the right, out of reach).
  const ImVec2 most(ds.x * 0.96f, ds.y * 0.96f);
  ImGui::SetNextWindowSizeConstraints(ImVec2(0, 0), most);
  bool open = true;
  ImGui::Begin(fmt("%s###help", tr(lang, S::Keys)).c_str(), &open,
               ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoCollapse);
  const auto lines = key_help(lang, app.shown_view().step_keys_help(lang));
  float key_w = 0, desc_w = 0;
  for (const auto& [k, d] : lines) {
    key_w = std::max(key_w, ImGui::CalcTextSize(k.c_str()).x);
    desc_w = std::max(desc_w, ImGui::CalcTextSize(d.c_str()).x);
  }
  const ImGuiStyle& st = ImGui::GetStyle();
  const float frame = 2 * st.WindowPadding.x + 4 * st.CellPadding.x + 3 + st.ScrollbarSize;
  desc_w = std::max(ImGui::GetFontSize() * 8, std::min(desc_w, most.x - frame - key_w));
  if (ImGui::BeginTable("keys", 2, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
    ImGui::TableSetupColumn("key", ImGuiTableColumnFlags_WidthFixed, key_w);
    ImGui::TableSetupColumn("does", ImGuiTableColumnFlags_WidthFixed, desc_w);
    for (const auto& [k, d] : lines) {
      ImGui::TableNextRow();
      ImGui::TableSetColumnIndex(0);
      ImGui::TextColored(kHighlightV4, "%s", k.c_str());
      ImGui::TableSetColumnIndex(1);
      ImGui::TextWrapped("%s", d.c_str());
    }
    ImGui::EndTable();
  }
  ImGui::End();
  if (!open) app.show_help = false;
}

}  // namespace attnlab::viewer
