// The kernels' configuration switches (kernels/tile_config.h: ATTNLAB_FUSED_CONFIG,
// ATTNLAB_STAGED_CONFIG, ATTNLAB_DECODE_CONFIG; kernels/backward.h: ATTNLAB_BACKWARD_CONFIG), parsed on the host: valid values pick the index, anything else is
// refused with the variable, the value and the valid range; and the fused kernels' head dims.
#include "kernels/tile_config.h"
#ifdef ATTNLAB_HAVE_CUDA
#include "kernels/backward.h"
#include "kernels/decode.h"
#endif

#include "core/types.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

constexpr const char* kVar = "ATTNLAB_TEST_TILE_CONFIG";

int parse(const char* value, int count) {
  if (value == nullptr)
    unsetenv(kVar);
  else
    setenv(kVar, value, 1);
  return attnlab::cuda::config_from_env(kVar, count);
}

TEST(TileConfig, UnsetEmptyAndZeroMeanTheDefault) {
  EXPECT_EQ(parse(nullptr, 3), 0);
  EXPECT_EQ(parse("", 3), 0);
  EXPECT_EQ(parse("0", 3), 0);
}

// Unset, a launch runs its head-dim bucket's default; a value set picks that configuration in
// every bucket, 0 included.
TEST(TileConfig, UnsetRunsTheBucketsDefaultAndASetValueWins) {
  using namespace attnlab::cuda;
  EXPECT_EQ(head_dim_bucket(3), 0);
  EXPECT_EQ(head_dim_bucket(32), 0);
  EXPECT_EQ(head_dim_bucket(33), 1);
  EXPECT_EQ(head_dim_bucket(64), 1);
  EXPECT_EQ(head_dim_bucket(128), 2);
  EXPECT_EQ(head_dim_bucket(129), 3);
  EXPECT_EQ(head_dim_bucket(256), 3);
  unsetenv(kVar);
  EXPECT_EQ(attnlab::cuda::config_from_env(kVar, 7, 5), 5);
  setenv(kVar, "0", 1);
  EXPECT_EQ(attnlab::cuda::config_from_env(kVar, 7, 5), 0);
  unsetenv(kVar);
  const char* saved = std::getenv("ATTNLAB_FUSED_CONFIG");
  const std::string keep = saved ? saved : "";
  unsetenv("ATTNLAB_FUSED_CONFIG");
  for (int d : {16, 64, 128, 256}) EXPECT_EQ(fused_fp32_config(d), kFusedFp32Default[head_dim_bucket(d)]) << d;
  for (int d : {64, 128}) EXPECT_EQ(fused_bf16_config(d), kFusedBf16Default[head_dim_bucket(d)]) << d;
  setenv("ATTNLAB_FUSED_CONFIG", "2", 1);
  for (int d : {16, 64, 128, 256}) EXPECT_EQ(fused_fp32_config(d), 2) << d;
  setenv("ATTNLAB_FUSED_CONFIG", "4", 1);  // bf16's last (wgmma); fp32 has three
  for (int d : {64, 128}) EXPECT_EQ(fused_bf16_config(d), 4) << d;
  EXPECT_THROW(fused_fp32_config(64), attnlab::InputError);
  static_assert(kFusedBf16WgmmaFirst == 3 && kFusedBf16Configs == 5, "two wgmma configurations after the three mma.sync ones");
  if (saved)
    setenv("ATTNLAB_FUSED_CONFIG", keep.c_str(), 1);
  else
    unsetenv("ATTNLAB_FUSED_CONFIG");
}

TEST(TileConfig, ValidNumbersPickThatConfiguration) {
  EXPECT_EQ(parse("1", 3), 1);
  EXPECT_EQ(parse("2", 3), 2);
  EXPECT_EQ(parse("06", 7), 6);
}

TEST(TileConfig, AnythingElseIsRefusedWithTheRange) {
  for (const char* bad : {"3", "-1", "1x", " 1", "1.0", "fast", "0001"}) {
    EXPECT_EQ(attnlab::test::message_of<attnlab::InputError>([&] { parse(bad, 3); }),
              std::string(kVar) + "=" + bad + ": unknown configuration; valid: 0..2")
        << bad;
  }
  unsetenv(kVar);
}

// The head dims each fused kernel takes: one rule, used by the CUDA backend before it uploads
// anything, by the launchers and by `attnlab bench`'s skip reasons.
TEST(TileConfig, FusedFp32TakesHeadDimsUpTo256) {
  using attnlab::cuda::fused_fp32_shape_error;
  EXPECT_EQ(fused_fp32_shape_error(1, 1), "");
  EXPECT_EQ(fused_fp32_shape_error(3, 2), "");
  EXPECT_EQ(fused_fp32_shape_error(256, 256), "");
  EXPECT_EQ(fused_fp32_shape_error(257, 64), "fused fp32 supports head dims up to 256, got d_k 257, d_v 64");
  EXPECT_EQ(fused_fp32_shape_error(64, 300), "fused fp32 supports head dims up to 256, got d_k 64, d_v 300");
}

TEST(TileConfig, FusedBf16TakesEqualHeadDims64Or128) {
  using attnlab::cuda::fused_bf16_shape_error;
  EXPECT_EQ(fused_bf16_shape_error(64, 64), "");
  EXPECT_EQ(fused_bf16_shape_error(128, 128), "");
  EXPECT_EQ(fused_bf16_shape_error(64, 128), "bf16 fused attention needs d_k == d_v, got d_k 64 and d_v 128");
  for (int d : {1, 8, 32, 63, 65, 96, 127, 129, 256})
    EXPECT_EQ(fused_bf16_shape_error(d, d),
              "bf16 fused attention supports d_k == d_v in {64, 128}, got " + std::to_string(d));
}

