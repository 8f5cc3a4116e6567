// The UI event fuzzer's window half (see fuzz.h).
#include "viewer/app/fuzz.h"

#include "core/io.h"
#include "viewer/draw/strings.h"
#include "viewer/views/registry.h"

#include <imgui.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <utility>

namespace attnlab::viewer {
namespace {

namespace fs = std::filesystem;

SDL_Keycode keycode_of(const std::string& name) {
  static const std::map<std::string, SDL_Keycode> kCodes = {
      {"space", SDLK_SPACE},   {"left", SDLK_LEFT},          {"right", SDLK_RIGHT},   {"home", SDLK_HOME},
      {"up", SDLK_UP},         {"down", SDLK_DOWN},          {"m", SDLK_m},           {"[", SDLK_LEFTBRACKET},
      {"]", SDLK_RIGHTBRACKET}, {"l", SDLK_l},               {"s", SDLK_s},           {"f1", SDLK_F1},
      {"escape", SDLK_ESCAPE}, {"+", SDLK_PLUS},             {"-", SDLK_MINUS},       {"0", SDLK_0},
      {"f11", SDLK_F11},       {"return", SDLK_RETURN},      {"tab", SDLK_TAB},       {"backspace", SDLK_BACKSPACE},
      {"delete", SDLK_DELETE}, {"end", SDLK_END},            {"a", SDLK_a},           {"1", SDLK_1},
      {".", SDLK_PERIOD},      {"pageup", SDLK_PAGEUP},      {"pagedown", SDLK_PAGEDOWN},
      {"kp_enter", SDLK_KP_ENTER}, {"=", SDLK_EQUALS},       {"x", SDLK_x}};
  const auto it = kCodes.find(name);
  if (it == kCodes.end()) throw std::logic_error("fuzz key without an SDL code: " + name);
  return it->second;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f) throw std::runtime_error("fuzz: cannot write " + p.string());
}

// The files of a folder whose name says a write did not finish (core/io.h write_file's temporary
// names), recursively.
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().find(".tmp-") != std::string::npos) found.push_back(it->path().string());
  return found;
}

}  // namespace

Fuzzer::Fuzzer(App& app, SDL_Window* window, long events, std::uint64_t seed, const std::string& reproduce)
    : app_(app),
      window_(window),
      events_(events),
      seed_(seed),
      reproduce_(reproduce),
      gen_(seed, static_cast<int>(view_names().size()), std::max(0, view_index(app.view))) {
  std::string name = (fs::temp_directory_path() / "attnlab-fuzz-XXXXXX").string();
  if (mkdtemp(name.data()) == nullptr) throw std::runtime_error("fuzz: mkdtemp " + name + ": " + std::strerror(errno));
  dir_ = name;
  write_inputs();
  exports_ = (dir_ / "exports").string();
  fs::create_directory(exports_);
  write(dir_ / "a-file", "not a folder\n");
  destinations_ = {exports_, (dir_ / "missing" / "deeper").string(), (dir_ / "a-file").string(), "/proc/attnlab-fuzz"};
  app_.export_dir = exports_;  // screenshots (S) and the perf view's CSV too
  views_shown_.push_back(app_.view);
}

Fuzzer::~Fuzzer() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

