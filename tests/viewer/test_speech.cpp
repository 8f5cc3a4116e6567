// The Speak button's child process (viewer/app/speech.h), with a stand-in espeak-ng on PATH: what it
// prints on stderr is caught (not sent to the viewer's terminal) and reported as the reason
// nothing may have been heard; a quiet run or a run stopped on purpose reports nothing.
#include "tests/test_util.h"
#include "viewer/app/speech.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

namespace attnlab::viewer {
namespace {

namespace fs = std::filesystem;

// Puts an executable `espeak-ng` with the given shell body first on PATH while alive.
class FakeEspeak {
 public:
  explicit FakeEspeak(const std::string& body)
      : exe_(test::write_file(dir_.file("espeak-ng"), "#!/bin/sh\n" + body + "\n")),
        path_("PATH", (dir_.path().string() + ":" + path_or_empty()).c_str()) {
    fs::permissions(exe_, fs::perms::owner_all);
  }
  const std::string& path() const { return exe_; }

 private:
  static std::string path_or_empty() {
    const char* p = std::getenv("PATH");
    return p ? p : "";
  }
  test::TempDir dir_{"attnlab-fake-espeak"};  // declared first: goes last, after PATH is restored
  std::string exe_;
  test::ScopedEnv path_;
};

// Polls speaking() until the child is reaped (a generous bound, 60 s: a busy machine is slower).
bool wait_done(Speaker& s) {
  for (int i = 0; i < 6000; ++i) {
    if (!s.speaking()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(Speech, WhatEspeakPrintsIsReportedNotLost) {
  // Quiet once a file "<itself>.quiet" exists (the Speaker keeps the path it found).
  FakeEspeak fake("[ -f \"$0.quiet\" ] && exit 0; echo '' >&2; "
                  "echo \"ALSA lib confmisc.c:855:(parse_card) cannot find card '0'\" >&2; exit 0");
  Speaker s;
  ASSERT_TRUE(s.available());
  ASSERT_TRUE(s.speak("你好", Lang::Zh));
  ASSERT_TRUE(wait_done(s));
  EXPECT_EQ(s.problem(), "ALSA lib confmisc.c:855:(parse_card) cannot find card '0'");
  // The next run starts clean: this time espeak-ng prints nothing, and nothing is reported.
  test::write_file(fake.path() + ".quiet", "");
  ASSERT_TRUE(s.speak("again", Lang::En));
  ASSERT_TRUE(wait_done(s));
  EXPECT_EQ(s.problem(), "");
}

TEST(Speech, AQuietRunAndAStoppedRunReportNothing) {
  {
    FakeEspeak fake("exit 0");
    Speaker s;
    ASSERT_TRUE(s.speak("hello", Lang::En));
    ASSERT_TRUE(wait_done(s));
    EXPECT_TRUE(s.problem().empty());
  }
  FakeEspeak fake("echo started >&2; sleep 30");
  Speaker s;
  ASSERT_TRUE(s.speak("hello", Lang::En));
  EXPECT_TRUE(s.speaking()) << "the child runs for 30 s unless stopped";
  s.stop();
  EXPECT_FALSE(s.speaking());
  EXPECT_TRUE(s.problem().empty());
}

// Speak is disabled (available() false) exactly when no espeak-ng is on PATH.
TEST(Speech, UnavailableWithoutEspeakOnPath) {
  {
    FakeEspeak fake("exit 0");
    EXPECT_TRUE(Speaker().available());
  }
  Speaker s = [] {
    const test::ScopedEnv path("PATH", "/nonexistent-attnlab-dir");
    return Speaker();
  }();
  EXPECT_FALSE(s.available());
  EXPECT_FALSE(s.speak("hello", Lang::En));
  EXPECT_FALSE(s.speaking());
}

TEST(Speech, VoiceFollowsTheLanguage) {
  EXPECT_STREQ(espeak_voice(Lang::Zh), "cmn");
  EXPECT_STREQ(espeak_voice(Lang::En), "en");
}

}  // namespace
}  // namespace attnlab::viewer
