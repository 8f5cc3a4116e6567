// attnlab-view-bench: the viewer's benchmarks (`attnlab-view --bench-redraw`, `--bench-decode S`) as a program
// without SDL, for machines that have a GPU but no display libraries. Takes the viewer's flags.
#include "core/types.h"
#include "viewer/app/decode_bench.h"
#include "viewer/app/redraw_bench.h"
#include "viewer/app/options.h"

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  using namespace attnlab;
  try {
    viewer::ViewerOptions opts =
        viewer::parse_viewer_args(std::vector<std::string>(argv + 1, argv + argc), "attnlab-view-bench");
    if (opts.help) {
      std::fputs("usage: attnlab-view-bench [attnlab-view's flags, below]\n"
                 "attnlab-view --bench-redraw (the default) and --bench-decode S without SDL, for machines\n"
                 "without display libraries.\n\n",
                 stdout);
      std::fputs(viewer::viewer_usage().c_str(), stdout);
      return 0;
    }
    // Wrong numbers fail the run, however fast.
    if (opts.bench_decode_seconds > 0) return viewer::run_decode_bench(opts, std::cout).check_pass ? 0 : 1;
    return viewer::run_redraw_bench(opts, std::cout).check_pass ? 0 : 1;
  } catch (const InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
