// What the viewer's tests share: the options of a viewer that runs on the CPU backend (the demo
// unless the test sets more), so no test depends on whether a GPU answers.
#pragma once

#include "viewer/app/options.h"

#include <string>

namespace attnlab::test {

inline viewer::ViewerOptions cpu_viewer_options() {
  viewer::ViewerOptions o;
  o.backend = "cpu";
  return o;
}

// A random problem of n tokens on the CPU.
inline viewer::ViewerOptions cpu_random_options(int n, int d_k, int d_v, MaskKind mask = MaskKind::None) {
  viewer::ViewerOptions o = cpu_viewer_options();
  o.random_n = n;
  o.d_k = d_k;
  o.d_v = d_v;
  o.mask = mask;
  return o;
}

// The printf conversions of a text, in order (the character after each %): a translation must
// take the same arguments as the English it stands for.
inline std::string printf_conversions(const char* t) {
  std::string out;
  for (const char* c = t; *c; ++c)
    if (*c == '%') out += *++c;
  return out;
}

}  // namespace attnlab::test
