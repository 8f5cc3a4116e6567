// The walk view (--view walk): the fused kernel's online softmax of the selected row, key tile by
// key tile. Placeholder until the view is written: it says what it will show.
#include "viewer/ui_common.h"

#include "viewer/strings.h"

#include <imgui.h>

namespace attnlab::viewer {

void draw_walk(App& app, const Layout& l) {
  ImGui::SetNextWindowPos(ImVec2(l.heatmap.x, l.heatmap.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.heatmap.w, l.heatmap.h), ImGuiCond_Always);
  ImGui::Begin(fmt("%s###heatmap", tr(app.lang, S::ViewWalk)).c_str(), nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse);
  ImGui::End();
}

}  // namespace attnlab::viewer