void Fuzzer::write_inputs() {
  const auto path = [&](const char* name) { return (dir_ / name).string(); };
  write(path("q.csv"), "1,0,0,1\n0,1,0,1\n0,0,1,1\n1,1,0,0\n0,1,1,0\n1,0,1,0\n");
  write(path("k.csv"), "0,1,0,1\n1,0,0,1\n0,0,1,0\n1,1,1,1\n0,1,1,0\n1,0,0,0\n");
  write(path("v.csv"), "1,2,3\n4,5,6\n7,8,9\n1,0,0\n0,1,0\n0,0,1\n");
  write(path("k5.csv"), "0,1,0,1,0\n1,0,0,1,0\n0,0,1,0,0\n1,1,1,1,0\n0,1,1,0,0\n1,0,0,0,0\n");
  write(path("empty.csv"), "");
  write(path("nan.csv"), "1,0,0,1\n0,nan,0,1\n0,0,1,1\n1,1,0,0\n0,1,1,0\n1,0,1,0\n");
  write(path("k7.csv"), "0,1,0,1\n1,0,0,1\n0,0,1,0\n1,1,1,1\n0,1,1,0\n1,0,0,0\n2,2,2,2\n");
  write(path("v7.csv"), "1,2\n3,4\n5,6\n7,8\n9,0\n1,1\n2,2\n");
  write(path("causal.csv"),
        "0,-inf,-inf,-inf,-inf,-inf\n0,0,-inf,-inf,-inf,-inf\n0,0,0,-inf,-inf,-inf\n"
        "0,0,0,0,-inf,-inf\n0,0,0,0,0,-inf\n0,0,0,0,0,0\n");
  write(path("dead-row.csv"),
        "0,0,0,0,0,0\n-inf,-inf,-inf,-inf,-inf,-inf\n0,0,0,0,0,0\n0,0,0,0,0,0\n0,0,0,0,0,0\n0,0,0,0,0,0\n");
  write(path("tokens.txt"), "我\n爱\n上下文\nthe\n😀\nx\n");
  MatrixF q8(8, 4), k8(8, 4), v8(8, 2);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) {
      q8(i, j) = static_cast<float>((i * 7 + j * 3) % 5) - 2.0f;
      k8(i, j) = static_cast<float>((i * 5 + j) % 7) - 3.0f;
      if (j < 2) v8(i, j) = static_cast<float>(i + j);
    }
  write_npy(path("q.npy"), q8);
  write_npy(path("k.npy"), k8);
  write_npy(path("v.npy"), v8);
  const InputFiles good{path("q.csv"), path("k.csv"), path("v.csv"), "", "", ""};
  loads_ = {
      InputFiles{good.q, good.k, good.v, "", "", path("tokens.txt")},
      InputFiles{path("q.npy"), path("k.npy"), path("v.npy"), "", "", ""},
      InputFiles{good.q, path("k5.csv"), good.v, "", "", ""},              // K's columns differ from Q's
      InputFiles{good.q, path("no-such.csv"), good.v, "", "", ""},         // a file that is not there
      InputFiles{"/dev/zero", good.k, good.v, "", "", ""},                 // bytes that are no CSV
      InputFiles{good.q, dir_.string(), good.v, "", "", ""},               // a folder
      InputFiles{good.q, good.k, path("empty.csv"), "", "", ""},           // an empty file
      InputFiles{path("nan.csv"), good.k, good.v, "", "", ""},             // a NaN
      InputFiles{good.q, good.k, good.v, path("causal.csv"), "a,b,c,d,e,f", ""},
      InputFiles{good.q, good.k, good.v, path("dead-row.csv"), "", ""},    // a row with every key masked
      InputFiles{good.q, good.k, good.v, "", "a,b", ""},                   // too few labels
      InputFiles{good.q, path("k7.csv"), path("v7.csv"), "", "", ""},      // 6 queries over 7 keys
  };
}

void Fuzzer::point(float fx, float fy) {
  int w = 0, h = 0;
  SDL_GetWindowSize(window_, &w, &h);
  inside_ = fx >= 0 && fy >= 0 && fx < 1 && fy < 1;
  SDL_WarpMouseInWindow(window_, static_cast<int>(fx * static_cast<float>(w)), static_cast<int>(fy * static_cast<float>(h)));
}

void Fuzzer::pointer_to_imgui() const {
  int x = 0, y = 0, w = 0, h = 0;
  SDL_GetMouseState(&x, &y);
  SDL_GetWindowSize(window_, &w, &h);
  const bool inside = inside_ && x >= 0 && y >= 0 && x < w && y < h;
  ImGui::GetIO().MousePos = inside ? ImVec2(static_cast<float>(x), static_cast<float>(y)) : ImVec2(-FLT_MAX, -FLT_MAX);
}

void Fuzzer::push_key(bool down, SDL_Keycode k, Uint16 mod) {
  SDL_Event ev{};
  ev.type = down ? SDL_KEYDOWN : SDL_KEYUP;
  ev.key.windowID = SDL_GetWindowID(window_);
  ev.key.state = down ? SDL_PRESSED : SDL_RELEASED;
  ev.key.keysym.sym = k;
  ev.key.keysym.scancode = SDL_GetScancodeFromKey(k);
  ev.key.keysym.mod = mod;
  SDL_PushEvent(&ev);
}

