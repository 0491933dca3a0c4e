// The file input's position across a restore.
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/json_text.h"
#include "components.h"
#include "config/loader.h"

namespace kayak {
namespace {

std::unique_ptr<Input> MakeFileInput(const std::string& path, ComponentStats* card,
                                     int batch_size = 2, bool transforms_follow = false) {
  const ComponentDef* def = BuiltinComponents().Find("input", "file");
  ErrorList errors;
  YAML::Node value =
      YAML::Load("{path: '" + path + "', batch_size: " + std::to_string(batch_size) + "}");
  YamlOptions opts(def, value, SourceMark{"t", 1, 1}, &errors);
  ComponentContext ctx;
  ctx.clock = SystemClock::Get();
  ctx.stats = card;
  ctx.transforms_follow = transforms_follow;
  auto in = def->make_input(opts, ctx);
  EXPECT_TRUE(errors.empty()) << errors.ToString();
  return in;
}

TEST(FileInput, ResumesAtItsPositionAndReportsItBeforeReading) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kayak-input-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "a.ndjson").string();
  std::ofstream(path) << "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n";
  ComponentStats card("input", "input", "file");
  std::string saved;
  {
    auto in = MakeFileInput(path, &card);
    ASSERT_TRUE(in->Open().ok());
    Batch b;
    bool finished = false;
    ASSERT_TRUE(in->Read(&b, 10, &finished).ok());
    ASSERT_EQ(b.size(), 2u);
    saved = in->SavePosition();
    EXPECT_EQ(nlohmann::json::parse(saved)["offset"], 16);
  }
  auto in = MakeFileInput(path, &card);
  ASSERT_TRUE(in->RestorePosition(saved).ok());
  // Regression: a checkpoint taken after the restore but before the first
  // read must keep the restored position, not go back to the start.
  EXPECT_EQ(nlohmann::json::parse(in->SavePosition()), nlohmann::json::parse(saved));
  ASSERT_TRUE(in->Open().ok());
  Batch b;
  bool finished = false;
  ASSERT_TRUE(in->Read(&b, 10, &finished).ok());
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b.messages[0].payload(), "{\"n\":3}");
  std::filesystem::remove_all(dir);
}

// With transforms after it, the input hands over each object line's members
// as its JSON check found them (what the transforms would otherwise scan for);
// without, and for lines that are not objects, nothing.
TEST(FileInput, HandsOverTheMembersItsCheckFoundWhenTransformsFollow) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kayak-input-fields-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "a.ndjson").string();
  const std::vector<std::string> lines = {
      R"({"a":1,"b":[1,{"c":"}"}],"d" : "x\"y" })", R"(  {"k\u0065y":{"n":[[]]},"z":null})",
      R"([1,2])", R"({})", R"({"big":123456789012345678901234567890})"};
  {
    std::ofstream f(path);
    for (const auto& l : lines) f << l << "\r\n";
  }
  for (const bool follow : {true, false}) {
    ComponentStats card("input", "input", "file");
    auto in = MakeFileInput(path, &card, 100, follow);
    ASSERT_TRUE(in->Open().ok());
    Batch b;
    bool finished = false;
    ASSERT_TRUE(in->Read(&b, 10, &finished).ok());
    ASSERT_EQ(b.size(), lines.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      const Message& m = b.messages[i];
      ASSERT_EQ(m.payload(), lines[i]);
      size_t root = 0;
      const FieldSpan* spans = nullptr;
      size_t n = 0;
      // Lines 0, 1 and 3 are objects simdjson checks; line 2 is an array and
      // line 4 has an integer only nlohmann takes.
      const bool want = follow && (i == 0 || i == 1 || i == 3);
      ASSERT_EQ(b.FieldsOf(m, &root, &spans, &n), want) << lines[i];
      if (!want) continue;
      std::vector<jtext::Member> scan;
      jtext::Members(m.payload(), jtext::SkipWs(m.payload(), 0), &scan);
      EXPECT_EQ(root, jtext::SkipWs(m.payload(), 0));
      ASSERT_EQ(n, scan.size()) << lines[i];
      for (size_t k = 0; k < n; ++k) {
        EXPECT_EQ(spans[k].key_begin, scan[k].key.begin) << lines[i];
        EXPECT_EQ(spans[k].key_end, scan[k].key.end) << lines[i];
        EXPECT_EQ(spans[k].value_begin, scan[k].value.begin) << lines[i];
        EXPECT_EQ(spans[k].value_end, scan[k].value.end) << lines[i];
      }
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kayak
