// The benchmark engine's reports, shared by its faces (`attnlab bench`, the perf view's Export CSV,
// scripts/bench-sweep and compare-torch read them): the machine a sweep ran on, and the sweep's
// results as CSV, JSON and the people's table. The rules the figures follow are engine/bench.h's.
#pragma once

#include "engine/bench.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace attnlab::bench {

struct Machine {
  std::string date, cpu, device;
  double copy_gbs = 0;       // device-to-device; 0: not measured
  double host_copy_gbs = 0;  // host_copy_probe; 0: not measured
  double host_read_gbs = 0;  // host_read_probe_all_cores (decode's yardstick); 0: not measured
  double cpu_fma_gflops = 0;  // cpu_fma_peak_gflops (the CPU backward's yardstick); 0: not measured
  double cpu_tile_gflops = 0;  // cpu_tile_peak_gflops (what the kernels' products reach); 0: not measured
  double cpu_llc_bytes = 0;    // the host's last-level cache as the C library reports it; 0: not known
};
// Today's date, the host CPU (host_cpu) and, when cuda_ok, the device and its device-to-device copy
// rate (a probe that fails says why on `log`, when given, and leaves the rate 0).
Machine machine_of(bool cuda_ok, std::ostream* log);

// One row per case, the columns
// backend,variant,precision,mask,heads,n,d,status,median_ms,min_ms,max_ms,tflops,gbs,
// min_bytes,moved_bytes,peak_bytes,rel_err,reference,queries,kv_heads,kv_bytes,kv_gbs,reason
std::string render_csv(const std::vector<Result>& results);
// The K+V read rate of a case that ran as a fraction of the machine's read bandwidth (the CPU's
// host_read_gbs, the device's copy rate); 0 where either is not known.
double kv_read_fraction(const Machine& m, const Result& r);
// Every case (ran or skipped, each with its figures or reason), the machine, the spec's repeat,
// warmup, seed and baseline, the kernel configurations in effect and the rules of the figures.
std::string render_json(const Machine& m, const std::vector<Result>& results, const Spec& s);
// The same for people: one line per case that ran, then kernels, stages, baseline ratios, skips.
std::string render_table(const Machine& m, const std::vector<Result>& results, const Spec& s);

}  // namespace attnlab::bench
