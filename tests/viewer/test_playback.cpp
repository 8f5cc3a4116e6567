// Playback state machine: clamped manual steps, Home, play/pause, speed, wrap-around while playing,
// and at most one step per tick however long the frame.
#include "viewer/session/playback.h"

#include <gtest/gtest.h>

using attnlab::viewer::Playback;

TEST(Playback, StartsAtStepOnePaused) {
  Playback p;
  EXPECT_EQ(p.step(), 1);
  EXPECT_FALSE(p.playing());
  EXPECT_DOUBLE_EQ(p.speed(), 1.0);
}

TEST(Playback, ManualStepsClampAtOneAndFour) {
  Playback p;
  for (int i = 0; i < 6; ++i) p.next();
  EXPECT_EQ(p.step(), 4);
  p.prev();
  EXPECT_EQ(p.step(), 3);
  for (int i = 0; i < 6; ++i) p.prev();
  EXPECT_EQ(p.step(), 1);
  p.set_step(9);
  EXPECT_EQ(p.step(), 4);
  p.set_step(-2);
  EXPECT_EQ(p.step(), 1);
  p.set_step(3);
  p.home();
  EXPECT_EQ(p.step(), 1);
}

TEST(Playback, PausedTicksDoNothing) {
  Playback p;
  EXPECT_FALSE(p.tick(10));
  EXPECT_EQ(p.step(), 1);
}

TEST(Playback, PlayingAdvancesOnceEveryPeriodAndWraps) {
  Playback p;
  p.toggle_play();
  EXPECT_TRUE(p.playing());
  EXPECT_FALSE(p.tick(0.5));
  EXPECT_TRUE(p.tick(0.6));
  EXPECT_EQ(p.step(), 2);
  // A very long frame still advances a single step: no stage is skipped unseen.
  EXPECT_TRUE(p.tick(10));
  EXPECT_EQ(p.step(), 3);
  p.tick(1.0);
  EXPECT_EQ(p.step(), 4);
  p.tick(1.0);
  EXPECT_EQ(p.step(), 1) << "playing wraps from step 4 to step 1";
  p.toggle_play();
  EXPECT_FALSE(p.playing());
  EXPECT_FALSE(p.tick(5));
  EXPECT_EQ(p.step(), 1);
}

TEST(Playback, SpeedIsClampedAndSetsThePeriod) {
  Playback p;
  p.set_speed(100);
  EXPECT_DOUBLE_EQ(p.speed(), attnlab::viewer::kMaxSpeed);
  p.set_speed(0);
  EXPECT_DOUBLE_EQ(p.speed(), attnlab::viewer::kMinSpeed);
  p.set_speed(2);
  p.set_playing(true);
  EXPECT_FALSE(p.tick(0.4));
  EXPECT_TRUE(p.tick(0.15));  // 0.55 s > 0.5 s period at 2 steps/s
  EXPECT_EQ(p.step(), 2);
}

TEST(Playback, ManualStepRestartsThePeriod) {
  Playback p;
  p.set_playing(true);
  p.tick(0.9);
  p.next();  // step 2, timer restarts
  EXPECT_FALSE(p.tick(0.9));
  EXPECT_EQ(p.step(), 2);
}
