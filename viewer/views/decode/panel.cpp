// The decode view (--view decode): one new token against a KV cache, drawn from the decode
// kernel's own steps (viewer/views/decode/decode_view.h). Left: the settings (cache, heads, d,
// splits) and the token controls, the token's sentence, the cache as a strip of keys coloured by
// split (brightness: the selected head's weights), its newest keys and the room after them one by
// one, the query heads and the key/value rows they share, each split's partial state (m, l, its
// share of the weight, the first values of acc), the combine's arithmetic merge by merge and the
// output against one pass and fp64. Right: the time per token against the bytes over the
// machine's read rate, the read rate reached, the tokens per second shown, and the caveats. The
// view spans the centre and the right column.
#include "viewer/views/decode/decode_view.h"

#include "viewer/ui/kit.h"

#include "core/format.h"
#include "core/modify.h"
#include "viewer/draw/colormap.h"
#include "viewer/draw/strings.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace attnlab::viewer {
namespace {

constexpr ImU32 kEmpty = IM_COL32(60, 60, 68, 255);
constexpr ImU32 kFloorColour = IM_COL32(255, 255, 255, 170);
constexpr int kAccShown = 4;

ImU32 split_colour(int s) { return okabe_ito(static_cast<std::size_t>(s)); }

// The split colour dimmed by a weight in [0, 1] (sqrt: small weights stay visible).
ImU32 weighted(ImU32 c, double w) {
  const double f = 0.18 + 0.82 * std::sqrt(std::clamp(w, 0.0, 1.0));
  const auto ch = [&](int shift) { return static_cast<int>(((c >> shift) & 0xff) * f); };
  return IM_COL32(ch(IM_COL32_R_SHIFT), ch(IM_COL32_G_SHIFT), ch(IM_COL32_B_SHIFT), 255);
}


// 262144 as "262 144".
// n of a thing, said with DT `one` for one and `many` otherwise.
std::string counted(Lang lang, int n, DT many, DT one) { return fmt(dtr(lang, n == 1 ? one : many), n); }

// "8 query heads over 1 key/value head".
std::string heads_item(Lang lang, int heads, int kv_heads) {
  return fmt(dtr(lang, DT::HeadsItem), counted(lang, heads, DT::QueryHeadCount, DT::QueryHeadOne).c_str(),
             counted(lang, kv_heads, DT::KvHeadCount, DT::KvHeadOne).c_str());
}

std::string grouped(long long x) {
  std::string s = std::to_string(x), out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ' ';
    out += s[i];
  }
  return out;
}

std::string bytes_text(double b) {
  if (b >= 1e9) return format_number("%.2f", b / 1e9) + " GB";
  if (b >= 1e6) return format_number("%.1f", b / 1e6) + " MB";
  if (b >= 1e3) return format_number("%.1f", b / 1e3) + " kB";
  return format_number("%.0f", b) + " B";
}

std::string ms_text(double ms) {
  if (ms < 1) return format_number("%.0f", ms * 1000) + " µs";
  return format_number(ms < 10 ? "%.2f" : "%.1f", ms) + " ms";
}

std::string cache_label(Lang lang, int keys, int input_tokens) {
  return keys == 0 ? fmt(dtr(lang, DT::CacheInput), grouped(input_tokens).c_str())
                   : fmt(dtr(lang, DT::CacheKeys), grouped(keys).c_str());
}

