// The UI event fuzzer's generator and the state dump's invariants (see fuzz_events.h).
#include "viewer/app/fuzz_events.h"

#include <cmath>
#include <cstdio>

namespace attnlab::viewer {

const char* to_string(FuzzKind k) {
  static const char* const kNames[] = {"key",      "text", "move",     "click",  "double-click", "drag", "wheel",
                                       "resize",   "view", "load",     "generate", "demo",       "export"};
  static_assert(sizeof kNames / sizeof *kNames == static_cast<int>(FuzzKind::Count_));
  return kNames[static_cast<int>(k)];
}

const std::vector<std::string>& fuzz_key_names() {
  // The keymap's keys first (F1's help lists them), then what text fields and ImGui's navigation
  // take. Esc is there too: the run goes on after a quit it asks for (counted).
  static const std::vector<std::string> kKeys = {
      "space", "left",  "right",  "home",      "up",     "down",  "m",     "[",      "]",      "l",
      "s",     "f1",    "escape", "+",         "-",      "0",     "f11",   "return", "tab",    "backspace",
      "delete", "end", "a",      "1",         ".",      "pageup", "pagedown", "kp_enter", "=", "x"};
  return kKeys;
}

std::string describe(const FuzzEvent& e) {
  char buf[256];
  switch (e.kind) {
    case FuzzKind::Key:
      std::snprintf(buf, sizeof buf, "key %s%s%s", e.ctrl ? "ctrl+" : "", e.shift ? "shift+" : "",
                    fuzz_key_names()[e.key].c_str());
      return buf;
    case FuzzKind::Text: return "text \"" + e.text + "\"";
    case FuzzKind::Move: std::snprintf(buf, sizeof buf, "move to (%.3f, %.3f)", e.x, e.y); return buf;
    case FuzzKind::Click:
      std::snprintf(buf, sizeof buf, "click button %d at (%.3f, %.3f)", e.button, e.x, e.y);
      return buf;
    case FuzzKind::DoubleClick: std::snprintf(buf, sizeof buf, "double-click at (%.3f, %.3f)", e.x, e.y); return buf;
    case FuzzKind::Drag:
      std::snprintf(buf, sizeof buf, "drag (%.3f, %.3f) -> (%.3f, %.3f) over %d frames", e.x, e.y, e.x2, e.y2,
                    e.frames);
      return buf;
    case FuzzKind::Wheel:
      std::snprintf(buf, sizeof buf, "wheel %+d%s at (%.3f, %.3f)%s", e.wheel, e.horizontal ? " sideways" : "", e.x,
                    e.y, e.ctrl ? " with ctrl" : "");
      return buf;
    case FuzzKind::Resize: std::snprintf(buf, sizeof buf, "resize to %dx%d", e.w, e.h); return buf;
    case FuzzKind::View: std::snprintf(buf, sizeof buf, "show view %d", e.view); return buf;
    case FuzzKind::Load: std::snprintf(buf, sizeof buf, "load file set %d", e.slot); return buf;
    case FuzzKind::Generate:
      std::snprintf(buf, sizeof buf, "generate N=%ld d_k=%ld d_v=%ld heads=%ld seed=%llu", e.n, e.d_k, e.d_v, e.heads,
                    static_cast<unsigned long long>(e.seed));
      return buf;
    case FuzzKind::Demo: return "demo";
    case FuzzKind::Export: {
      static const char* const kWhat[] = {"csv", "json", "png"};
      std::snprintf(buf, sizeof buf, "export %s into destination %d", kWhat[e.slot % 3], e.slot / 3);
      return buf;
    }
    case FuzzKind::Count_: break;
  }
  return "?";
}

// ---- random numbers ---------------------------------------------------------------------------

std::uint64_t FuzzRandom::next() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int FuzzRandom::below(int n) { return n <= 1 ? 0 : static_cast<int>(next() % static_cast<std::uint64_t>(n)); }

float FuzzRandom::unit() { return static_cast<float>(next() >> 40) / static_cast<float>(1u << 24); }

bool FuzzRandom::chance(double p) { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }

// ---- the generator ----------------------------------------------------------------------------

FuzzGenerator::FuzzGenerator(std::uint64_t seed, int views, int home)
    : r_(seed), views_(views), home_(home), shown_(home) {}

FuzzEvent FuzzGenerator::pointer(FuzzKind k) {
  FuzzEvent e;
  e.kind = k;
  // Half the pointer's events land in the controls column (its buttons are dense), a few just
  // outside the window; the rest anywhere in it.
  const float u = r_.unit();
  if (u < 0.45f) {
    e.x = r_.unit() * 0.26f;
    e.y = r_.unit();
  } else if (u < 0.5f) {
    e.x = r_.unit() * 1.2f - 0.1f;
    e.y = r_.unit() * 1.2f - 0.1f;
  } else {
    e.x = r_.unit();
    e.y = r_.unit();
  }
  return e;
}

FuzzEvent FuzzGenerator::next() {
  // Weights per thousand, in FuzzKind's order.
  static constexpr int kWeights[] = {300, 60, 130, 170, 40, 50, 100, 20, 40, 30, 25, 10, 25};
  static_assert(sizeof kWeights / sizeof *kWeights == static_cast<int>(FuzzKind::Count_));
  int total = 0;
  for (int w : kWeights) total += w;
  int pick = r_.below(total), k = 0;
  while (pick >= kWeights[k]) pick -= kWeights[k++];
  const FuzzKind kind = static_cast<FuzzKind>(k);
  FuzzEvent e;
  e.kind = kind;
  switch (kind) {
    case FuzzKind::Key:
      e.key = r_.below(static_cast<int>(fuzz_key_names().size()));
      e.shift = r_.chance(0.2);
      e.ctrl = r_.chance(0.12);
      break;
    case FuzzKind::Text: {
      static const char* const kTexts[] = {"0.5", "3", "0", "-1", "abc", "1e309", "nan", "inf", "0.000001",
                                           "上下文", "😀", ",", "2,3,x", "  ", "1,1,1", "99999999999", "e",
                                           "\t", "4096", "0x10", "中文,模型"};
      e.text = kTexts[r_.below(static_cast<int>(sizeof kTexts / sizeof *kTexts))];
      break;
    }
    case FuzzKind::Move:
    case FuzzKind::DoubleClick:
      e = pointer(kind);
      break;
    case FuzzKind::Click:
      e = pointer(kind);
      e.button = r_.chance(0.8) ? 1 : 2 + r_.below(2);
      break;
    case FuzzKind::Drag: {
      e = pointer(kind);
      const FuzzEvent to = pointer(kind);
      e.x2 = to.x;
      e.y2 = to.y;
      e.frames = 2 + r_.below(7);
      break;
    }
    case FuzzKind::Wheel:
      e = pointer(kind);
      e.wheel = (1 + r_.below(3)) * (r_.chance(0.5) ? 1 : -1);
      e.horizontal = r_.chance(0.1);
      e.ctrl = r_.chance(0.1);
      break;
    case FuzzKind::Resize: {
      static const int kSizes[][2] = {{1280, 800}, {960, 600}, {1920, 1080}, {1024, 768}, {700, 450},
                                      {320, 200}, {2560, 1440}, {1366, 768}, {961, 2000}, {3000, 620}};
      const int i = r_.below(static_cast<int>(sizeof kSizes / sizeof *kSizes));
      e.w = kSizes[i][0];
      e.h = kSizes[i][1];
      break;
    }
    case FuzzKind::View:
      // Away from the home view, then back: the run spends most of its frames on the view it was
      // started for and visits every other one.
      if (shown_ == home_ && views_ > 1) {
        e.view = r_.below(views_ - 1);
        if (e.view >= home_) ++e.view;
      } else {
        e.view = home_;
      }
      shown_ = e.view;
      break;
    case FuzzKind::Load:
      e.slot = r_.below(kFuzzLoadSlots);
      break;
    case FuzzKind::Generate: {
      // Mostly small problems (the run is synchronous); a few large ones and every kind of refusal.
      static const long kN[] = {1, 2, 3, 5, 8, 17, 64, 65, 130, 257, 700, 2049, 0, -4, 100000, 2147483647};
      static const long kD[] = {1, 2, 3, 8, 16, 64, 0, -1, 100000};
      static const long kHeads[] = {1, 1, 1, 2, 3, 4, 0, -2, 5000};
      e.n = kN[r_.below(static_cast<int>(sizeof kN / sizeof *kN))];
      e.d_k = kD[r_.below(static_cast<int>(sizeof kD / sizeof *kD))];
      e.d_v = kD[r_.below(static_cast<int>(sizeof kD / sizeof *kD))];
      e.heads = kHeads[r_.below(static_cast<int>(sizeof kHeads / sizeof *kHeads))];
      if (e.n > 300 && e.heads > 1) e.heads = 1;  // keep the synchronous runs short
      if (e.n > 300 && e.d_k > 64) e.d_k = 64;
      if (e.n > 300 && e.d_v > 64) e.d_v = 64;
      e.seed = r_.chance(0.1) ? ~std::uint64_t{0} : r_.next() % 1000;
      break;
    }
    case FuzzKind::Demo: break;
    case FuzzKind::Export:
      e.slot = r_.below(3 * kFuzzExportDestinations);
      break;
    case FuzzKind::Count_: break;
  }
  return e;
}

std::vector<FuzzEvent> FuzzGenerator::burst() {
  std::vector<FuzzEvent> events;
  const int count = 1 + r_.below(8);
  for (int i = 0; i < count; ++i) {
    events.push_back(next());
    if (events.back().kind == FuzzKind::Drag) break;  // a drag takes the frames after it
  }
  return events;
}

// ---- invariants -------------------------------------------------------------------------------

std::vector<std::string> state_broken(const std::string& dump) {
  std::vector<std::string> broken;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(dump);
  } catch (const std::exception& e) {
    return {std::string("the state dump does not parse: ") + e.what()};
  }
  const auto fail = [&](const std::string& what) { broken.push_back(what); };
  const auto num = [&](const char* key) -> double {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number()) {
      broken.push_back(std::string("the state dump has no number \"") + key + "\"");
      return 0;
    }
    return it->get<double>();
  };
  const double n = num("N"), m = num("M");
  if (!broken.empty()) return broken;
  if (n < 1 || m < 1) fail("the problem has no rows or no keys");
  const double step = num("step");
  if (!(step >= 1 && step <= 4 && step == std::floor(step))) fail("step " + std::to_string(step) + " is not 1..4");
  const double q = num("query");
  if (!(q >= 0 && q < n)) fail("query " + std::to_string(q) + " outside 0.." + std::to_string(n - 1));
  if (!j.contains("queries") || !j["queries"].is_array() || j["queries"].empty()) {
    fail("no queries selected");
  } else {
    for (const auto& x : j["queries"])
      if (!x.is_number() || !(x.get<double>() >= 0 && x.get<double>() < n)) fail("a selected query outside the rows");
  }
  const double t = num("temperature");
  if (!(std::isfinite(t) && t > 0)) fail("temperature " + std::to_string(t) + " is not finite and positive");
  const double key = num("key_sel");
  if (!(key >= -1 && key < m)) fail("selected key " + std::to_string(key) + " outside -1.." + std::to_string(m - 1));
  if (!(num("font_px") > 0)) fail("font size not positive");
  if (!(num("ui_scale") > 0)) fail("UI scale not positive");
  const double heads = num("heads"), head = num("head");
  if (!(heads >= 1 && head >= 0 && head < heads)) fail("head " + std::to_string(head) + " of " + std::to_string(heads));
  if (const auto h = j.find("heatmap"); h != j.end() && h->is_object()) {
    const auto f = [&](const char* k) { return h->contains(k) && (*h)[k].is_number() ? (*h)[k].get<double>() : 0.0; };
    const double rows = f("rows"), cols = f("cols");
    if (rows > 0 && cols > 0) {
      if (!(f("first_row") >= 0 && f("vis_rows") >= 0 && f("first_row") + f("vis_rows") <= rows + 1e-6))
        fail("the heatmap's rows lie outside its matrix");
      if (!(f("first_col") >= 0 && f("vis_cols") >= 0 && f("first_col") + f("vis_cols") <= cols + 1e-6))
        fail("the heatmap's columns lie outside its matrix");
    }
  } else {
    fail("the state dump has no heatmap");
  }
  if (!j.contains("view") || !j["view"].is_string()) fail("the state dump names no view");
  return broken;
}

}  // namespace attnlab::viewer
