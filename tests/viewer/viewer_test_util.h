// What the viewer's tests share: the options of a viewer that runs on the CPU backend (the demo
// unless the test sets more), so no test depends on whether a GPU answers.
#pragma once

#include "viewer/options.h"

namespace attnlab::test {

inline viewer::ViewerOptions cpu_viewer_options() {
  viewer::ViewerOptions o;
  o.backend = "cpu";
  return o;
}

}  // namespace attnlab::test