void Fuzzer::push_button(bool down, int button, int clicks) {
  SDL_Event ev{};
  ev.type = down ? SDL_MOUSEBUTTONDOWN : SDL_MOUSEBUTTONUP;
  ev.button.windowID = SDL_GetWindowID(window_);
  ev.button.button = static_cast<Uint8>(button);
  ev.button.state = down ? SDL_PRESSED : SDL_RELEASED;
  ev.button.clicks = static_cast<Uint8>(clicks);
  SDL_GetMouseState(&ev.button.x, &ev.button.y);
  SDL_PushEvent(&ev);
}

void Fuzzer::feed() {
  ++frames_;
  for (SDL_Keycode k : keys_up_) push_key(false, k, KMOD_NONE);
  keys_up_.clear();
  SDL_SetModState(KMOD_NONE);
  for (int b : buttons_up_) push_button(false, b, 1);
  buttons_up_.clear();
  if (dragging_) {
    // One step of the drag a frame: the pointer moves, the button is pressed again (ImGui reads
    // SDL's button state, which pushed events do not change, or a press this frame).
    ++drag_frame_;
    const float f = static_cast<float>(drag_frame_) / static_cast<float>(drag_.frames);
    point(drag_.x + (drag_.x2 - drag_.x) * f, drag_.y + (drag_.y2 - drag_.y) * f);
    if (drag_frame_ >= drag_.frames) {
      dragging_ = false;
      buttons_up_.push_back(SDL_BUTTON_LEFT);
    } else {
      push_button(true, SDL_BUTTON_LEFT, 1);
    }
    return;
  }
  for (const FuzzEvent& e : gen_.burst()) {
    if (done()) break;
    ++sent_;
    ++kinds_[to_string(e.kind)];
    recent_.push_back(std::to_string(sent_) + ": " + describe(e));
    if (recent_.size() > 12) recent_.erase(recent_.begin());
    apply(e);
  }
}

void Fuzzer::apply(const FuzzEvent& e) {
  const auto refused = [&](const char* what, bool no) {
    if (no) ++refused_[what];
  };
  const std::string error_prefix = tr(app_.lang, S::ErrorPrefix);
  switch (e.kind) {
    case FuzzKind::Key: {
      const SDL_Keycode k = keycode_of(fuzz_key_names()[e.key]);
      // ImGui 1.86 reads the modifiers from SDL_GetModState, the app from the event.
      const Uint16 mod = static_cast<Uint16>((e.shift ? KMOD_LSHIFT : 0) | (e.ctrl ? KMOD_LCTRL : 0));
      SDL_SetModState(static_cast<SDL_Keymod>(mod));
      push_key(true, k, mod);
      keys_up_.push_back(k);
      break;
    }
    case FuzzKind::Text: {
      SDL_Event ev{};
      ev.type = SDL_TEXTINPUT;
      ev.text.windowID = SDL_GetWindowID(window_);
      std::snprintf(ev.text.text, sizeof ev.text.text, "%s", e.text.c_str());
      SDL_PushEvent(&ev);
      break;
    }
    case FuzzKind::Move: point(e.x, e.y); break;
    case FuzzKind::Click:
      point(e.x, e.y);
      push_button(true, e.button, 1);
      buttons_up_.push_back(e.button);
      break;
    case FuzzKind::DoubleClick:
      point(e.x, e.y);
      push_button(true, SDL_BUTTON_LEFT, 1);
      push_button(true, SDL_BUTTON_LEFT, 2);
      buttons_up_.push_back(SDL_BUTTON_LEFT);
      break;
    case FuzzKind::Drag:
      point(e.x, e.y);
      push_button(true, SDL_BUTTON_LEFT, 1);
      dragging_ = true;
      drag_ = e;
      drag_frame_ = 0;
      break;
    case FuzzKind::Wheel: {
      point(e.x, e.y);
      if (e.ctrl) SDL_SetModState(KMOD_LCTRL);
      SDL_Event ev{};
      ev.type = SDL_MOUSEWHEEL;
      ev.wheel.windowID = SDL_GetWindowID(window_);
      (e.horizontal ? ev.wheel.x : ev.wheel.y) = e.wheel;
      ev.wheel.direction = SDL_MOUSEWHEEL_NORMAL;
      SDL_PushEvent(&ev);
      break;
    }
    case FuzzKind::Resize: SDL_SetWindowSize(window_, e.w, e.h); break;
    case FuzzKind::View:
      app_.view = view_names()[e.view];
      if (std::find(views_shown_.begin(), views_shown_.end(), app_.view) == views_shown_.end())
        views_shown_.push_back(app_.view);
      break;
    case FuzzKind::Load:
      app_.in_mode = 2;
      app_.in_files = loads_[e.slot];
      refused("load", !load_typed_files(app_));
      break;
    case FuzzKind::Generate: {
      const auto to_int = [](long v) { return static_cast<int>(std::clamp<long>(v, INT_MIN, INT_MAX)); };
      app_.in_mode = 1;
      app_.in_n = to_int(e.n);
      app_.in_dk = to_int(e.d_k);
      app_.in_dv = to_int(e.d_v);
      app_.in_heads = to_int(e.heads);
      app_.in_seed = e.seed;
      refused("generate", !generate_random(app_));
      break;
    }
    case FuzzKind::Demo: choose_demo(app_); break;
    case FuzzKind::Export: {
      app_.export_dir = destinations_[e.slot / 3];
      const Export what = static_cast<Export>(e.slot % 3);
      export_from_window(app_, what);
      const bool was_refused = app_.status && app_.status(app_.lang).rfind(error_prefix, 0) == 0;
      refused("export", was_refused);
      // A stage or a heatmap written from a view that shows neither is a file of something not on screen.
      if (!was_refused && what != Export::TraceJson && !app_.shown_view().chain_steps())
        wrong_export_ = std::string(what == Export::StageCsv ? "Export CSV" : "Export PNG") + " wrote a file in the " +
                        view_names()[app_.shown] + " view, which shows no step's stage";
      app_.export_dir = exports_;
      exported_ = true;
      break;
    }
    case FuzzKind::Count_: break;
  }
}