// The fused backward's kernel switch (kernels/backward.h: ATTNLAB_BACKWARD_CONFIG) and the tiles
// each kernel's block mask uses: host code of the CUDA backend, so it runs wherever that is built.
TEST(BackwardConfig, TheSwitchPicksTheKernelAndItsTilesAndRefusesBadValues) {
#ifndef ATTNLAB_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  {
    attnlab::test::ScopedEnv env("ATTNLAB_BACKWARD_CONFIG", "");
    EXPECT_EQ(attnlab::cuda::backward_config(false), attnlab::cuda::kBackwardDefault[0]);
    EXPECT_EQ(attnlab::cuda::backward_config(true), attnlab::cuda::kBackwardDefault[1]);
  }
  {
    attnlab::test::ScopedEnv env("ATTNLAB_BACKWARD_CONFIG", "1");  // tensor cores: bf16 only
    EXPECT_EQ(attnlab::cuda::backward_config(true), 1);
    EXPECT_EQ(attnlab::cuda::backward_config(false), 0);
  }
  {
    attnlab::test::ScopedEnv env("ATTNLAB_BACKWARD_CONFIG", "2");  // two blocks per SM: bf16 only
    EXPECT_EQ(attnlab::cuda::backward_config(true), 2);
    EXPECT_EQ(attnlab::cuda::backward_config(false), 0);
  }
  // Two blocks per SM where asked for and at d 64 only (two blocks' shared memory at 128 exceeds an SM's).
  attnlab::cuda::BackwardArgs a;
  for (const bool two : {false, true})
    for (const int d : {64, 128}) {
      a.two_blocks = two;
      a.d_k = a.d_v = d;
      EXPECT_EQ(attnlab::cuda::backward_mma_two_blocks(a), two && d == 64) << two << " " << d;
    }
  // CUDA cores by head-dim bucket; tensor cores 64 x 64 at both of their head dims.
  EXPECT_EQ(attnlab::cuda::backward_tile(64, 64, false).q_tile, 64);
  EXPECT_EQ(attnlab::cuda::backward_tile(64, 64, false).k_tile, 64);
  EXPECT_EQ(attnlab::cuda::backward_tile(128, 128, false).q_tile, 64);
  EXPECT_EQ(attnlab::cuda::backward_tile(128, 128, false).k_tile, 32);
  EXPECT_EQ(attnlab::cuda::backward_tile(256, 64, false).q_tile, 32);
  for (int d : {64, 128}) {
    EXPECT_EQ(attnlab::cuda::backward_tile(d, d, true).q_tile, attnlab::cuda::kMmaBackwardTile.q_tile);
    EXPECT_EQ(attnlab::cuda::backward_tile(d, d, true).k_tile, attnlab::cuda::kMmaBackwardTile.k_tile);
  }
  attnlab::test::ScopedEnv env("ATTNLAB_BACKWARD_CONFIG", "3");
  EXPECT_EQ(attnlab::test::message_of<attnlab::InputError>([] { attnlab::cuda::backward_config(true); }),
            "ATTNLAB_BACKWARD_CONFIG=3: unknown configuration; valid: 0..2");
#endif
}

// The decode kernel's switch: 0 by default, 1 (the rows four at a time) only where a key/value
// head has two query rows or more; anything else refused with the valid range.
TEST(DecodeConfig, TheSwitchGroupsTwoRowsOrMoreAndRefusesBadValues) {
  {
    attnlab::test::ScopedEnv env("ATTNLAB_DECODE_CONFIG", "");
    EXPECT_EQ(attnlab::cuda::decode_config(), attnlab::cuda::kDecodeDefault);
#ifdef ATTNLAB_HAVE_CUDA
    for (int rows : {1, 2, 8, 16}) EXPECT_EQ(attnlab::cuda::decode_rows_grouped(rows), attnlab::cuda::kDecodeDefault == 1 && rows >= 2);
#endif
  }
  {
    attnlab::test::ScopedEnv env("ATTNLAB_DECODE_CONFIG", "1");
    EXPECT_EQ(attnlab::cuda::decode_config(), 1);
#ifdef ATTNLAB_HAVE_CUDA
    EXPECT_FALSE(attnlab::cuda::decode_rows_grouped(1));
    for (int rows : {2, 3, 8, 13, 16}) EXPECT_TRUE(attnlab::cuda::decode_rows_grouped(rows)) << rows;
#endif
  }
#ifdef ATTNLAB_HAVE_CUDA
  {
    attnlab::test::ScopedEnv env("ATTNLAB_DECODE_CONFIG", "0");
    for (int rows : {1, 2, 16}) EXPECT_FALSE(attnlab::cuda::decode_rows_grouped(rows)) << rows;
  }
#endif
  attnlab::test::ScopedEnv env("ATTNLAB_DECODE_CONFIG", "2");
  EXPECT_EQ(attnlab::test::message_of<attnlab::InputError>([] { attnlab::cuda::decode_config(); }),
            "ATTNLAB_DECODE_CONFIG=2: unknown configuration; valid: 0..1");
}

}  // namespace