void controls(Shell& app, DecodeView& v) {
  const Lang lang = app.lang;
  DecodeShape s = v.shape();
  const int input_tokens = app.session.problem().n();
  // Each combo at its width, or what is left of the line where that is less (a large UI scale).
  const auto combo_width = [](float w) { ImGui::SetNextItemWidth(std::min(w, ImGui::GetContentRegionAvail().x)); };
  ImGui::TextUnformatted(dtr(lang, DT::Cache));
  ImGui::SameLine();
  combo_width(app.font_px * 13);
  if (ImGui::BeginCombo("##decode_cache", cache_label(lang, s.keys, input_tokens).c_str())) {
    std::vector<int> choices = {0};
    for (int k : decode_cache_choices()) choices.push_back(k);
    for (int k : choices) {
      DecodeShape t = s;
      t.keys = k;
      const std::string why = decode_shape_error(t).text(lang);
      if (!why.empty()) ImGui::BeginDisabled();
      if (ImGui::Selectable(cache_label(lang, k, input_tokens).c_str(), k == s.keys)) v.set_shape(t);
      if (!why.empty()) {
        ImGui::EndDisabled();
        if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) ImGui::SetTooltip("%s", why.c_str());
      }
    }
    ImGui::EndCombo();
  }
  if (!s.input()) {
  const std::string heads = heads_item(lang, s.heads, s.kv_heads);
  same_line_if_fits(text_width(dtr(lang, DT::Heads)) + ImGui::GetStyle().ItemSpacing.x + app.font_px * 15);
  ImGui::TextUnformatted(dtr(lang, DT::Heads));
  ImGui::SameLine();
  combo_width(app.font_px * 15);
  if (ImGui::BeginCombo("##decode_heads", heads.c_str())) {
    for (const DecodeHeads& h : decode_heads_choices()) {
      DecodeShape t = s;
      t.heads = h.heads;
      t.kv_heads = h.kv_heads;
      const std::string why = decode_shape_error(t).text(lang);
      if (!why.empty()) ImGui::BeginDisabled();
      if (ImGui::Selectable(heads_item(lang, h.heads, h.kv_heads).c_str(),
                            h.heads == s.heads && h.kv_heads == s.kv_heads))
        v.set_shape(t);
      if (!why.empty()) {
        ImGui::EndDisabled();
        if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) ImGui::SetTooltip("%s", why.c_str());
      }
    }
    ImGui::EndCombo();
  }
  same_line_if_fits(text_width(dtr(lang, DT::Dim)) + ImGui::GetStyle().ItemSpacing.x + app.font_px * 4);
  ImGui::TextUnformatted(dtr(lang, DT::Dim));
  ImGui::SameLine();
  combo_width(app.font_px * 4);
  if (ImGui::BeginCombo("##decode_dim", std::to_string(s.dim).c_str())) {
    for (int d : decode_dim_choices()) {
      DecodeShape t = s;
      t.dim = d;
      const std::string why = decode_shape_error(t).text(lang);
      if (!why.empty()) ImGui::BeginDisabled();
      if (ImGui::Selectable(std::to_string(d).c_str(), d == s.dim)) v.set_shape(t);
      if (!why.empty()) ImGui::EndDisabled();
    }
    ImGui::EndCombo();
  }
  }
  const DecodeToken* t = v.shown();
  const std::string splits = v.splits() == 0 ? std::string(dtr(lang, DT::SplitsAuto)) + (t ? " (" + std::to_string(t->plan.splits) + ")" : "")
                                             : std::to_string(v.splits());
  same_line_if_fits(text_width(dtr(lang, DT::Splits)) + app.font_px * 7);
  ImGui::TextUnformatted(dtr(lang, DT::Splits));
  ImGui::SameLine();
  combo_width(app.font_px * 6);
  if (ImGui::BeginCombo("##decode_splits", splits.c_str())) {
    for (int c : decode_split_choices())
      if (ImGui::Selectable(c == 0 ? dtr(lang, DT::SplitsAuto) : std::to_string(c).c_str(), c == v.splits()))
        v.set_splits(c);
    ImGui::EndCombo();
  }

  // The tokens.
  if (ImGui::Button(dtr(lang, DT::First))) v.home();
  same_line_if_fits(button_width(tr(lang, S::Prev)));
  if (ImGui::Button(tr(lang, S::Prev))) v.prev();
  same_line_if_fits(button_width(tr(lang, S::Next)));
  if (ImGui::Button(tr(lang, S::Next))) v.next();
  const char* play = tr(lang, v.playing() ? S::Pause : S::Play);
  same_line_if_fits(button_width(play));
  if (ImGui::Button(play)) v.toggle_play();
  same_line_if_fits(app.font_px * 12);
  float speed = static_cast<float>(v.speed());
  ImGui::SetNextItemWidth(app.font_px * 7);
  if (ImGui::SliderFloat("##decode_speed", &speed, static_cast<float>(DecodeView::kMinSpeed),
                         static_cast<float>(DecodeView::kMaxSpeed), "%.2g", ImGuiSliderFlags_Logarithmic))
    v.set_speed(speed);
  ImGui::SameLine();
  ImGui::TextUnformatted(dtr(lang, DT::Speed));
  if (t && t->refusal.empty()) {
    const std::string where = fmt(dtr(lang, DT::TokenOf), grouped(t->token + 1).c_str(), grouped(t->tokens).c_str());
    same_line_if_fits(text_width(where.c_str()));
    ImGui::TextUnformatted(where.c_str());
  }
  if (v.busy()) {
    const char* what = dtr(lang, !t || !(t->job.shape == v.shape()) ? DT::Building : DT::Computing);
    same_line_if_fits(text_width(what));
    ImGui::TextColored(kDimV4, "%s", what);
  }
}

