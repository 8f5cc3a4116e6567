// Faults inside a run: a run that fails on the session's worker (a device error, memory that runs
// out, a memory refusal), files that vanished or changed between two Loads, a bundle file cut
// short after the bundle was opened. Each leaves the last valid state on screen, says why in both
// languages, and the next accepted change runs as before. The failures are injected: a backend
// that fails on demand (SessionOptions::backends), files changed under the reader.
#include "viewer_test_util.h"
#include "heads_test_bundle.h"
#include "core/memory.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"
#include "viewer/session/session.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <new>
#include <string>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {

enum class Fault { None, Device, Memory, Refusal };

// The CPU backend, failing the next run the way `next` says (once).
struct Faulty {
  std::shared_ptr<std::atomic<Fault>> next = std::make_shared<std::atomic<Fault>>(Fault::None);
  ViewerOptions options(ViewerOptions o = test::cpu_viewer_options()) const {
    o.backends = [next = next](const std::string&) {
      return std::make_unique<test::HookedCpuBackend>([next](const Problem&, const RunOptions&) {
        switch (next->exchange(Fault::None)) {
          case Fault::Device: throw DeviceError("cudaMalloc: out of memory (injected)");
          case Fault::Memory: throw std::bad_alloc();
          case Fault::Refusal: throw ResourceError(Msg::HostMemoryCpuRun, {"staged", "9 EiB", "1 GiB"});
          case Fault::None: break;
        }
      });
    };
    return o;
  }
};

}  // namespace

TEST(Faults, ARunThatFailsKeepsTheStateOnScreenAndSaysWhyInBothLanguages) {
  struct Case {
    Fault fault;
    const char* en;
    const char* zh;
  };
  const Case cases[] = {
      {Fault::Device, "the GPU failed (cudaMalloc: out of memory (injected)); the picture is the last state that ran",
       "GPU 出错"},
      {Fault::Memory, "the run needed more memory than this machine has left", "内存"},
      {Fault::Refusal, "needs about 9 EiB of host memory", "9 EiB"},
  };
  for (bool async : {false, true}) {
    for (const Case& k : cases) {
      Faulty f;
      Session s(f.options(), async);
      const double t0 = s.problem().temperature;
      const MatrixF weights = s.trace().weights;
      *f.next = k.fault;
      const bool accepted = s.set_temperature(0.5);
      s.wait();
      EXPECT_EQ(accepted, async) << "sync: refused at once; async: the refusal comes through poll()";
      EXPECT_NE(s.error_text(Lang::En).find(k.en), std::string::npos) << s.error_text(Lang::En);
      EXPECT_NE(s.error_text(Lang::Zh).find(k.zh), std::string::npos) << s.error_text(Lang::Zh);
      EXPECT_EQ(s.problem().temperature, t0) << "the last valid state stays";
      EXPECT_EQ(s.requested_temperature(), t0) << "the controls follow it back";
      EXPECT_EQ(s.trace().weights, weights);
      // The next change runs as before and ends the message.
      ASSERT_TRUE(s.set_temperature(0.5));
      s.wait();
      EXPECT_EQ(s.problem().temperature, 0.5);
      EXPECT_TRUE(s.error().empty()) << s.error();
    }
  }
}

// The first run's failures are the command line's (the window exits as the CLI would: 1 for a
// device failure or memory, 2 for a refusal, which reaches it as the InputError it is).
TEST(Faults, TheFirstRunsFailureReachesTheCommandLine) {
  Faulty f;
  *f.next = Fault::Device;
  EXPECT_THROW(Session{f.options()}, DeviceError);
  *f.next = Fault::Memory;
  EXPECT_THROW(Session{f.options()}, std::bad_alloc);
  *f.next = Fault::Refusal;
  try {
    Session s{f.options()};
    ADD_FAILURE() << "no refusal";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("9 EiB"), std::string::npos) << e.what();
  }
}

