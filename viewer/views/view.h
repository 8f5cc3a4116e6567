// A view of the window: one lesson in the centre of the screen (the chain's steps, the walk, the
// heads, performance, precision, A/B difference, and the lessons to come). A view is a folder
// viewer/views/<name>/ holding its logic and state (SDL- and ImGui-free, unit-tested), its panel
// (panel*.cpp: ImGui, built into the window only) and the companion runs it needs; it is listed
// once, in viewer/views/registry.h, and the app finds everything else through that list: the
// --view names and the view's own flags, the radio buttons, the state dump, the keys' actions,
// the companions, the font atlas' text. Adding a view touches no other view and not the session.
//
// A registered view type T provides (the registry's templates call them; a view without flags of
// its own inherits WithoutFlags for the four about flags):
//   struct Options { ... };                  its command-line flags' values (may be empty)
//   static const char* label(Lang);          the radio button's text
//   static bool parse_flag(const std::string& flag, const FlagValue& value, Options&);
//                                            true when the flag is the view's (InputError when
//                                            its value is bad); called for flags the app does
//                                            not know itself
//   static void finish_options(Options&, bool shown, std::string& backend);
//                                            after every flag: cross-checks (InputError), and a
//                                            view that reads a shared flag its own way (the perf
//                                            view's --backend list) takes it and clears it
//   static std::string usage();              its lines of --help, "" when none
//   T(const ViewContext&, const Options&);   may throw InputError (the window exits 2)
// and, declared in its header and defined in its panel, the frame's drawing:
//   void draw_panel(T&, Shell&, const Layout&);
#pragma once

#include "core/messages.h"
#include "viewer/session/companion.h"
#include "viewer/session/keymap.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attnlab::viewer {

class Session;
struct Shell;   // viewer/ui/shell.h: what every panel draws with
struct Layout;  // viewer/draw/layout.h

// A flag's value: the next command-line word (InputError "option --x needs a value" when none).
using FlagValue = std::function<const std::string&()>;

// What a view is made from besides its options.
struct ViewContext {
  Session& session;
  bool headless = false;  // --screenshot: nothing runs after the picture (the perf view sweeps first)
  bool shown = false;     // this is the view the window opens on (--view)
  bool step_given = false;  // --step was given: a view that would open on another step keeps it
};

// A text of a view in both languages, for views that keep their words in their own folder (the
// font atlas takes them from texts()).
struct Text {
  const char* en;
  const char* zh;
  const char* in(Lang l) const { return l == Lang::Zh ? zh : en; }
};

