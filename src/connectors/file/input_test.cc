// The file input's position across a restore.
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "components.h"
#include "config/loader.h"

namespace kayak {
namespace {

std::unique_ptr<Input> MakeFileInput(const std::string& path, ComponentStats* card) {
  const ComponentDef* def = BuiltinComponents().Find("input", "file");
  ErrorList errors;
  YAML::Node value = YAML::Load("{path: '" + path + "', batch_size: 2}");
  YamlOptions opts(def, value, SourceMark{"t", 1, 1}, &errors);
  ComponentContext ctx;
  ctx.clock = SystemClock::Get();
  ctx.stats = card;
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

}  // namespace
}  // namespace kayak