// Load reads the files again every time (an edited file is the new one); a file that vanished
// or that changed into something unreadable is refused with why, and the last problem stays.
TEST(Faults, FilesThatVanishOrChangeBetweenLoadsAreRefusedAndTheLastStateStays) {
  const test::TempDir dir("attnlab-faults");
  const std::string q = dir.file("q.csv"), k = dir.file("k.csv"), v = dir.file("v.csv");
  for (bool async : {false, true}) {
    test::write_file(q, "1,0\n0,1\n");
    test::write_file(k, "1,0\n0,1\n");
    test::write_file(v, "1,2\n3,4\n");
    Session s(test::cpu_viewer_options(), async);
    const InputFiles files{q, k, v, "", "", ""};
    ASSERT_TRUE(s.load_files(files));
    s.wait();
    ASSERT_TRUE(s.from_files()) << s.error();
    EXPECT_EQ(s.problem().v()(1, 1), 4.0f);
    // Edited since: the same names read again.
    test::write_file(v, "1,2\n3,5\n");
    ASSERT_TRUE(s.load_files(files));
    s.wait();
    EXPECT_EQ(s.problem().v()(1, 1), 5.0f) << "the edited file";
    // Changed into a shape that does not fit: refused, the last problem stays.
    test::write_file(k, "1,0,0\n0,1,0\n");
    s.load_files(files);
    s.wait();
    EXPECT_NE(s.error_text(Lang::En).find("K has 3 columns but Q has 2"), std::string::npos) << s.error();
    EXPECT_NE(s.error_text(Lang::Zh), s.error_text(Lang::En));
    EXPECT_EQ(s.problem().k().cols(), 2);
    EXPECT_EQ(s.problem().v()(1, 1), 5.0f);
    test::write_file(k, "1,0\n0,1\n");
    // Vanished.
    std::filesystem::rename(v, v + ".gone");
    s.load_files(files);
    s.wait();
    EXPECT_NE(s.error_text(Lang::En).find("cannot open '" + v + "'"), std::string::npos) << s.error();
    EXPECT_NE(s.error_text(Lang::Zh).find("无法打开"), std::string::npos);
    EXPECT_EQ(s.problem().v()(1, 1), 5.0f);
    std::filesystem::rename(v + ".gone", v);
  }
}

// The manifest is read once, when the bundle opens; a call's arrays when it is shown. A file cut
// short in between is refused when its layer is asked for, and the layer on screen stays; the
// CLI says the same in one line, exit 2.
TEST(Faults, ABundleFileCutShortAfterTheBundleOpenedIsRefusedAndTheLayerStays) {
  const test::TempDir dir("attnlab-faults-bundle");
  test::write_heads_bundle(dir.path().string());
  ViewerOptions o = test::cpu_viewer_options();
  o.bundle = dir.path().string();
  for (bool async : {false, true}) {
    Session s(o, async);
    ASSERT_EQ(s.shown_layer(), 0);
    const std::string q1 = dir.file("1_q.npy");
    const std::string whole = test::read_file(q1);
    test::write_file(q1, whole.substr(0, 100));
    s.set_layer(1);
    s.wait();
    EXPECT_EQ(s.shown_layer(), 0) << "the layer on screen stays";
    EXPECT_EQ(s.layer(), 0) << "the picker follows it back";
    EXPECT_NE(s.error_text(Lang::En).find("1_q.npy"), std::string::npos) << s.error();
    EXPECT_FALSE(s.error_text(Lang::Zh).empty());
    const test::BinaryRun r =
        test::run_binary(test::attnlab_binary(), {"run", "--bundle", dir.path().string(), "--layer", "1", "--backend", "cpu"});
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    test::write_file(q1, whole);
    ASSERT_TRUE(s.set_layer(1));
    s.wait();
    EXPECT_EQ(s.shown_layer(), 1) << s.error();
  }
}
