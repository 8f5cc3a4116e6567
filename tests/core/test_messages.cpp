// The message catalogue (core/messages.h): the English text of an error thrown with an id is the
// command line's sentence, the same error reads in Chinese in the viewer, and the refusals of the
// core (temperature, shapes, masks, files) carry their id.
#include "core/inputs.h"
#include "core/io.h"
#include "core/messages.h"
#include "core/problem.h"
#include "core/format.h"
#include "core/memory.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>

namespace attnlab {
namespace {

Message caught(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return message_of(e);
  }
  ADD_FAILURE() << "nothing was thrown";
  return {};
}

TEST(Messages, EnglishIsTheCommandLinesSentenceAndChineseFollows) {
  const Message t = caught([] { parse_temperature("abc"); });
  EXPECT_EQ(t.id, Msg::TemperatureInvalid);
  EXPECT_EQ(t.en, "temperature must be a finite number > 0, got 'abc'");
  EXPECT_EQ(t.text(Lang::Zh), "温度必须是大于 0 的有限数，当前为“abc”");
  // The Chinese quote marks take no blank beside a Chinese character; a number keeps its blank.
  EXPECT_EQ(caught([] { parse_temperature("0"); }).text(Lang::Zh), "温度必须是大于 0 的有限数，当前为 0");
  EXPECT_EQ(render_message(Msg::ModTwice, {"causal"}, Lang::Zh), "“causal”给了两次");
  Problem p = random_problem(4, 3, 2, 1);
  p.edit().k = random_problem(4, 5, 2, 2).k();
  const Message s = caught([&] { validate(p); });
  EXPECT_EQ(s.en, "K has 5 columns but Q has 3 (both must be d_k)");
  EXPECT_EQ(s.text(Lang::Zh), "K 有 5 列而 Q 有 3 列（两者都必须是 d_k）");
  Problem f = demo_problem();
  f.mask = MaskKind::Custom;
  f.edit().custom_mask = MatrixF::Zero(5, 5);
  f.edit().custom_mask.row(1).setConstant(-std::numeric_limits<float>::infinity());
  const Message fm = caught([&] { validate(f); });
  EXPECT_EQ(fm.id, Msg::FullyMaskedRow);
  EXPECT_NE(fm.text(Lang::Zh).find("行 1（根据）被完全屏蔽"), std::string::npos) << fm.text(Lang::Zh);
}

TEST(Messages, FileRefusalsCarryTheirIds) {
  const test::TempDir dir("attnlab-msg");
  const std::string bad = test::write_file(dir.path() / "bad.csv", "1 2\n3 x\n");
  const Message n = caught([&] { read_matrix(bad); });
  EXPECT_EQ(n.id, Msg::NotANumber);
  EXPECT_NE(n.text(Lang::Zh).find("不是数字"), std::string::npos) << n.text(Lang::Zh);
  EXPECT_NE(n.en.find("'x' is not a number"), std::string::npos) << n.en;
  const Message o = caught([&] { read_matrix((dir.path() / "missing.csv").string()); });
  EXPECT_EQ(o.id, Msg::CannotOpen);
  EXPECT_NE(o.text(Lang::Zh).find("无法打开"), std::string::npos);
  const Message r = caught([&] { read_matrix(test::write_file(dir.path() / "ragged.csv", "1 2\n3\n")); });
  EXPECT_EQ(r.id, Msg::RowLength);
  const Message m = caught([&] { read_mask(test::write_file(dir.path() / "m.csv", "0 0.5\n")); });
  EXPECT_EQ(m.id, Msg::CsvMaskEntry);
  EXPECT_NE(m.text(Lang::Zh).find("掩码元素只能是 0 或 -inf"), std::string::npos) << m.text(Lang::Zh);
  Problem p = demo_problem();
  p.mask = MaskKind::Custom;
  p.edit().custom_mask = MatrixF::Zero(4, 5);
  const Message ms = caught([&] { validate(p); });
  EXPECT_EQ(ms.en, "the mask is 4x5 but the scores are 5x5");
  EXPECT_EQ(ms.text(Lang::Zh), "掩码为 4x5，而分数矩阵为 5x5");
  Problem t = demo_problem();
  const Message tl = caught([&] { apply_token_spec(t, "a,b", ""); });
  // The demo has n = m: n or n + m labels would do, both named as numbers in either language.
  EXPECT_EQ(tl.id, Msg::TokenLabelCountEither);
  EXPECT_EQ(tl.en, "--tokens: the number of labels is 2, but the problem has n = 5 queries and m = 5 keys: give 5 (one per "
            "position) or n + m = 10 (queries first, then keys)");
  EXPECT_EQ(tl.text(Lang::Zh), "--tokens 给出 2 个标签，而问题有 5 个查询和 5 个键（应给 5 个：每个位置一个；或 n + m = 10 个：先查询，后键）");
  // An error without an id stays as it was, in English, in every language.
  const Message plain = message_of(InputError("something else"));
  EXPECT_EQ(plain.text(Lang::Zh), "something else");
}

TEST(Messages, EveryIdHasBothLanguages) {
  for (int i = 1; i < static_cast<int>(Msg::Count_); ++i) {
    const std::vector<std::string> args{"A0", "A1", "A2", "A3"};
    const std::string en = render_message(static_cast<Msg>(i), args, Lang::En);
    const std::string zh = render_message(static_cast<Msg>(i), args, Lang::Zh);
    EXPECT_FALSE(en.empty()) << i;
    EXPECT_NE(en, zh) << i;
    EXPECT_EQ(en.find('{'), std::string::npos) << en;
    EXPECT_EQ(zh.find('{'), std::string::npos) << zh;
  }
}

// Memory refusals carry their ids, so that the viewer says them in Chinese too; the sizes are the
// arguments, the need and the room (nine tenths of MemAvailable) last.
TEST(Messages, MemoryRefusalsCarryTheirIds) {
  if (!host_available_bytes()) GTEST_SKIP() << "no MemAvailable here: nothing is refused";
  const Message m = caught([] { check_host_memory(1e18, Msg::HostMemoryCpuRun, {"staged"}); });
  EXPECT_EQ(m.id, Msg::HostMemoryCpuRun);
  // Refused above nine tenths of what is available (the rest keeps the machine usable), not only
  // above all of it; the room named is those nine tenths, below the need.
  const double free = *host_available_bytes();
  const Message near = caught([free] { check_host_memory(0.95 * free, Msg::HostMemoryCpuRun, {"staged"}); });
  EXPECT_EQ(near.id, Msg::HostMemoryCpuRun);
  ASSERT_EQ(near.args.size(), 3u);
  EXPECT_EQ(near.args[1], format_bytes(0.95 * free));
  EXPECT_NE(near.args[2], format_bytes(free)) << near.en;
  EXPECT_NE(near.args[2], near.args[1]) << near.en;
  ASSERT_EQ(m.args.size(), 3u);
  EXPECT_EQ(m.args[1], format_bytes(1e18));
  EXPECT_EQ(m.en.rfind("the problem (staged chain on the CPU): needs about " + format_bytes(1e18) + " of host memory, ", 0),
            0u)
      << m.en;
  EXPECT_NE(m.text(Lang::Zh).find("主机内存"), std::string::npos) << m.text(Lang::Zh);
}

// A container's memory limit is the room an allocation has (MemAvailable is the machine's): the
// limit less the usage of a cgroup, v2 or v1, the usage less its inactive file pages (reclaimed
// under pressure); the tightest of the process's group and every group above it, or of the mount's
// root alone where the group's path is not under the mount (as a container sees it); none where
// no group sets a limit ("max", or v1's near 2^63).
TEST(HostMemory, ACgroupsLimitIsTheRoomUnderIt) {
  const test::TempDir root("attnlab-cgroup");
  const auto put = [&](const std::string& rel, const std::string& text) {
    const std::filesystem::path f = root.path() / rel;
    std::filesystem::create_directories(f.parent_path());
    std::ofstream(f) << text;
  };
  const std::string r = root.path().string();
  EXPECT_FALSE(cgroup_room_bytes("0::/\n", r).has_value());  // nothing written: no limit read
  put("memory.max", "max\n");
  put("memory.current", "1000\n");
  EXPECT_FALSE(cgroup_room_bytes("0::/\n", r).has_value());
  put("box/memory.max", "5000\n");
  put("box/memory.current", "1200\n");
  EXPECT_EQ(cgroup_room_bytes("0::/box\n", r), 3800.0);
  put("box/memory.stat", "anon 700\ninactive_file 500\nactive_file 0\n");
  EXPECT_EQ(cgroup_room_bytes("0::/box\n", r), 4300.0);  // a page cache of 500 the kernel takes back
  EXPECT_EQ(cgroup_room_bytes("0::/elsewhere\n", r), std::nullopt);  // the root's "max"
  put("memory.max", "8000\n");
  EXPECT_EQ(cgroup_room_bytes("0::/elsewhere\n", r), 7000.0);  // a container: its root
  put("box/inner/memory.max", "max\n");
  EXPECT_EQ(cgroup_room_bytes("0::/box/inner\n", r), 4300.0);  // no limit of its own: its parent's
  EXPECT_EQ(cgroup_room_bytes("0::/box/gone\n", r), 7000.0);   // not under the mount: its root alone
  put("memory.current", "7500\n");
  EXPECT_EQ(cgroup_room_bytes("0::/box/inner\n", r), 500.0);  // the tightest room above it
  // v1: the memory controller's own line (alone or with others), under root/memory.
  put("memory/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(cgroup_room_bytes("4:memory:/job\n1:cpu:/\n", r), std::nullopt);
  put("memory/job/memory.limit_in_bytes", "6000\n");
  put("memory/job/memory.usage_in_bytes", "7000\n");
  EXPECT_EQ(cgroup_room_bytes("1:cpu:/\n4:cpuacct,memory:/job\n", r), 0.0);  // over its limit: no room
  put("memory/job/memory.stat", "cache 3000\ntotal_inactive_file 2500\n");
  EXPECT_EQ(cgroup_room_bytes("4:memory:/job\n", r), 1500.0);
  EXPECT_EQ(cgroup_room_bytes("1:cpu:/job\n", r), std::nullopt);  // no memory controller named
}

}  // namespace
}  // namespace attnlab
