// Key -> action mapping and the key help (see keymap.h).
#include "viewer/keymap.h"

#include <algorithm>

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
    case Key::Other: break;
  }
  return std::nullopt;
}

double step_temperature(double t, bool up) {
  // A typed temperature may lie outside the slider's range: a step never moves against its
  // direction, and stops at the range's edge (or stays, when already beyond it).
  if (up) return t >= kTemperatureMax ? t : std::min(t * kTemperatureRatio, kTemperatureMax);
  return t <= kTemperatureMin ? t : std::max(t / kTemperatureRatio, kTemperatureMin);
}

std::vector<std::pair<std::string, std::string>> key_help(Lang lang) {
  const bool zh = lang == Lang::Zh;
  return {
      {zh ? "空格" : "Space", zh ? "播放 / 暂停" : "play / pause"},
      {"← / →", zh ? "单步后退 / 前进" : "one step back / forward"},
      {"Home", zh ? "重置到步骤 1" : "back to step 1"},
      {"↑ / ↓", zh ? "上一个 / 下一个查询 token" : "previous / next query token"},
      {"M", zh ? "切换掩码（双向 / 因果）" : "toggle the mask (none / causal)"},
      {"[ / ]", zh ? "温度 ÷ 1.25 / × 1.25" : "temperature ÷ 1.25 / × 1.25"},
      {"L", zh ? "切换语言（中文 / English）" : "switch language (中文 / English)"},
      {"S", zh ? "保存截图（PNG）" : "save a screenshot (PNG)"},
      {"F1", zh ? "显示 / 隐藏按键说明" : "show / hide this key help"},
      {"Esc", zh ? "退出" : "quit"},
      {zh ? "滚轮 / 拖动" : "Wheel / drag", zh ? "热力图缩放 / 平移" : "zoom / pan the heatmap"},
  };
}

}  // namespace attnlab::viewer