// The strip of the whole cache: keys [0, keys) (the cache so far) and the room after them, on
// every cache (an input of thousands of tokens at its first token is one key at the left end);
// under a long cache, the newest keys one slot each and the next empty slots.
void strip(Shell& app, DecodeView& v, const DecodeToken& t) {
  const Lang lang = app.lang;
  wrapped(app, dtr(lang, DT::StripTitle), &kDimV4);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 at = ImGui::GetCursorScreenPos();
  const float width = std::max(32.f, ImGui::GetContentRegionAvail().x - 4);
  const float h = app.font_px * 1.8f;
  const float ms = mark(app);  // the marks grow with the text
  // The strip spans the cache's whole capacity: the room the coming tokens fill is visible. A
  // short cache (the demo) is drawn a slot per key.
  const bool slots = t.capacity <= 64;
  const int span = std::max(t.capacity, t.keys);
  const float per_key = width / static_cast<float>(std::max(1, span));
  const auto x_of = [&](double key) { return at.x + 2 + per_key * static_cast<float>(key); };
  const float y0 = at.y + 10 * ms, y1 = y0 + h;
  const int bins = static_cast<int>(t.bins.size());
  float wmax = 0;
  for (float w : t.bins) wmax = std::max(wmax, w);
  // The bins pooled again to the pixel columns there are (max), so a peak stays visible.
  const int columns = std::max(1, std::min(bins, static_cast<int>(x_of(t.keys) - x_of(0))));
  int peak = 0;
  for (int b = 0; b < bins; ++b)
    if (t.bins[b] > t.bins[peak]) peak = b;
  for (int c = 0; c < columns; ++c) {
    const int b0 = static_cast<int>(static_cast<long long>(c) * bins / columns);
    const int b1 = std::max(b0 + 1, static_cast<int>(static_cast<long long>(c + 1) * bins / columns));
    float w = 0;
    for (int b = b0; b < b1; ++b) w = std::max(w, t.bins[b]);
    const double k0 = static_cast<double>(b0) * t.keys / bins, k1 = static_cast<double>(b1) * t.keys / bins;
    const int s = t.plan.split_of(static_cast<int>((k0 + k1) / 2));
    dl->AddRectFilled(ImVec2(x_of(k0), y0), ImVec2(std::max(x_of(k1), x_of(k0) + 1), y1),
                      weighted(split_colour(s), wmax > 0 ? w / wmax : 0));
  }
  // The key of the largest weight, marked above the strip.
  if (bins > 0 && wmax > 0) {
    const float px = x_of((static_cast<double>(peak) + 0.5) * t.keys / bins);
    dl->AddTriangleFilled(ImVec2(px - 5 * ms, y0 - 9 * ms), ImVec2(px + 5 * ms, y0 - 9 * ms), ImVec2(px, y0 - 2 * ms),
                          IM_COL32(255, 255, 255, 230));
  }
  if (!slots && t.keys < t.capacity)
    dl->AddRect(ImVec2(x_of(t.keys) + 1, y0 + 1), ImVec2(x_of(t.capacity) - 1, y1 - 1), kEmpty, 0, 0, 1);
  if (slots) {
    for (int j = t.keys; j < t.capacity; ++j)
      dl->AddRect(ImVec2(x_of(j) + 1, y0 + 1), ImVec2(x_of(j + 1) - 1, y1 - 1), kEmpty, 0, 0, 1);
    // The token labels under the slots, where they fit.
    for (int j = 0; j < t.capacity && per_key > app.font_px * 1.5f; ++j) {
      const std::string label = j < static_cast<int>(app.session.problem().key_tokens().size())
                                    ? app.session.problem().key_tokens()[j]
                                    : std::to_string(j);
      dl->AddText(ImVec2(x_of(j) + 3, y1 + 2), j < t.keys ? IM_COL32(230, 230, 230, 255) : IM_COL32(120, 120, 130, 255),
                  label.c_str());
    }
  }
  // The keys the kernel does not read (before a window's first key), shaded.
  if (t.first_key > 0)
    dl->AddRectFilled(ImVec2(x_of(0), y0), ImVec2(x_of(t.first_key), y1), IM_COL32(20, 20, 24, 200));
  // Split boundaries.
  for (int s = t.plan.first > 0 ? 0 : 1; s < t.plan.splits; ++s) {
    const float x = x_of(t.plan.begin(s));
    dl->AddLine(ImVec2(x, y0 - 3 * ms), ImVec2(x, y1 + 3 * ms), IM_COL32(255, 255, 255, 220), 1.5f * ms);
  }
  // The newest key: the token's own.
  dl->AddRect(ImVec2(x_of(t.keys - 1) - 2 * ms, y0 - 2 * ms),
              ImVec2(std::max(x_of(t.keys), x_of(t.keys - 1) + 2 * ms) + 2 * ms, y1 + 2 * ms), kHighlight, 0, 0, 3 * ms);
  v.strip = {at.x + 2, y0, width, h};
  ImGui::Dummy(ImVec2(width + 4, h + 8 * ms + (slots ? app.font_px * 1.4f : 6 * ms)));
  if (t.first_key > 0)
    wrapped(app, fmt(dtr(lang, DT::Unread), grouped(t.first_key - 1).c_str(), grouped(t.first_key).c_str()), &kDimV4);
  if (!slots) {
    ImGui::TextColored(kDimV4, "0 … %s  ·  %s", grouped(t.keys - 1).c_str(),
                       fmt(dtr(lang, DT::CacheKeyCount), grouped(t.capacity).c_str()).c_str());
    // The newest keys one slot each, then the room after them.
    ImGui::TextColored(kDimV4, "%s", dtr(lang, DT::Newest));
    const ImVec2 a2 = ImGui::GetCursorScreenPos();
    const int tail = static_cast<int>(t.tail.size()), room = std::min(8, t.capacity - t.keys);
    const float slot = std::min(app.font_px * 2.2f, width / static_cast<float>(tail + room));
    float tmax = 0;
    for (float w : t.tail) tmax = std::max(tmax, w);
    for (int i = 0; i < tail; ++i) {
      const int key = t.keys - tail + i;
      const ImVec2 p0(a2.x + 2 + slot * i, a2.y + 2), p1(p0.x + slot - 2, p0.y + h * 0.8f);
      dl->AddRectFilled(p0, p1, weighted(split_colour(t.plan.split_of(key)), tmax > 0 ? t.tail[i] / tmax : 0));
      if (i == tail - 1)
        dl->AddRect(ImVec2(p0.x - 2 * ms, p0.y - 2 * ms), ImVec2(p1.x + 2 * ms, p1.y + 2 * ms), kHighlight, 0, 0, 3 * ms);
    }
    for (int i = 0; i < room; ++i) {
      const ImVec2 p0(a2.x + 2 + slot * (tail + i), a2.y + 2), p1(p0.x + slot - 2, p0.y + h * 0.8f);
      dl->AddRect(p0, p1, kEmpty, 0, 0, 1);
    }
    ImGui::Dummy(ImVec2(width, h * 0.8f + 6));
    ImGui::TextColored(kDimV4, "%s … %s   → %s", grouped(t.keys - tail).c_str(), grouped(t.keys - 1).c_str(),
                       dtr(lang, DT::Future));
  }
}