class View {
 public:
  virtual ~View() = default;
  // Once a frame while the view is shown, before anything is drawn: what it asks of the session
  // (Session::set_step for the views of the chain's steps; `step` is the playback's).
  virtual void prepare(Session& s, int step) {
    (void)s;
    (void)step;
  }
  // What the view needs computed beside every run of the state on screen (null: nothing). The app
  // hands the shown view's to the session every frame, so another view's is dropped.
  virtual std::shared_ptr<const Companion> companion() const { return nullptr; }
  // Once a frame while another view is shown: work nobody sees stops.
  virtual void hidden() {}
  // True while the view times something on this machine (the perf view's sweep): the window then
  // redraws a few times a second rather than twenty, on input at once, so that drawing takes little
  // of the cores the timed runs use.
  virtual bool measuring() const { return false; }
  // A key's action while the view is shown, before the app's own meaning: true when taken.
  virtual bool on_action(Action a) {
    (void)a;
    return false;
  }
  // True when what the view shows follows the chain's steps (the playback's step 1..4): then the
  // controls' step buttons are drawn and the step keys it does not take drive the playback. A view
  // without (steps of its own in on_action, or none) hides those buttons, the step keys it leaves
  // do nothing, and the playback pauses while it is shown.
  virtual bool chain_steps() const { return false; }
  // True when the view draws the selected key (the chain's heatmap crosshair, Shell::key_sel):
  // then Shift + ← / → move it; elsewhere they do nothing (nothing there would show the move).
  virtual bool selects_keys() const { return false; }
  // What the step keys, ↑ / ↓, Shift + ← / → and the mouse do while the view is shown (the F1
  // help): the chain's when chain_steps(), otherwise nothing for the step keys; a view with steps
  // of its own says which; Shift + ← / → and the mouse the chain's where selects_keys(),
  // otherwise nothing unless the view says what its mouse does.
  virtual StepKeysHelp step_keys_help(Lang lang) const;
  // A new input was loaded in the window (demo, Generate, Load, the bundle).
  virtual void input_loaded() {}
  // Its fields of the state dump (--state-dump), beside the shared ones.
  virtual void dump(nlohmann::json& j, const Session& s) const {
    (void)j;
    (void)s;
  }
  // What of its own state lies outside what it has (a tile, a step, a window, a head it does not
  // have), empty when nothing: the UI event fuzzer asks after every frame (viewer/app/fuzz.h).
  virtual std::string broken(const Session& s) const {
    (void)s;
    return {};
  }
  // The mask sentence of the caveat bar: the problem's by default; a view that reads other keys
  // than the mask on screen says which (the decode view's new token reads the keys before it).
  virtual std::string mask_sentence(const Session& s, Lang lang) const;
  // True when the information panel is drawn in the right column beside the view (the perf view
  // takes that column for its charts; the diff view leaves it out).
  virtual bool info_panel() const { return true; }
  // The text it may draw beyond draw/strings.h's table, both languages: what the font atlas adds.
  virtual std::vector<std::string> texts() const { return {}; }
  // The matrix its heatmap draws at `step` in place of the step's stage (a sub-stage, an input),
  // with a word for the exported file's name; null: the step's own stage (what Export CSV writes).
  struct Shown {
    const MatrixF* matrix = nullptr;
    std::string word;
  };
  virtual Shown shown_matrix(const Session& s, int step) const {
    (void)s;
    (void)step;
    return {};
  }
};

// Every text of a view's table of {id, Text} entries, English then Chinese: what its texts()
// hands to the font atlas.
template <class Entry, std::size_t N>
std::vector<std::string> texts_of(const Entry (&table)[N]) {
  std::vector<std::string> out;
  for (const Entry& e : table) {
    out.emplace_back(e.text.en);
    out.emplace_back(e.text.zh);
  }
  return out;
}

// Whether the app's own meaning of `a` (after the view's on_action left it) applies while `v` is
// shown: the step keys only where the view shows the chain's steps, Shift + ← / → only where it
// draws the selected key; every other action everywhere.
bool app_acts_on(const View& v, Action a);

// The chain view's step keys for a view that steps through a sequence of its own (Space play,
// ←/→ one step, Home the first): true when `a` is one of them, done on v's toggle_play, next,
// prev and home.
template <class V>
bool take_step_keys(V& v, Action a) {
  switch (a) {
    case Action::TogglePlay: v.toggle_play(); return true;
    case Action::StepNext: v.next(); return true;
    case Action::StepPrev: v.prev(); return true;
    case Action::StepHome: v.home(); return true;
    default: return false;
  }
}

// What a view without flags of its own inherits beside View (its static part of the contract).
struct WithoutFlags {
  struct Options {};
  static bool parse_flag(const std::string&, const FlagValue&, Options&) { return false; }
  static void finish_options(Options&, bool, std::string&) {}
  static std::string usage() { return {}; }
};

// "--tile must be an integer from 1 to 1048576, got 'x'": a whole number of a flag within [lo, hi].
template <class Int>
Int parse_flag_int(const std::string& flag, const std::string& text, Int lo, Int hi) {
  Int v{};
  const auto* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end || v < lo || v > hi) {
    throw InputError(Msg::IntRange, {flag, std::to_string(lo), std::to_string(hi), text});
  }
  return v;
}

}  // namespace attnlab::viewer
