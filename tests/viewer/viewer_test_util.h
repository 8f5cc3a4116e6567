// What the viewer's tests share: the options of a viewer that runs on the CPU backend (the demo
// unless the test sets more), so no test depends on whether a GPU answers.
#pragma once

#include "viewer/app/options.h"
#ifdef ATTNLAB_VIEW_BINARY
#include "tests/test_util.h"
#include "viewer/draw/png_io.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <vector>
#endif

#include "core/backend.h"
#include "cpu/cpu_backend.h"

#include <functional>
#include <memory>
#include <string>

namespace attnlab::test {

// The CPU backend with a hook before every run (SessionOptions::backends): a test's fault to
// inject, or its count of what the runs asked for.
class HookedCpuBackend final : public Backend {
 public:
  using Hook = std::function<void(const Problem&, const RunOptions&)>;
  explicit HookedCpuBackend(Hook before) : before_(std::move(before)) {}
  std::string name() const override { return "cpu"; }
  Trace run(const Problem& p, const RunOptions& opt) override {
    Trace t;
    run_into(p, opt, t);
    return t;
  }
  void run_into(const Problem& p, const RunOptions& opt, Trace& out) override {
    before_(p, opt);
    inner_->run_into(p, opt, out);
  }
  BenchSample bench(const Problem& p, const RunOptions& opt, int warmup, int repeat) override {
    return inner_->bench(p, opt, warmup, repeat);
  }

 private:
  Hook before_;
  std::unique_ptr<Backend> inner_ = make_cpu_backend();
};

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

#ifdef ATTNLAB_VIEW_BINARY
// The window's binary run headless on the CPU (`attnlab-view --screenshot --state-dump` plus
// `args`, 60 s at most): its exit code and stderr, and on success the picture and the state dump.
struct ViewShot {
  int code = 0;
  std::string err;
  viewer::Image img;
  nlohmann::json state;
};
inline ViewShot view_shot(const TempDir& dir, const std::string& name, const std::vector<std::string>& args) {
  const std::string png = dir.file(name + ".png"), json = dir.file(name + ".json");
  std::vector<std::string> all = {"60", view_binary(), "--screenshot", png, "--state-dump", json, "--backend", "cpu"};
  all.insert(all.end(), args.begin(), args.end());
  const BinaryRun r = run_binary("timeout", all, "SDL_VIDEODRIVER=dummy LANG=C.UTF-8");
  ViewShot s;
  s.code = r.code;
  s.err = r.err;
  if (r.code != 0) return s;
  s.img = viewer::read_png(png);
  std::ifstream in(json);
  s.state = nlohmann::json::parse(in);
  return s;
}
#endif

}  // namespace attnlab::test