bool Fuzzer::check() {
  if (ImGui::IsMousePosValid()) ++pointer_frames_;
  for (int b = 0; b < 3; ++b) presses_seen_ += ImGui::IsMouseClicked(b) ? 1 : 0;
  if (ImGui::GetIO().WantTextInput) ++typing_frames_;
  if (app_.quit) {  // Esc with nothing open: counted, and the run goes on
    ++quits_;
    app_.quit = false;
  }
  std::vector<std::string> broken = state_broken(state_json(app_.session, snapshot(app_)));
  for (const auto& v : app_.views)
    if (std::string b = v->broken(app_.session); !b.empty()) broken.push_back(b);
  if (!wrong_export_.empty()) broken.push_back(std::exchange(wrong_export_, std::string()));
  if (exported_) {
    exported_ = false;
    for (const std::string& f : leftovers(dir_)) broken.push_back("a refused or finished export left " + f);
  }
  if (broken.empty()) return true;
  std::fprintf(stderr, "error: fuzz: seed %llu, after event %ld (frame %ld): %s\n",
               static_cast<unsigned long long>(seed_), sent_, frames_, broken.front().c_str());
  for (std::size_t i = 1; i < broken.size(); ++i) std::fprintf(stderr, "  also: %s\n", broken[i].c_str());
  std::fprintf(stderr, "  the last events:\n");
  for (const std::string& r : recent_) std::fprintf(stderr, "    %s\n", r.c_str());
  std::fprintf(stderr, "  reproduce: %s --fuzz-events %ld --fuzz-seed %llu\n", reproduce_.c_str(), sent_,
               static_cast<unsigned long long>(seed_));
  return false;
}

std::string Fuzzer::summary() const {
  std::string s = "fuzz: seed " + std::to_string(seed_) + ": " + std::to_string(sent_) + " events over " +
                  std::to_string(frames_) + " frames (";
  bool first = true;
  for (const auto& [k, n] : kinds_) {
    s += (first ? "" : ", ") + k + " " + std::to_string(n);
    first = false;
  }
  s += "); views shown:";
  for (const std::string& v : views_shown_) s += " " + v;
  s += "; refused:";
  for (const char* what : {"load", "generate", "export"}) {
    const auto it = refused_.find(what);
    s += std::string(" ") + what + " " + std::to_string(it == refused_.end() ? 0 : it->second) + "/" +
         std::to_string(kinds_.count(what) ? kinds_.at(what) : 0);
  }
  s += "; ImGui saw the pointer in " + std::to_string(pointer_frames_) + " frames, " + std::to_string(presses_seen_) +
       " presses, a text field typing in " + std::to_string(typing_frames_) + " frames";
  s += "; quits asked " + std::to_string(quits_) + "; every invariant held";
  return s;
}

}  // namespace attnlab::viewer
