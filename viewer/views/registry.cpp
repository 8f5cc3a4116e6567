// The view registry (see registry.h): each function walks ATTNLAB_VIEWS.
#include "viewer/views/registry.h"

#include "core/stats.h"
#include "viewer/session/session.h"

namespace attnlab::viewer {

std::string View::mask_sentence(const Session& s, Lang lang) const { return attnlab::mask_sentence(s.problem(), lang); }

StepKeysHelp View::step_keys_help(Lang lang) const {
  StepKeysHelp h = chain_step_keys_help(lang);
  if (!chain_steps()) h.play = h.step = h.home = "";
  // The selected key, a click's and a Shift + click's selection and the zoomable heatmap are the
  // chain view's; a view with a mouse of its own says so in its step_keys_help.
  if (!selects_keys()) h.key = h.click = h.shift_click = h.wheel = "";
  return h;
}

bool app_acts_on(const View& v, Action a) {
  if (is_step_action(a)) return v.chain_steps();
  if (a == Action::KeyPrev || a == Action::KeyNext) return v.selects_keys();
  return true;
}

const std::vector<std::string>& view_names() {
  static const std::vector<std::string> names = {
#define ATTNLAB_VIEW_NAME(name, Type) #name,
      ATTNLAB_VIEWS(ATTNLAB_VIEW_NAME)
#undef ATTNLAB_VIEW_NAME
  };
  return names;
}

int view_index(const std::string& name) {
  const std::vector<std::string>& names = view_names();
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<int>(i);
  return -1;
}

std::string view_names_text() {
  const std::vector<std::string>& names = view_names();
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "" : ", ") + names[i];
  return s;
}

const char* view_label(int i, Lang lang) {
  using Label = const char* (*)(Lang);
  static constexpr Label labels[] = {
#define ATTNLAB_VIEW_LABEL(name, Type) &Type::label,
      ATTNLAB_VIEWS(ATTNLAB_VIEW_LABEL)
#undef ATTNLAB_VIEW_LABEL
  };
  return labels[i](lang);
}

bool parse_view_flag(const std::string& flag, const FlagValue& value, ViewOptions& o) {
#define ATTNLAB_VIEW_FLAG(name, Type) \
  if (Type::parse_flag(flag, value, o.name)) return true;
  ATTNLAB_VIEWS(ATTNLAB_VIEW_FLAG)
#undef ATTNLAB_VIEW_FLAG
  return false;
}

void finish_view_options(ViewOptions& o, const std::string& shown, std::string& backend) {
#define ATTNLAB_VIEW_FINISH(name, Type) Type::finish_options(o.name, shown == #name, backend);
  ATTNLAB_VIEWS(ATTNLAB_VIEW_FINISH)
#undef ATTNLAB_VIEW_FINISH
}

std::string views_usage() {
  std::string s;
#define ATTNLAB_VIEW_USAGE(name, Type) s += Type::usage();
  ATTNLAB_VIEWS(ATTNLAB_VIEW_USAGE)
#undef ATTNLAB_VIEW_USAGE
  return s;
}

std::vector<std::unique_ptr<View>> make_views(Session& s, const ViewOptions& o, const std::string& shown,
                                              bool headless, bool step_given) {
  std::vector<std::unique_ptr<View>> views;
#define ATTNLAB_VIEW_MAKE(name, Type) \
  views.push_back(std::make_unique<Type>(ViewContext{s, headless, shown == #name, step_given}, o.name));
  ATTNLAB_VIEWS(ATTNLAB_VIEW_MAKE)
#undef ATTNLAB_VIEW_MAKE
  return views;
}

}  // namespace attnlab::viewer