// The query heads over the key/value heads they read.
void heads(Shell& app, DecodeView& v, const DecodeToken& t) {
  const Lang lang = app.lang;
  if (t.heads == 1) {  // nothing shared: the sentence says so
    v.heads_box = {};
    wrapped(app, fmt(dtr(lang, DT::HeadsOwn), bytes_text(t.bytes).c_str()), &kDimV4);
    return;
  }
  wrapped(app, dtr(lang, DT::HeadsTitle), &kDimV4);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 at = ImGui::GetCursorScreenPos();
  const float width = std::max(32.f, ImGui::GetContentRegionAvail().x - 4);
  const float box_h = app.font_px * 1.2f, gap = app.font_px * 1.6f;
  const float qw = width / static_cast<float>(t.heads), kw = width / static_cast<float>(t.kv_heads);
  const int group = t.heads / t.kv_heads;
  for (int g = 0; g < t.kv_heads; ++g) {
    const ImVec2 a(at.x + 2 + kw * g, at.y + box_h + gap), b(a.x + kw - 4, a.y + box_h);
    dl->AddRectFilled(a, b, g == t.kv_head ? IM_COL32(90, 90, 110, 255) : IM_COL32(55, 55, 65, 255));
    if (kw > app.font_px * 3) dl->AddText(ImVec2(a.x + 4, a.y + 1), IM_COL32(230, 230, 230, 255), fmt("K,V %d", g).c_str());
  }
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  for (int h = 0; h < t.heads; ++h) {
    const ImVec2 a(at.x + 2 + qw * h, at.y), b(a.x + std::max(2.f, qw - 3), a.y + box_h);
    const bool sel = h == t.head;
    dl->AddRectFilled(a, b, sel ? kHighlight : IM_COL32(110, 110, 125, 255));
    if (qw > app.font_px * 1.6f) dl->AddText(ImVec2(a.x + 3, a.y + 1), IM_COL32(20, 20, 20, 255), std::to_string(h).c_str());
    const int g = h / group;
    const ImVec2 to(at.x + 2 + kw * g + (kw - 4) / 2, at.y + box_h + gap);
    dl->AddLine(ImVec2((a.x + b.x) / 2, b.y), to, sel ? kHighlight : IM_COL32(130, 130, 140, 160),
                (sel ? 2.5f : 1.f) * mark(app));
    if (ImGui::IsMouseClicked(0) && mouse.x >= a.x && mouse.x < b.x && mouse.y >= a.y && mouse.y < b.y &&
        ImGui::IsWindowHovered())
      v.set_head(h);
  }
  v.heads_box = {at.x + 2, at.y, width, box_h * 2 + gap};
  ImGui::Dummy(ImVec2(width + 4, box_h * 2 + gap + 4));
  const double own = t.bytes * group;
  wrapped(app, group > 1 ? fmt(dtr(lang, DT::HeadsShare), group, bytes_text(t.bytes).c_str(), bytes_text(own).c_str())
                         : fmt(dtr(lang, DT::HeadsOwn), bytes_text(t.bytes).c_str()),
          &kDimV4);
  if (t.heads > 1) wrapped(app, dtr(lang, DT::HeadPick), &kDimV4);
}

