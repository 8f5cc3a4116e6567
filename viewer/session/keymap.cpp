// Key -> action mapping and the key help (see keymap.h).
#include "viewer/session/keymap.h"

#include "viewer/draw/layout.h"

#include <algorithm>
#include <charconv>

namespace attnlab::viewer {

std::optional<Action> action_for_key(Key k) {
  switch (k) {
    case Key::Space: return Action::TogglePlay;
    case Key::Right: return Action::StepNext;
    case Key::Left: return Action::StepPrev;
    case Key::Home: return Action::StepHome;
    case Key::Up: return Action::QueryPrev;
    case Key::Down: return Action::QueryNext;
    case Key::M: return Action::ToggleMask;
    case Key::LeftBracket: return Action::TemperatureDown;
    case Key::RightBracket: return Action::TemperatureUp;
    case Key::L: return Action::ToggleLanguage;
    case Key::S: return Action::Screenshot;
    case Key::F1: return Action::ToggleHelp;
    case Key::Escape: return Action::Quit;
    case Key::F11: return Action::ToggleFullscreen;
    case Key::Plus:   // UI scale: only with Ctrl (action_for_key(k, shift, ctrl))
    case Key::Minus:
    case Key::Zero:
    case Key::Other: break;
  }
  return std::nullopt;
}

double step_temperature(double t, bool up) {
  // A typed temperature may lie outside the slider's range: a step never moves against its
  // direction, and stops at the range's edge (or stays, when already beyond it).
  const auto tidy = [](double x) {
    char b[32];
    const char* end = std::to_chars(b, b + sizeof b, x, std::chars_format::general, kTemperatureDigits).ptr;
    std::from_chars(b, end, x);
    return x;
  };
  if (up) return t >= kTemperatureMax ? t : std::min(tidy(t * kTemperatureRatio), kTemperatureMax);
  return t <= kTemperatureMin ? t : std::max(tidy(t / kTemperatureRatio), kTemperatureMin);
}

std::optional<Action> action_for_key(Key k, bool shift, bool ctrl) {
  if (ctrl) {
    switch (k) {
      case Key::Plus: return Action::UiScaleUp;
      case Key::Minus: return Action::UiScaleDown;
      case Key::Zero: return Action::UiScaleReset;
      default: break;
    }
  }
  if (shift && k == Key::Left) return Action::KeyPrev;
  if (shift && k == Key::Right) return Action::KeyNext;
  return action_for_key(k);
}

float step_ui_scale(float scale, bool up) {
  return std::clamp(up ? scale * kUiScaleStep : scale / kUiScaleStep, kMinUiScale, kMaxUiScale);
}

bool is_step_action(Action a) {
  return a == Action::TogglePlay || a == Action::StepNext || a == Action::StepPrev || a == Action::StepHome;
}

bool keeps_refusal(Action a) {
  switch (a) {
    case Action::TemperatureDown:
    case Action::TemperatureUp:
    case Action::ToggleMask:
    case Action::Screenshot:
    case Action::ToggleHelp:
    case Action::ToggleLanguage:
    case Action::UiScaleUp:
    case Action::UiScaleDown:
    case Action::UiScaleReset:
    case Action::ToggleFullscreen:
    case Action::Quit: return true;  // Esc closing the help, as F1 does; or the window ends
    default: return false;
  }
}

StepKeysHelp chain_step_keys_help(Lang lang) {
  const bool zh = lang == Lang::Zh;
  return {zh ? "播放 / 暂停四个步骤" : "play / pause the four steps",
          zh ? "单步后退 / 前进（限定在步骤 1 到 4）" : "one step back / forward (clamped at 1 and 4)",
          zh ? "回到步骤 1" : "back to step 1",
          zh ? "上一个 / 下一个查询 token" : "previous / next query token",
          zh ? "移动选中的键（热力图的十字线）" : "move the selected key (the heatmap's crosshair)",
          zh ? "选择单元所在的查询行和键" : "select the cell's query row and key",
          zh ? "把该查询行加入 / 移出多查询比较" : "add the row to / take it out of the queries compared",
          zh ? "热力图缩放 / 平移" : "zoom / pan the heatmap"};
}

std::string zoomable_map_help(Lang lang) {
  return lang == Lang::Zh ? "图的缩放 / 平移；双击回到整个矩阵" : "zoom / pan the map; double-click: the whole matrix";
}

KeyboardLineKind keyboard_line_kind(const StepKeysHelp& steps) {
  if (!steps.play.empty()) return KeyboardLineKind::Steps;
  return steps.mask.empty() && steps.temperature.empty() ? KeyboardLineKind::NoSteps : KeyboardLineKind::OtherViews;
}

std::vector<std::pair<std::string, std::string>> key_help(Lang lang, const StepKeysHelp& steps) {
  const bool zh = lang == Lang::Zh;
  // A view without steps: the step keys are listed, saying that they do nothing there.
  const std::string idle = zh ? "本视图中无作用（没有可播放的步骤）" : "nothing in this view (it has no steps)";
  const auto or_idle = [&](const std::string& s) { return steps.play.empty() ? idle : s; };
  // A view that draws no selected key: Shift + ← / → do nothing there, and the help says so.
  const std::string no_key = zh ? "本视图中无作用（没有选中键的十字线）" : "nothing in this view (it draws no selected key)";
  // The mouse where the view has nothing to select or zoom (its buttons and fields still click).
  const std::string no_cell = zh ? "本视图中不选择单元格" : "selects no cell in this view";
  const std::string no_zoom = zh ? "本视图中无作用（没有可缩放的图）" : "nothing in this view (no map to zoom)";
  const auto or_else = [](const std::string& s, const std::string& none) { return s.empty() ? none : s; };
  return {
      {zh ? "空格" : "Space", or_idle(steps.play)},
      {"← / →", or_idle(steps.step)},
      {"Home", or_idle(steps.home)},
      {"↑ / ↓", steps.query},
      {"Shift + ← / →", or_else(steps.key, no_key)},
      {"M", or_else(steps.mask, zh ? "切换掩码（双向 / 因果）" : "toggle the mask (none / causal)")},
      {"[ / ]", or_else(steps.temperature, zh ? "温度 ÷ 1.25 / × 1.25" : "temperature ÷ 1.25 / × 1.25")},
      {"L", zh ? "切换语言（中文 / English）" : "switch language (中文 / English)"},
      {"S", zh ? "保存截图（PNG）" : "save a screenshot (PNG)"},
      {"F1", zh ? "显示 / 隐藏按键说明" : "show / hide this key help"},
      {"Ctrl + / Ctrl − / Ctrl 0", zh ? "放大 / 缩小 / 还原界面（投影演示）" : "larger / smaller / default UI size (projector)"},
      {"F11", zh ? "全屏 / 退出全屏" : "fullscreen on / off"},
      {"Esc", zh ? "关闭打开的下拉列表或按键说明；都未打开时退出"
                 : "close an open list or this key help; quit when neither is open"},
      {zh ? "单击" : "Click", or_else(steps.click, no_cell)},
      {zh ? "Shift + 单击" : "Shift + click", or_else(steps.shift_click, no_cell)},
      {zh ? "滚轮 / 拖动" : "Wheel / drag", or_else(steps.wheel, no_zoom)},
  };
}

}  // namespace attnlab::viewer
