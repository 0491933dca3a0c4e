// docs/components.md is generated from the property tables; keep it current.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "components.h"
#include "config/loader.h"

#ifndef KAYAK_SOURCE_DIR
#error "KAYAK_SOURCE_DIR must be defined"
#endif

namespace kayak {
namespace {

TEST(Docs, ComponentReferenceIsCurrent) {
  const std::string path = std::string(KAYAK_SOURCE_DIR) + "/docs/components.md";
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string want = ComponentReferenceMarkdown();
  if (ss.str() != want) {
    const std::string fresh = "components.md.new";
    std::ofstream(fresh) << want;
    FAIL() << path << " is out of date; the generated text is in " << fresh
           << " (in the test's working directory): copy it over the doc.";
  }
}

}  // namespace
}  // namespace kayak

namespace kayak {
namespace {

TEST(Docs, EveryComponentSaysWhatItDoesAndKeeps) {
  for (const auto* d : BuiltinComponents().All()) {
    EXPECT_FALSE(d->help.empty()) << d->type;
    EXPECT_FALSE(d->checkpoint.empty()) << d->type;
    EXPECT_FALSE(d->bad_input.empty()) << d->type;
    for (const auto& p : d->props) EXPECT_FALSE(p.help.empty()) << d->type << "." << p.name;
  }
}

// Credentials rotate (an STS token expires, a password is changed after a
// leak): a restart with a new one must keep the state. So a secret option is
// tuning, or an address whose credentials the fingerprint leaves out.
TEST(Identity, ASecretOptionIsTuningOrAnAddress) {
  for (const auto* d : BuiltinComponents().All()) {
    for (const auto& p : d->props) {
      if (!p.secret) continue;
      EXPECT_TRUE(p.role == PropRole::kTuning || p.address)
          << d->kind << " " << d->type << "." << p.name
          << " is a secret identity option: a rotated credential would start it empty";
      if (p.address) {
        EXPECT_EQ(p.type, PropType::kString) << d->type << "." << p.name;
      }
    }
  }
}

}  // namespace
}  // namespace kayak