void split_table(Shell& app, const DecodeToken& t) {
  const Lang lang = app.lang;
  wrapped(app, fmt(dtr(lang, DT::SplitsTitle), t.head), &kDimV4);
  const int rows = static_cast<int>(t.walk.split_states.size());
  // The header and up to 8 rows (more scroll), ending under the last.
  const float height = table_fit_height(std::min(rows, 8) + 1, FLT_MAX);
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_SizingFixedFit;
  if (!ImGui::BeginTable("##decode_splits_table", 6, flags, ImVec2(0, height))) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn(dtr(lang, DT::ColSplit));
  ImGui::TableSetupColumn(dtr(lang, DT::ColKeys));
  ImGui::TableSetupColumn("m");
  ImGui::TableSetupColumn("l");
  ImGui::TableSetupColumn(dtr(lang, DT::ColShare));
  ImGui::TableSetupColumn("acc", ImGuiTableColumnFlags_WidthStretch);
  ImGui::TableHeadersRow();
  ImGuiListClipper clip;
  clip.Begin(rows);
  std::optional<std::size_t> shown;  // the values each acc cell shows this frame (values_fitting)
  while (clip.Step()) {
    for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
      const WalkSplit& s = t.walk.split_states[i];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      const ImVec2 p = ImGui::GetCursorScreenPos();
      ImGui::GetWindowDrawList()->AddRectFilled(p, ImVec2(p.x + app.font_px * 0.8f, p.y + app.font_px * 0.9f),
                                                split_colour(i));
      ImGui::Dummy(ImVec2(app.font_px * 0.9f, app.font_px * 0.9f));
      ImGui::SameLine();
      ImGui::Text("%d", i);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted((grouped(s.j0) + "–" + grouped(s.j1 - 1)).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(value4(s.m).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(value4(s.l).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(i < static_cast<int>(t.shares.size()) ? (format_number("%.1f", 100 * t.shares[i]) + "%").c_str() : "—");
      ImGui::TableNextColumn();
      // As many values as every row's cell holds, "[…]" where not one does (a large UI scale in a
      // small window had cut the last number short: "[0.9, 0").
      if (!shown)
        shown = values_fitting(rows, -1, kAccShown,
                               [&](int r) -> const std::vector<double>& { return t.walk.split_states[r].acc; });
      ImGui::TextUnformatted(*shown == 0 ? "[…]" : values4(s.acc, *shown).c_str());
    }
  }
  ImGui::EndTable();
}

void combine(Shell& app, const DecodeToken& t) {
  const Lang lang = app.lang;
  wrapped(app, dtr(lang, DT::MergeTitle), &kDimV4);
  const std::vector<WalkMerge>& ms = t.walk.merges;
  if (ms.empty()) wrapped(app, dtr(lang, t.keys == 1 ? DT::MergeOneKey : DT::MergeNone), &kDimV4);
  const std::vector<int> shown = merges_shown(ms, 2);
  for (const int i : shown) {
    const WalkMerge& m = ms[i];
    wrapped(app, fmt(dtr(lang, DT::MergeM), m.index, value4(m.m_a).c_str(), value4(m.m_b).c_str(), value4(m.m).c_str()));
    ImGui::Indent();
    wrapped(app, fmt(dtr(lang, DT::MergeAB), value4(m.a).c_str(), value4(m.b).c_str()));
    wrapped(app, fmt(dtr(lang, DT::MergeL), value4(m.a).c_str(), value4(m.l_a).c_str(), value4(m.b).c_str(), value4(m.l_b).c_str(),
                     value4(m.l).c_str()));
    wrapped(app, fmt(dtr(lang, DT::MergeAcc), values4(m.acc, kAccShown).c_str()));
    ImGui::Unindent();
  }
  const int more = static_cast<int>(ms.size() - shown.size());
  if (more == 1) ImGui::TextColored(kDimV4, "%s", dtr(lang, DT::MergeMoreOne));
  if (more > 1) ImGui::TextColored(kDimV4, "%s", fmt(dtr(lang, DT::MergeMore), more).c_str());
  if (const int e = t.walk.split_values_exponent; e > 0) wrapped(app, fmt(dtr(lang, DT::ValuesScaled), e, e), &kDimV4);
  wrapped(app, fmt(dtr(lang, DT::Output), values4(t.walk.split_output, kAccShown).c_str()), &kHighlightV4);
  wrapped(app, fmt(dtr(lang, DT::CheckOnePass), format_number("%.3g", t.one_pass_diff).c_str(),
                   format_number("%.3g", t.l_ulps).c_str()));
  const ImVec4 ok(0.5f, 0.9f, 0.5f, 1.f);
  wrapped(app,
          fmt(dtr(lang, DT::CheckFp64), format_number("%.3g", t.fp64_error).c_str(),
              format_number("%.3g", t.tolerance).c_str(), dtr(lang, t.within ? DT::Within : DT::Outside)),
          t.within ? &ok : &kErrorV4);
}

// Kernel time per token against bytes / read rate, over the tokens of the history.
void time_chart(Shell& app, const DecodeView& v, float height) {
  const Lang lang = app.lang;
  const std::deque<DecodePoint>& hs = v.history();
  ImGui::TextUnformatted(dtr(lang, DT::TimeTitle));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 at = ImGui::GetCursorScreenPos();
  const float width = std::max(40.f, ImGui::GetContentRegionAvail().x - 4);
  const float left = app.font_px * 3.2f, bottom = app.font_px * 1.3f;
  // The legend's two lines sit above the frame, where no point of the chart lands.
  const float legend_h = app.font_px * 2.6f;
  const ImVec2 p0(at.x + left, at.y + legend_h), p1(at.x + width, at.y + height - bottom);
  dl->AddRect(p0, p1, IM_COL32(200, 200, 200, 255));
  double hi = 0;
  for (const DecodePoint& p : hs) hi = std::max({hi, p.ms, p.floor_ms});
  if (hi <= 0) hi = 1;
  hi *= 1.15;
  const auto y_of = [&](double ms) { return p1.y - static_cast<float>(ms / hi) * (p1.y - p0.y); };
  const int n = static_cast<int>(hs.size());
  const auto x_of = [&](int i) {
    return p0.x + (n <= 1 ? 0.5f : static_cast<float>(i) / static_cast<float>(kDecodeHistory - 1)) * (p1.x - p0.x);
  };
  const float ms = mark(app);  // lines and markers grow with the text
  for (int i = 1; i < n; ++i) {
    if (hs[i].floor_ms > 0 && hs[i - 1].floor_ms > 0)
      dl->AddLine(ImVec2(x_of(i - 1), y_of(hs[i - 1].floor_ms)), ImVec2(x_of(i), y_of(hs[i].floor_ms)), kFloorColour,
                  1.5f * ms);
    dl->AddLine(ImVec2(x_of(i - 1), y_of(hs[i - 1].ms)), ImVec2(x_of(i), y_of(hs[i].ms)), kHighlight, 2 * ms);
  }
  if (n == 1) dl->AddCircleFilled(ImVec2(x_of(0), y_of(hs[0].ms)), 3 * ms, kHighlight);
  dl->AddText(ImVec2(at.x, p0.y), IM_COL32(200, 200, 200, 255), ms_text(hi).c_str());
  dl->AddText(ImVec2(at.x, p1.y - app.font_px), IM_COL32(200, 200, 200, 255), "0");
  if (n > 0) {
    // The keys the tokens shown read: a range, or one count while one token is in.
    const int k0 = hs.front().keys, k1 = hs.back().keys;
    const std::string span = k0 == k1 ? fmt(dtr(lang, k1 == 1 ? DT::CacheKeyOne : DT::CacheKeyCount), grouped(k1).c_str())
                                      : grouped(k0) + " … " + grouped(k1) + " " + dtr(lang, DT::ColKeys);
    dl->AddText(ImVec2(p0.x, p1.y + 2), IM_COL32(200, 200, 200, 255), span.c_str());
  }
  // The legend, above the frame's right end: its swatches a line each, as long as the text is
  // tall (and the lines as thick as the chart's).
  const float swatch = app.font_px * 0.9f, gap = app.font_px * 0.3f;
  const float legend_w = swatch + gap + std::max(text_width(dtr(lang, DT::Measured)), text_width(dtr(lang, DT::Floor)));
  const float lx = std::max(at.x + left, p1.x - legend_w), ly = at.y;
  dl->AddLine(ImVec2(lx, ly + app.font_px * 0.5f), ImVec2(lx + swatch, ly + app.font_px * 0.5f), kHighlight, 2 * ms);
  dl->AddText(ImVec2(lx + swatch + gap, ly), IM_COL32(230, 230, 230, 255), dtr(lang, DT::Measured));
  dl->AddLine(ImVec2(lx, ly + app.font_px * 1.7f), ImVec2(lx + swatch, ly + app.font_px * 1.7f), kFloorColour, 1.5f * ms);
  dl->AddText(ImVec2(lx + swatch + gap, ly + app.font_px * 1.2f), IM_COL32(230, 230, 230, 255), dtr(lang, DT::Floor));
  ImGui::Dummy(ImVec2(width, height));
}

void right_column(Shell& app, DecodeView& v, const DecodeToken* t) {
  const Lang lang = app.lang;
  if (t && t->refusal.empty()) {
    combine(app, *t);
    ImGui::Spacing();
  }
  const float chart_h = std::max(app.font_px * 8, ImGui::GetContentRegionAvail().y * 0.45f);
  time_chart(app, v, chart_h);
  if (t && t->refusal.empty()) {
    if (t->read_gbs > 0)
      wrapped(app, fmt(dtr(lang, DT::Bytes), bytes_text(t->bytes).c_str(), ms_text(t->kernel_ms).c_str(),
                       rate_text(t->gbs).c_str(), share_text(100 * t->gbs / t->read_gbs).c_str(),
                       rate_text(t->read_gbs).c_str()));
    else
      wrapped(app, fmt(dtr(lang, DT::BytesNoProbe), bytes_text(t->bytes).c_str(), ms_text(t->kernel_ms).c_str(),
                       rate_text(t->gbs).c_str()));
  }
  if (v.playing())
    ImGui::TextColored(kHighlightV4, "%s", fmt(dtr(lang, DT::Tps), format_number("%.1f", v.tokens_per_second()).c_str(),
                                               format_number("%.3g", v.speed()).c_str()).c_str());
  else
    ImGui::TextColored(kDimV4, "%s", dtr(lang, DT::TpsPaused));
  ImGui::Spacing();
  wrapped(app, dtr(lang, DT::Caveat), &kDimV4);
  if (v.shape().input()) wrapped(app, dtr(lang, DT::InputNote), &kDimV4);
}

}  // namespace

void draw_panel(DecodeView& v, Shell& app, const Layout& l) {
  const Lang lang = app.lang;
  v.tick(ImGui::GetIO().DeltaTime);
  begin_wide(l, fmt("%s###decode", dtr(lang, DT::Label)));
  controls(app, v);
  const DecodeToken* t = v.shown();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float right_w = std::clamp(avail.x * 0.4f, app.font_px * 16, app.font_px * 32);
  ImGui::BeginChild("##decode_left", ImVec2(avail.x - right_w - 8, avail.y), false);
  if (!t) {
    ImGui::TextColored(kDimV4, "%s", dtr(lang, DT::Building));
  } else if (!t->refusal.empty()) {
    wrapped(app, fmt(dtr(lang, DT::Refused), t->refusal.text(lang).c_str()),
            &kErrorV4);
  } else {
    // A count's words, singular for one. Under a window a token sees the cache's last keys only.
    const int window = t->job.mods.window;
    const auto keys_text = [&](int keys) {
      return fmt(dtr(lang, keys == 1 ? DT::CacheKeyOne : DT::CacheKeyCount), grouped(keys).c_str());
    };
    const std::string sentence =
        !t->job.shape.input() && window > 0 && t->keys > window
            ? fmt(dtr(lang, DT::SentenceCacheWindow), grouped(t->keys - 1).c_str(),
                  counted(lang, t->heads, DT::QueryHeads, DT::QueryHead).c_str(), keys_text(t->keys).c_str(),
                  keys_text(window).c_str(), counted(lang, t->kv_heads, DT::KvHeadCount, DT::KvHeadOne).c_str(),
                  bytes_text(t->bytes).c_str(), counted(lang, t->plan.splits, DT::SplitsParallel, DT::SplitOne).c_str())
        : !t->job.shape.input()
            ? fmt(dtr(lang, DT::SentenceCache), grouped(t->keys - 1).c_str(),
                  counted(lang, t->heads, DT::QueryHeads, DT::QueryHead).c_str(), keys_text(t->keys).c_str(),
                  counted(lang, t->kv_heads, DT::KvHeadCount, DT::KvHeadOne).c_str(), bytes_text(t->bytes).c_str(),
                  counted(lang, t->plan.splits, DT::SplitsParallel, DT::SplitOne).c_str())
        : t->keys == 1 ? fmt(dtr(lang, DT::SentenceFirst), grouped(t->keys - 1).c_str(), t->query_label.c_str())
        : window > 0 && t->keys > window
            ? fmt(dtr(lang, DT::SentenceWindow), grouped(t->keys - 1).c_str(), t->query_label.c_str(),
                  grouped(t->keys).c_str(), grouped(window).c_str(),
                  counted(lang, t->plan.splits, DT::SplitCount, DT::SplitOne).c_str())
            : fmt(dtr(lang, DT::SentenceInput), grouped(t->keys - 1).c_str(), t->query_label.c_str(),
                  grouped(t->keys).c_str(), counted(lang, t->plan.splits, DT::SplitCount, DT::SplitOne).c_str());
    wrapped(app, sentence, &kHighlightV4);
    // Under the sentence, where it is read before the numbers it qualifies: what the input's
    // modifications and mask do to each token's row.
    if (t->job.shape.input() && t->job.input) {
      const Problem& in = *t->job.input;
      if (has_modifications(in))
        wrapped(app, fmt(dtr(lang, DT::InputModsNote), modifications_text(in, lang).c_str()), &kDimV4);
      if (t->first_query > 0)  // decoding starts at the prefix's last position
        wrapped(app, fmt(dtr(lang, DT::PrefixPrompt), in.mods.prefix - 1, in.mods.prefix - 1), &kDimV4);
      if (in.mask == MaskKind::Custom) wrapped(app, dtr(lang, DT::CustomMaskNote), &kErrorV4);
    } else {
      // A random cache takes the session's modifications but a prefix (DecodeCache::set_mods), and
      // not the input's bias or documents.
      if (const std::string mods = cache_mods_text(t->job, lang); !mods.empty())
        wrapped(app, fmt(dtr(lang, DT::CacheModsNote), mods.c_str()), &kDimV4);
      if (t->job.input_bias) wrapped(app, dtr(lang, DT::CacheBiasNote), &kDimV4);
      if (t->job.input_documents) wrapped(app, dtr(lang, DT::CacheDocumentsNote), &kDimV4);
    }
    strip(app, v, *t);
    heads(app, v, *t);
    split_table(app, *t);
  }
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("##decode_right", ImVec2(right_w, avail.y), true);
  right_column(app, v, t);
  ImGui::EndChild();
  ImGui::End();
}

}  // namespace attnlab::viewer
