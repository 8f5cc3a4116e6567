// The caveat bar at the bottom (mask sentence, caveat, the newest status or refusal) and the F1
// key help window.
#include "viewer/app/app.h"
#include "viewer/ui/kit.h"

#include "core/stats.h"
#include "viewer/draw/strings.h"

#include <imgui.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {

// ---- caveat bar and help ----------------------------------------------------------------------

void draw_caveat(App& app, const Layout& l) {
  const Lang lang = app.lang;
  Session& c = app.session;
  ImGui::SetNextWindowPos(ImVec2(l.caveat.x, l.caveat.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.caveat.w, l.caveat.h), ImGuiCond_Always);
  ImGui::Begin("###caveat", nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoBringToFrontOnFocus |
                   ImGuiWindowFlags_NoScrollbar);
  const std::string line = app.shown_view().mask_sentence(c, lang) + " " + caveat(lang);
  wrapped(app, line);
  // A fresh status (screenshot saved, copied) is newer than any refusal still standing.
  if (!app.status.empty() && seconds_now() < app.status_until) {
    ImGui::TextColored(kHighlightV4, "%s", app.status.c_str());
  } else if (!c.error().empty()) {
    ImGui::TextColored(kErrorV4, "%s%s", tr(lang, S::ErrorPrefix), c.error_text(lang).c_str());
  } else {
    ImGui::TextColored(kDimV4, "%s", keyboard_line(app));
  }
  ImGui::End();
}

void draw_help(App& app) {
  if (!app.show_help) return;
  const Lang lang = app.lang;
  const ImVec2 ds = ImGui::GetIO().DisplaySize;
  ImGui::SetNextWindowPos(ImVec2(ds.x / 2, ds.y / 2), ImGuiCond_Always, ImVec2(0.5f, 0.5f));
  bool open = true;
  ImGui::Begin(fmt("%s###help", tr(lang, S::Keys)).c_str(), &open,
               ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoCollapse);
  if (ImGui::BeginTable("keys", 2, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
    for (const auto& [k, d] : key_help(lang, app.shown_view().step_keys_help(lang))) {
      ImGui::TableNextRow();
      ImGui::TableSetColumnIndex(0);
      ImGui::TextColored(kHighlightV4, "%s", k.c_str());
      ImGui::TableSetColumnIndex(1);
      ImGui::TextUnformatted(d.c_str());
    }
    ImGui::EndTable();
  }
  ImGui::End();
  if (!open) app.show_help = false;
}

}  // namespace attnlab::viewer
