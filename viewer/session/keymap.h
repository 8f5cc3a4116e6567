// Keyboard: the viewer's own key names (main.cpp maps SDL keycodes onto them), the action each key
// triggers, the F1 help text, and the temperature step of [ and ]. Free of SDL so the mapping is
// unit-tested. Temperature keys multiply or divide by 1.25: a ratio step keeps T > 0 at any size
// and feels the same at T = 0.1 and T = 5 (the softmax sees logits / T, so ratios are what matter).
#pragma once

#include "core/types.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attnlab::viewer {

enum class Key { Space, Left, Right, Home, Up, Down, M, LeftBracket, RightBracket, L, S, F1, Escape,
                 Plus, Minus, Zero, F11, Other };

enum class Action {
  TogglePlay,
  StepNext,
  StepPrev,
  StepHome,
  QueryPrev,
  QueryNext,
  KeyPrev,  // Shift + ←/→: the selected key (the heatmap's crosshair column)
  KeyNext,
  ToggleMask,
  TemperatureDown,
  TemperatureUp,
  ToggleLanguage,
  Screenshot,
  ToggleHelp,
  Quit,
  UiScaleUp,    // Ctrl + (or Ctrl =): the presentation size, fonts re-rasterised
  UiScaleDown,  // Ctrl −
  UiScaleReset, // Ctrl 0
  ToggleFullscreen,  // F11
};

std::optional<Action> action_for_key(Key k);
// The same with modifiers: Shift + ←/→ move the selected key instead of the step; Ctrl + / − / 0
// set the UI scale (without Ctrl those keys do nothing).
std::optional<Action> action_for_key(Key k, bool shift, bool ctrl = false);

constexpr float kUiScaleStep = 1.1f;  // Ctrl + multiplies, Ctrl − divides
float step_ui_scale(float scale, bool up);  // within [kMinUiScale, kMaxUiScale] of layout.h

constexpr double kTemperatureRatio = 1.25;
constexpr double kTemperatureMin = 0.05;  // the slider's range; typed values may go beyond
constexpr double kTemperatureMax = 20.0;
// t * 1.25 (up) or t / 1.25 (down), stopping at the edge of [kTemperatureMin, kTemperatureMax];
// a typed t beyond an edge stays when stepped further out, and never moves the other way. The
// product is rounded to kTemperatureDigits significant digits: the division's binary noise gone,
// the reproduce command, the controls and the state dump print the same short decimal.
constexpr int kTemperatureDigits = 12;
double step_temperature(double t, bool up);

// Space, ← / →, Home: the step keys, which act on the steps of the view shown (the chain's, or a
// view's own), or do nothing in a view without steps.
bool is_step_action(Action a);

// Whether an action leaves the last refusal's message on screen: a state change (which ends it
// itself, or replaces it) and what only shows the window (a screenshot, which is to capture it,
// the help, the other language, which says the refusal in it, the UI scale, full screen; Esc,
// which closes the help or quits). Any other ends it, where it acts at all: a key that does
// nothing in the view shown leaves it (viewer/app/app.cpp apply_action).
bool keeps_refusal(Action a);

// What the step keys, ↑ / ↓, Shift + ← / → and the mouse do in the view shown, in one language,
// for the F1 help; an empty `play` means the step keys do nothing there, an empty `key` that
// Shift + ← / → do nothing there (the view draws no selected key), an empty `click`,
// `shift_click` or `wheel` that the mouse does not do that there.
struct StepKeysHelp {
  std::string play, step, home, query;
  std::string key = {};
  std::string click = {}, shift_click = {}, wheel = {};
  // M's and [ / ]'s lines where the view does not use the mask or the temperature it sets (they
  // still set the controls' for the other views); empty: the usual lines.
  std::string mask = {}, temperature = {};
};
// The chain's: play / pause the four steps, one step, step 1; the previous / next query token;
// the selected key (the heatmap's crosshair); a click selects a cell's query row and key, Shift +
// click adds or removes a compared query, the wheel and a drag zoom and pan the heatmap.
StepKeysHelp chain_step_keys_help(Lang lang);
// The wheel's line of a view whose map zooms like the chain's and returns to the whole matrix on
// a double-click (the precision and diff views' maps).
std::string zoomable_map_help(Lang lang);

// Which keyboard line sits under a view (the one-line reminder beside "F1: all keys"): the step
// keys where the view has steps; ↑ ↓, M and [ ] where it has none; and, where the view itself uses
// neither the mask nor the temperature it sets (its help says so), that those keys set the other
// views'.
enum class KeyboardLineKind { Steps, NoSteps, OtherViews };
KeyboardLineKind keyboard_line_kind(const StepKeysHelp& steps);

// (key, what it does) lines for the F1 help, in the UI language, with the view's step keys.
std::vector<std::pair<std::string, std::string>> key_help(Lang lang, const StepKeysHelp& steps);

}  // namespace attnlab::viewer
