// Helpers the viewer's panels share (see ui_common.h).
#include "viewer/ui_common.h"

#include "viewer/strings.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>

namespace attnlab::viewer {

std::string fmt(const char* f, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

// A heading line between control groups (ImGui 1.86 has no SeparatorText).
void section(const char* text) {
  ImGui::Spacing();
  ImGui::Separator();
  ImGui::TextColored(kHighlightV4, "%s", text);
}

// ImGui 1.86 wraps at spaces and ASCII punctuation only: it splits "0.219" after the dot and
// breaks Chinese runs arbitrarily. wrap_lines (viewer/strings.h) breaks at spaces and around CJK
// characters, never inside a number or a word, and keeps closing punctuation off the start of a
// line. The lines are cached (app.wrap_cache): the description, the notes and the caveat are drawn
// every frame but change only with the state, the language or the panel's width.
void wrapped(App& app, const std::string& text, const ImVec4* colour) {
  const float width = std::max(40.0f, ImGui::GetContentRegionAvail().x);
  ImFont* font = ImGui::GetFont();
  const float size = ImGui::GetFontSize();
  // Unrounded advances add up over the pieces of a line; ImGui::CalcTextSize, which the line used
  // to be measured with, rounds the sum up as below (imgui.cpp 1.86). The rounded width is an
  // integer, so the lines depend on floor(width) alone: the cache key stays put while a panel's
  // width moves by a fraction of a pixel.
  const std::vector<std::string>& lines = app.wrap_cache.lines(
      text, std::floor(width), font, size,
      [font, size](const std::string& s) {
        return font->CalcTextSizeA(size, FLT_MAX, 0.0f, s.data(), s.data() + s.size()).x;
      },
      [](float w) { return static_cast<float>(static_cast<int>(w + 0.99999f)); });
  if (colour) ImGui::PushStyleColor(ImGuiCol_Text, *colour);
  for (const std::string& line : lines) ImGui::TextUnformatted(line.data(), line.data() + line.size());
  if (colour) ImGui::PopStyleColor();
}

// Widths of a radio button, a button and a text with `label` (up to any "##"), as ImGui 1.86 lays
// them out, and SameLine() only when an item that wide still fits on the current line: at the
// minimum window (960 x 600) a row of controls wraps instead of being cut at the panel's edge.
float radio_width(const char* label) {
  return ImGui::GetFrameHeight() + ImGui::GetStyle().ItemInnerSpacing.x + ImGui::CalcTextSize(label, nullptr, true).x;
}
float button_width(const char* label) {
  return ImGui::CalcTextSize(label, nullptr, true).x + 2 * ImGui::GetStyle().FramePadding.x;
}
float text_width(const char* text) { return ImGui::CalcTextSize(text).x; }
void same_line_if_fits(float width) {
  const float right_edge = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  if (ImGui::GetItemRectMax().x + ImGui::GetStyle().ItemSpacing.x + width <= right_edge) ImGui::SameLine();
}

double seconds_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

bool ensure_texture(App& app, SDL_Texture*& tex, int& tex_w, int& tex_h, int w, int h) {
  if (tex && tex_w == w && tex_h == h) return true;
  if (tex) SDL_DestroyTexture(tex);
  tex = SDL_CreateTexture(app.renderer, SDL_PIXELFORMAT_RGBA32, SDL_TEXTUREACCESS_STREAMING, w, h);
  if (!tex) {
    set_status(app, std::string("SDL_CreateTexture: ") + SDL_GetError());
    return false;
  }
  SDL_SetTextureScaleMode(tex, SDL_ScaleModeNearest);
  tex_w = w;
  tex_h = h;
  return true;
}

const char* step_name(Lang l, int step) {
  static constexpr S names[] = {S::Step1, S::Step2, S::Step3, S::Step4};
  return tr(l, names[std::clamp(step, 1, 4) - 1]);
}

}  // namespace attnlab::viewer
