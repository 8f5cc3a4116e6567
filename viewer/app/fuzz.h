// The UI event fuzzer's window half (attnlab-view --fuzz-events N [--fuzz-seed S]): the events of
// viewer/app/fuzz_events.h pushed into the real event loop of main.cpp as SDL events (keys and
// text through SDL_PushEvent, the pointer through SDL_WarpMouseInWindow — the one way to move
// SDL's own mouse state — and handed to ImGui each frame (pointer_to_imgui), presses repeated
// each frame while a drag lasts, resizes through SDL_SetWindowSize), and the buttons a random hand rarely finds (the views, Load,
// Generate, the demo, the exports) called as their buttons call them, with good and bad paths
// from a folder of its own. After every frame it checks the state dump (state_broken), every
// view's own invariants (View::broken) and that a refused export left no file behind; the first
// broken one ends the run with the event that broke it and the command that reproduces it.
//
// The run is made to repeat exactly: the session runs synchronously, playback advances by a fixed
// 1/30 s a frame, and the generator depends on its seed alone. (The heads view's thumbnails and a
// perf sweep still run on their own threads.)
#pragma once

#include "viewer/app/app.h"
#include "viewer/app/fuzz_events.h"

#include <SDL.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace attnlab::viewer {

class Fuzzer {
 public:
  // Makes its folder (the Load files, the export destinations) and points the app's exports there.
  Fuzzer(App& app, SDL_Window* window, long events, std::uint64_t seed, const std::string& reproduce);
  ~Fuzzer();  // removes the folder
  Fuzzer(const Fuzzer&) = delete;
  Fuzzer& operator=(const Fuzzer&) = delete;

  // Before the frame reads its events: pushes this frame's (the drag in progress, or a burst).
  void feed();
  // After the frame: a quit asked for (Esc) is counted and the run goes on; then the invariants.
  // False, after writing the report to stderr, when one is broken.
  bool check();
  // Between the backend's new frame and ImGui's: the pointer where the fuzzer put it. SDL's dummy
  // driver moves its mouse (SDL_GetMouseState) but gives no window the mouse or keyboard focus,
  // and without one the ImGui SDL backend leaves the pointer outside every window.
  void pointer_to_imgui() const;
  bool done() const { return sent_ >= events_; }
  bool rasterise() const { return frames_ % 8 == 0; }
  // "fuzz: seed 1: 2000 events over 650 frames ... every invariant held" (stdout at the end).
  std::string summary() const;

 private:
  void apply(const FuzzEvent& e);
  void point(float fx, float fy);  // SDL's mouse to a fraction of the window
  void push_key(bool down, SDL_Keycode k, Uint16 mod);
  void push_button(bool down, int button, int clicks);
  void write_inputs();

  App& app_;
  SDL_Window* window_;
  long events_;
  std::uint64_t seed_;
  std::string reproduce_;
  FuzzGenerator gen_;
  std::filesystem::path dir_;
  std::string exports_;
  std::array<InputFiles, kFuzzLoadSlots> loads_;
  std::array<std::string, kFuzzExportDestinations> destinations_;
  std::vector<SDL_Keycode> keys_up_;  // released the next frame (ImGui 1.86 drops a key pressed and
                                      // released in one frame)
  std::vector<int> buttons_up_;
  bool inside_ = false;  // the pointer was last put inside the window
  // The drag in progress.
  bool dragging_ = false;
  FuzzEvent drag_;
  int drag_frame_ = 0;
  // The report.
  long sent_ = 0, frames_ = 0, quits_ = 0;
  // What reached ImGui: frames with the pointer in the window, presses it saw, frames a text field
  // had the keyboard (the events arrive; the summary says how often).
  long pointer_frames_ = 0, presses_seen_ = 0, typing_frames_ = 0;
  std::map<std::string, long> kinds_;
  std::map<std::string, long> refused_;  // loads, generates and exports refused (with why)
  std::vector<std::string> views_shown_;
  std::vector<std::string> recent_;  // the last events, for the report
  bool exported_ = false;            // an export ran this frame (its folders are checked)
  std::string wrong_export_;         // an export that wrote what the view does not show
};

}  // namespace attnlab::viewer
