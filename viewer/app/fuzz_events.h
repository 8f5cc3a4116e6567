// The UI event fuzzer's SDL-free half (the window's half, which pushes the events into the real
// event loop, is viewer/app/fuzz.h): a seeded generator of what a hand can do to the window, and
// the invariants the state dump must keep after every frame. The generator depends on nothing but
// its seed, so a seed gives the same events on every machine and every run; unit-tested in
// tests/viewer/test_fuzz_events.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace attnlab::viewer {

enum class FuzzKind {
  Key,          // a key of the fuzzer's key table (the keymap's keys and the text fields' own)
  Text,         // typed text (a text field takes it when one has the keyboard)
  Move,         // the pointer to (x, y)
  Click,        // a press of `button` at (x, y), released the next frame
  DoubleClick,  // two presses of the left button at (x, y) that SDL counts as a double-click
  Drag,         // the left button held from (x, y) to (x2, y2) over `frames` frames
  Wheel,        // the wheel by `wheel` notches at (x, y)
  Resize,       // the window to w x h (below the layout's minimum too)
  View,         // away from the view the run started on (to `view`), or back to it
  Load,         // the controls' Load with the file set `slot` (good and bad paths)
  Generate,     // Generate with the random-mode fields n, d_k, d_v, heads, seed (good and bad)
  Demo,         // the demo input
  Export,       // an export (`slot` % 3: CSV, JSON, PNG) into destination `slot` / 3 (good, bad)
  Count_
};
const char* to_string(FuzzKind k);

// The key table: names the window's half maps onto SDL key codes.
const std::vector<std::string>& fuzz_key_names();

struct FuzzEvent {
  FuzzKind kind = FuzzKind::Key;
  int key = 0;              // Key: index into fuzz_key_names()
  bool shift = false, ctrl = false;
  std::string text;         // Text: UTF-8, at most 31 bytes (one SDL_TEXTINPUT)
  float x = 0, y = 0;       // the pointer, as fractions of the window's size (outside it too)
  float x2 = 0, y2 = 0;     // Drag: where it ends
  int button = 1;           // Click: 1 left, 2 middle, 3 right
  int frames = 1;           // Drag: how many frames it takes
  int wheel = 0;            // Wheel: notches (negative: towards the user)
  bool horizontal = false;  // Wheel: sideways
  int w = 0, h = 0;         // Resize
  int view = 0;             // View: the registry's index of the view to show
  int slot = 0;             // Load: the file set; Export: kind and destination
  long n = 0, d_k = 0, d_v = 0, heads = 0;  // Generate's fields, as typed (out of range too)
  std::uint64_t seed = 0;
};
// One line for the failure report ("click button 1 at (0.31, 0.70)").
std::string describe(const FuzzEvent& e);

// How many Load file sets and export destinations the window's half provides.
constexpr int kFuzzLoadSlots = 12;
constexpr int kFuzzExportDestinations = 4;

// splitmix64: the same numbers from the same seed everywhere (std::uniform_*_distribution is not).
class FuzzRandom {
 public:
  explicit FuzzRandom(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  int below(int n);           // 0..n-1
  float unit();               // [0, 1)
  bool chance(double p);

 private:
  std::uint64_t state_;
};

class FuzzGenerator {
 public:
  // views: how many views the registry has; home: the view the run started on.
  FuzzGenerator(std::uint64_t seed, int views, int home);
  FuzzEvent next();
  // The events of the next frame: one to eight (a burst), never splitting a drag from what follows.
  std::vector<FuzzEvent> burst();

 private:
  FuzzEvent pointer(FuzzKind k);
  FuzzRandom r_;
  int views_, home_, shown_;
};

// What is wrong with a state dump (viewer/app/state_dump.h), empty when nothing: it parses, the
// step is 1..4, the query, the queries and the selected key are inside the problem, the
// temperature is finite and positive, the heatmap's window lies inside its matrix, the font and
// the UI scale are positive, the layer and the head are inside what the input has.
std::vector<std::string> state_broken(const std::string& dump);

}  // namespace attnlab::viewer
