// The Speak button's child process (viewer/speech.h), with a stand-in espeak-ng on PATH: what it
// prints on stderr is caught (not sent to the viewer's terminal) and reported as the reason
// nothing may have been heard; a quiet run or a run stopped on purpose reports nothing.
#include "tests/test_util.h"
#include "viewer/speech.h"

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
  explicit FakeEspeak(const std::string& body) {
    const std::string exe = test::write_file(dir_.file("espeak-ng"), "#!/bin/sh\n" + body + "\n");
    fs::permissions(exe, fs::perms::owner_all);
    const char* old = std::getenv("PATH");
    old_path_ = old ? old : "";
    setenv("PATH", (dir_.path().string() + ":" + old_path_).c_str(), 1);
  }
  ~FakeEspeak() { setenv("PATH", old_path_.c_str(), 1); }  // then dir_ goes

 private:
  test::TempDir dir_{"attnlab-fake-espeak"};
  std::string old_path_;
};

// Polls speaking() until the child is reaped (at most 10 s).
bool wait_done(Speaker& s) {
  for (int i = 0; i < 1000; ++i) {
    if (!s.speaking()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(Speech, WhatEspeakPrintsIsReportedNotLost) {
  FakeEspeak fake("echo '' >&2; echo \"ALSA lib confmisc.c:855:(parse_card) cannot find card '0'\" >&2; exit 0");
  Speaker s;
  ASSERT_TRUE(s.available());
  ASSERT_TRUE(s.speak("你好", Lang::Zh));
  ASSERT_TRUE(wait_done(s));
  EXPECT_EQ(s.problem(), "ALSA lib confmisc.c:855:(parse_card) cannot find card '0'");
  // The next run starts clean.
  ASSERT_TRUE(s.speak("again", Lang::En));
  ASSERT_TRUE(wait_done(s));
  EXPECT_FALSE(s.problem().empty());
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
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(s.speaking());
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
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  setenv("PATH", "/nonexistent-attnlab-dir", 1);
  Speaker s;
  setenv("PATH", saved.c_str(), 1);
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
