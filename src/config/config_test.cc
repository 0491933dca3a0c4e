// Config errors: every mistake reported at once, each at its line and column.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "components.h"
#include "config/loader.h"
#include "config/server_config.h"
#include "config/yaml_load.h"
#include "common/host_port.h"
#include "common/redact.h"
#include "common/utf8.h"
#include "engine/engine.h"

namespace kayak {
namespace {

// "line:column" of the first `token` on 1-based `line` of `text`.
std::string Pos(const std::string& text, int line, const std::string& token) {
  std::istringstream in(text);
  std::string l;
  for (int i = 1; i <= line; ++i) std::getline(in, l);
  const size_t col = l.find(token);
  EXPECT_NE(col, std::string::npos) << "token '" << token << "' not on line " << line;
  return std::to_string(line) + ":" + std::to_string(col + 1);
}

std::string CheckText(const std::string& text, size_t* count = nullptr) {
  GraphSpec spec;
  ErrorList errors;
  LoadGraphText(text, "p.yaml", BuiltinComponents(), &spec, &errors);
  ValidateComponents(spec, &errors);
  if (count != nullptr) *count = errors.size();
  return errors.ToString();
}

void ExpectError(const std::string& out, const std::string& pos, const std::string& fragment) {
  const std::string needle = "p.yaml:" + pos + ": ";
  const size_t at = out.find(needle);
  ASSERT_NE(at, std::string::npos) << "no error at " << pos << " in:\n" << out;
  const std::string line = out.substr(at, out.find('\n', at) - at);
  EXPECT_NE(line.find(fragment), std::string::npos) << line;
}

TEST(Config, ManyMistakesReportedAtOnceWithLineAndColumn) {
  const std::string text =
      "buckets:\n"                                                         // 1
      "  totals: {idle_timeout_secs: -5}\n"                                // 2
      "pipelines:\n"                                                       // 3
      "  Bad_Id:\n"                                                        // 4
      "    input:\n"                                                       // 5
      "      file: {path: a.ndjson, bogus: 1}\n"                           // 6
      "    transforms:\n"                                                  // 7
      "      - filtr: 'x > 1'\n"                                           // 8
      "      - filter: 'x >'\n"                                            // 9
      "      - rolling_window: {field: v, window_secs: ten}\n"             // 10
      "  a:\n"                                                             // 11
      "    input:\n"                                                       // 12
      "      pipeline: [b]\n"                                              // 13
      "  b:\n"                                                             // 14
      "    input:\n"                                                       // 15
      "      pipeline: a\n"                                                // 16
      "    transforms:\n"                                                  // 17
      "      - bucket: {name: nosuch, key: k, op: add, field: v}\n"        // 18
      "      - map: {x: 'len(1, 2)'}\n"                                    // 19
      "    outputs:\n"                                                     // 20
      "      - file: {}\n"                                                 // 21
      "      - stdout: {retry: {base_ms: 0}}\n";                           // 22
  size_t count = 0;
  const std::string out = CheckText(text, &count);
  ExpectError(out, Pos(text, 2, "-5"), "idle_timeout_secs must be");
  ExpectError(out, Pos(text, 4, "Bad_Id"), "bad pipeline id 'Bad_Id'");
  ExpectError(out, Pos(text, 6, "bogus"), "unknown option 'bogus' for file input");
  ExpectError(out, Pos(text, 8, "filtr"), "unknown transform type 'filtr'");
  // the column of the end of the expression inside the quotes
  ExpectError(out, "9:" + std::to_string(text.find("'x >'") - text.find("      - filter") + 1 + 4),
              "expression error: unexpected end");
  ExpectError(out, Pos(text, 10, "ten"), "option 'window_secs' of rolling_window transform must be a number");
  ExpectError(out, Pos(text, 16, "pipeline"), "cycle between pipelines");
  ExpectError(out, Pos(text, 18, "nosuch"), "unknown bucket 'nosuch'");
  ExpectError(out, Pos(text, 19, "len") , "takes 1 argument");
  ExpectError(out, Pos(text, 21, "file"), "missing required option 'path'");
  ExpectError(out, Pos(text, 22, "0}"), "retry.base_ms must be");
  EXPECT_EQ(count, 11u) << out;
}

// The property table carries the rules: ranges, choices and non-empty
// values are checked at load, at the option's value, with the same words the
// docs show; no component checks them by hand.
TEST(HostPort, TheHostOfAnAuthorityAndWhetherItIsLoopback) {
  EXPECT_EQ(HostOfAuthority("127.0.0.1:7070"), "127.0.0.1");
  EXPECT_EQ(HostOfAuthority("[::1]:7070"), "::1");
  EXPECT_EQ(HostOfAuthority("[::1]"), "::1");
  EXPECT_EQ(HostOfAuthority("::1"), "::1");
  EXPECT_EQ(HostOfAuthority("Kayak.Internal"), "Kayak.Internal");
  EXPECT_TRUE(IsLoopbackHost("127.9.9.9"));
  EXPECT_TRUE(IsLoopbackHost("LocalHost"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_FALSE(IsLoopbackHost("127.evil.example"));  // not an address
  EXPECT_FALSE(IsLoopbackHost("localhost.evil.example"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
}

TEST(Utf8, FindsTheFirstByteThatIsNotUtf8) {
  EXPECT_EQ(FirstInvalidUtf8("plain caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), 20u);
  EXPECT_EQ(FirstInvalidUtf8("ab\xff"), 2u);
  EXPECT_EQ(FirstInvalidUtf8("\xc0\x80"), 0u);          // overlong NUL
  EXPECT_EQ(FirstInvalidUtf8("x\xed\xa0\x80"), 1u);    // a surrogate
  EXPECT_EQ(FirstInvalidUtf8("\xf4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("\xe2\x82"), 0u);          // cut short
}

// What came from outside is bounded before anything walks it: bytes that are
// not UTF-8, nesting, aliases expanding, repeated keys; with line numbers.
TEST(Config, YamlIsReadWithinBounds) {
  ExpectError(CheckText("pipelines:\n  p:\n    # caf\xe9\n"), "3:10", "not UTF-8");
  std::string deep = "x: ";
  for (int i = 0; i < kMaxYamlDepth; ++i) deep += "[";
  for (int i = 0; i < kMaxYamlDepth; ++i) deep += "]";
  EXPECT_NE(CheckText(deep + "\n").find("nested more than 128"), std::string::npos);
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) bomb += (k ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
  EXPECT_NE(CheckText(bomb).find("expands to more than"), std::string::npos);
  // A few aliases (defaults shared by pipelines) are fine.
  YAML::Node root;
  ErrorList errors;
  EXPECT_TRUE(LoadYamlBounded("d: &d {a: 1}\nx: *d\ny: *d\n", "f", &root, &errors))
      << errors.ToString();
  ServerConfig sc;
  ErrorList se;
  EXPECT_FALSE(LoadServerConfigText("listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n", "s.yaml", &sc, &se));
  EXPECT_NE(se.ToString().find("duplicate key 'listen'"), std::string::npos) << se.ToString();
}

TEST(Config, PropertyTableRules) {
  const std::string text =
      "pipelines:\n"                                                       // 1
      "  p:\n"                                                             // 2
      "    input: {file: {path: '', batch_size: 0}}\n"                     // 3
      "    transforms:\n"                                                  // 4
      "      - buffer: {max_secs: 0}\n"                                    // 5
      "    outputs:\n"                                                     // 6
      "      - http: {url: 'http://127.0.0.1:1/x', format: xml, timeout_ms: 600001}\n"  // 7
      "  q:\n"                                                             // 8
      "    input: {kafka: {brokers: [b], topics: [], group: g, start: middle}}\n";     // 9
  size_t count = 0;
  const std::string out = CheckText(text, &count);
  ExpectError(out, Pos(text, 3, "''"), "option 'path' of file input must not be empty");
  ExpectError(out, Pos(text, 3, "0}"), "option 'batch_size' of file input must be between 1 and 100000");
  ExpectError(out, Pos(text, 5, "0}"), "option 'max_secs' of buffer transform must be > 0");
  ExpectError(out, Pos(text, 7, "xml"), "must be one of: array, ndjson, not 'xml'");
  ExpectError(out, Pos(text, 7, "600001"), "must be between 1 and 600000");
  ExpectError(out, Pos(text, 9, "[]"), "option 'topics' of kafka input must not be empty");
  ExpectError(out, Pos(text, 9, "middle"), "must be one of: earliest, latest");
  EXPECT_EQ(count, 7u) << out;
}

// What a component's options name comes from its table (PropRef): the
// loader and the engine know no component by its type.
TEST(Config, BucketsAndPathsComeFromTheTable) {
  GraphSpec spec;
  ErrorList errors;
  ASSERT_TRUE(LoadGraphText(
      "buckets: {b: {}}\n"
      "pipelines:\n"
      "  p:\n"
      "    input: {http: {path: /in}}\n"
      "    transforms:\n"
      "      - bucket: {name: b, key: k, op: count}\n"
      "      - bucket: {name: b, key: k, op: lookup, as: v}\n"
      "      - lookup: {bucket: b, key: k, as: w}\n",
      "p.yaml", BuiltinComponents(), &spec, &errors)) << errors.ToString();
  const PipelineSpec& p = spec.pipelines[0];
  EXPECT_EQ(p.input.served_path, "/in");
  ASSERT_EQ(p.transforms.size(), 3u);
  ASSERT_EQ(p.transforms[0].buckets.size(), 1u);
  EXPECT_TRUE(p.transforms[0].buckets[0].writes);
  EXPECT_FALSE(p.transforms[1].buckets[0].writes);  // op: lookup only reads
  EXPECT_FALSE(p.transforms[2].buckets[0].writes);
  EXPECT_EQ(p.transforms[2].buckets[0].bucket, "b");
}

TEST(Config, StructureErrors) {
  ExpectError(CheckText("pipelines: []\n"), "1:12", "'pipelines' must be a map");
  ExpectError(CheckText("pipes: {}\n"), "1:1", "unknown top-level key 'pipes'");
  ExpectError(CheckText("pipelines:\n  p:\n    input: {file: {path: x}, dummy: {}}\n"), "3:12",
              "one-key map");
  ExpectError(CheckText("pipelines:\n  p:\n    transforms: []\n"), "2:3", "missing its input");
  ExpectError(CheckText("pipelines:\n  p:\n    input: {pipeline: q}\n"), "3:13",
              "unknown pipeline 'q'");
  ExpectError(CheckText("pipelines:\n  p:\n    input: {dummy: {}}\n    outputs: {file: {}}\n"),
              "4:14", "'outputs' must be a list");
  ExpectError(CheckText("pipelines:\n  p:\n    input: {dummy: {}}\n    extra: 1\n"), "4:5",
              "unknown key 'extra'");
  ExpectError(CheckText("pipelines:\n  p: [\n"), "3:1", "YAML syntax error");
  ExpectError(CheckText("pipelines:\n  p:\n    input: {dummy: {count: many}}\n"), "3:28",
              "must be a whole number");
  ExpectError(CheckText("pipelines:\n  p:\n    input: {dummy: {}}\n    transforms: [{filter: {a: 1}}]\n"),
              "4:27", "takes an expression string");
  ExpectError(CheckText("pipelines:\n  p:\n    input: {dummy: {}}\n  p:\n    input: {dummy: {}}\n"),
              "4:3", "duplicate key 'p'");
  ExpectError(CheckText("pipelines:\n  p:\n    input: {http: {path: /in}}\n"
                        "  q:\n    input: {http: {path: /in}}\n"),
              "5:26", "pipeline 'p' already serves /in");
}

// A cycle is reported together with the other graph errors (an unknown
// upstream used to hide it).
TEST(Config, ACycleIsReportedBesideAnUnknownUpstream) {
  const std::string text =
      "pipelines:\n"                   // 1
      "  a:\n"                         // 2
      "    input: {pipeline: b}\n"     // 3
      "  b:\n"                         // 4
      "    input: {pipeline: a}\n"     // 5
      "  c:\n"                         // 6
      "    input: {pipeline: nope}\n"; // 7
  size_t count = 0;
  const std::string out = CheckText(text, &count);
  ExpectError(out, Pos(text, 7, "pipeline"), "unknown pipeline 'nope'");
  EXPECT_NE(out.find("cycle between pipelines"), std::string::npos) << out;
  EXPECT_EQ(count, 2u) << out;
}

TEST(Config, EnvironmentInterpolation) {
  ::setenv("KAYAK_TEST_DIR", "/tmp/in", 1);
  ::unsetenv("KAYAK_TEST_UNSET");
  GraphSpec spec;
  ErrorList errors;
  ASSERT_TRUE(LoadGraphText("pipelines:\n  p:\n    input: {file: {path: '${KAYAK_TEST_DIR}/x.ndjson'}}\n",
                            "p.yaml", BuiltinComponents(), &spec, &errors))
      << errors.ToString();
  EXPECT_EQ(spec.pipelines[0].input.value["path"].Scalar(), "/tmp/in/x.ndjson");
  ExpectError(CheckText("pipelines:\n  p:\n    input: {file: {path: '${KAYAK_TEST_UNSET}'}}\n"),
              "3:26", "environment variable 'KAYAK_TEST_UNSET' is not set");
}

TEST(Config, SecretFileInterpolation) {
  const std::string dir = ::testing::TempDir() + "kayak_secret_file_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir + "/pg") << "s3cret-from-file\n";
    std::ofstream(dir + "/big") << std::string((1 << 20) + 1, 'x');
  }
  GraphSpec spec;
  ErrorList errors;
  const std::string text = "pipelines:\n  p:\n    input: {file: {path: '/in/${file:" + dir +
                           "/pg}.ndjson'}}\n";
  ASSERT_TRUE(LoadGraphText(text, "p.yaml", BuiltinComponents(), &spec, &errors))
      << errors.ToString();
  // One trailing newline cut, and the value kept out of every error text.
  EXPECT_EQ(spec.pipelines[0].input.value["path"].Scalar(), "/in/s3cret-from-file.ndjson");
  EXPECT_EQ(Redact("login failed for s3cret-from-file"), "login failed for ***");

  const std::string missing = CheckText("pipelines:\n  p:\n    input: {file: {path: '${file:" +
                                        dir + "/nope}'}}\n");
  ExpectError(missing, "3:26", "secret file '" + dir + "/nope' cannot be read: No such file");
  ExpectError(CheckText("pipelines:\n  p:\n    input: {file: {path: '${file:relative/pg}'}}\n"),
              "3:26", "secret file 'relative/pg' is not an absolute path");
  const std::string big = CheckText("pipelines:\n  p:\n    input: {file: {path: '${file:" + dir +
                                    "/big}'}}\n");
  ExpectError(big, "3:26", "is larger than 1 MiB");
  EXPECT_EQ(big.find("xxxx"), std::string::npos) << big;
  std::filesystem::remove_all(dir);
}

TEST(Config, ValidGraphIsOrderedUpstreamFirst) {
  GraphSpec spec;
  ErrorList errors;
  ASSERT_TRUE(LoadGraphText(
      "pipelines:\n"
      "  c: {input: {pipeline: [a, b]}}\n"
      "  a: {input: {dummy: {}}}\n"
      "  b: {input: {pipeline: a}}\n",
      "p.yaml", BuiltinComponents(), &spec, &errors))
      << errors.ToString();
  ASSERT_EQ(spec.pipelines.size(), 3u);
  EXPECT_EQ(spec.pipelines[0].id, "a");
  EXPECT_EQ(spec.pipelines[1].id, "b");
  EXPECT_EQ(spec.pipelines[2].id, "c");
  EXPECT_EQ(spec.pipelines[2].upstreams, (std::vector<std::string>{"a", "b"}));
}

std::map<std::string, const PipelineSpec*> PipelinesById(const GraphSpec& spec) {
  std::map<std::string, const PipelineSpec*> by_id;
  for (const auto& p : spec.pipelines) by_id[p.id] = &p;
  return by_id;
}

TEST(Config, ARepartitionStepCutsItsPipelineIntoParts) {
  GraphSpec spec;
  ErrorList errors;
  ASSERT_TRUE(LoadGraphText(
      "buckets: {per_dev: {}}\n"
      "pipelines:\n"
      "  p:\n"
      "    input: {kafka: {brokers: 'b:9092', topics: [in], group: g, sasl: {mechanism: PLAIN, "
      "username: u, password: pw}}}\n"
      "    transforms:\n"
      "      - filter: 'seq > 0'\n"
      "      - repartition: {key: dev, topic: by-dev}\n"
      "      - bucket: {name: per_dev, key: dev, op: count}\n"
      "      - repartition: {key: site, topic: by-site, brokers: [c:9092], exactly_once: false}\n"
      "      - map: {site: site}\n"
      "    outputs: [{stdout: {}}]\n"
      "    dead_letter: {file: {path: /tmp/dead.ndjson}}\n"
      "  q: {input: {pipeline: p}, outputs: [{stdout: {}}]}\n",
      "p.yaml", BuiltinComponents(), &spec, &errors))
      << errors.ToString();
  ASSERT_EQ(spec.pipelines.size(), 4u);
  auto by_id = PipelinesById(spec);
  ASSERT_TRUE(by_id.count("p") && by_id.count("p-part2") && by_id.count("p-part3"));
  // The first part: the filter, then the topic, keyed by the step's key, in
  // transactions; the brokers and the login are the input's.
  const PipelineSpec& a = *by_id["p"];
  ASSERT_EQ(a.transforms.size(), 1u);
  EXPECT_EQ(a.transforms[0].def->type, "filter");
  ASSERT_EQ(a.outputs.size(), 1u);
  EXPECT_EQ(a.dead_letter, -1);
  const auto out = IdentityOptions(a.outputs[0]);
  EXPECT_EQ(a.outputs[0].def->type, "kafka");
  EXPECT_EQ(out.at("topic"), "\"by-dev\"");
  EXPECT_EQ(out.at("key"), "\"dev\"");
  EXPECT_EQ(out.at("exactly_once"), "\"true\"");
  EXPECT_EQ(a.outputs[0].value["brokers"].Scalar(), "b:9092");
  EXPECT_EQ(a.outputs[0].value["sasl"]["password"].Scalar(), "pw");
  // The second: reads the topic in a group of its own, counts per device,
  // and writes the next topic on the brokers that step names.
  const PipelineSpec& b = *by_id["p-part2"];
  EXPECT_EQ(b.input.def->type, "kafka");
  EXPECT_EQ(b.input.value["topics"].Scalar(), "by-dev");
  EXPECT_EQ(b.input.value["group"].Scalar(), "kayak-p-by-dev");
  EXPECT_EQ(b.input.value["sasl"]["username"].Scalar(), "u");
  ASSERT_EQ(b.transforms.size(), 1u);
  EXPECT_EQ(b.transforms[0].def->type, "bucket");
  ASSERT_EQ(b.outputs.size(), 1u);
  EXPECT_EQ(b.outputs[0].value["brokers"][0].Scalar(), "c:9092");
  EXPECT_EQ(b.outputs[0].value["exactly_once"].Scalar(), "false");
  EXPECT_FALSE(b.outputs[0].value["sasl"].IsDefined());
  // The last has the rest, the outputs and the dead letters; a pipeline that
  // read `p` reads it.
  const PipelineSpec& c = *by_id["p-part3"];
  EXPECT_EQ(c.input.value["brokers"][0].Scalar(), "c:9092");
  ASSERT_EQ(c.transforms.size(), 1u);
  EXPECT_EQ(c.transforms[0].def->type, "map");
  ASSERT_EQ(c.outputs.size(), 2u);
  EXPECT_EQ(c.dead_letter, 1);
  EXPECT_EQ(by_id["q"]->upstreams, (std::vector<std::string>{"p-part3"}));
  EXPECT_EQ(spec.pipelines.back().id, "q");
}

TEST(Config, ARepartitionStepThatCannotBeCutIsRefusedAtItsPlace) {
  const std::string text =
      "pipelines:\n"
      "  p:\n"
      "    input: {dummy: {}}\n"
      "    transforms: [{repartition: {key: dev, topic: t}}]\n"
      "  r:\n"
      "    input: {kafka: {brokers: 'b:9092', topics: [in], group: g}}\n"
      "    transforms: [{repartition: {key: dev, topic: t2}}]\n"
      "  r-part2: {input: {dummy: {}}}\n"
      "  s:\n"
      "    input: {kafka: {brokers: 'b:9092', topics: [in], group: g}}\n"
      "    transforms: [{repartition: {key: dev}}]\n";
  const std::string out = CheckText(text);
  ExpectError(out, Pos(text, 4, "repartition"), "give `brokers`");
  ExpectError(out, Pos(text, 7, "repartition"), "declares too");
  EXPECT_NE(out.find("topic"), std::string::npos) << out;
  EXPECT_NE(out.find(":11:"), std::string::npos) << out;
}

TEST(Config, AnHttpInputWritingAheadToKafkaIsAPartOfItsOwn) {
  GraphSpec spec;
  ErrorList errors;
  ASSERT_TRUE(LoadGraphText(
      "buckets: {per_dev: {}}\n"
      "pipelines:\n"
      "  p:\n"
      "    input: {http: {path: /in, topic: posts, brokers: ['b:9092'], key: dev,\n"
      "                   kafka_properties: {security.protocol: plaintext}}}\n"
      "    transforms:\n"
      "      - bucket: {name: per_dev, key: dev, op: count}\n"
      "      - repartition: {key: site, topic: by-site}\n"
      "      - map: {site: site}\n"
      "    outputs: [{stdout: {}}]\n"
      "  q: {input: {pipeline: p}, outputs: [{stdout: {}}]}\n"
      "  r: {input: {http: {path: /r}}, transforms: [{map: {a: 1}}]}\n",
      "p.yaml", BuiltinComponents(), &spec, &errors))
      << errors.ToString();
  auto by_id = PipelinesById(spec);
  ASSERT_EQ(spec.pipelines.size(), 5u);
  ASSERT_TRUE(by_id.count("p") && by_id.count("p-part2") && by_id.count("p-part3"));
  // The input alone: it writes the topic itself, before each 202.
  const PipelineSpec& a = *by_id["p"];
  EXPECT_EQ(a.input.def->type, "http");
  EXPECT_TRUE(a.transforms.empty());
  EXPECT_TRUE(a.outputs.empty());
  // The steps read the topic on the input's brokers, with its properties.
  const PipelineSpec& b = *by_id["p-part2"];
  EXPECT_EQ(b.input.def->type, "kafka");
  EXPECT_EQ(b.input.value["topics"].Scalar(), "posts");
  EXPECT_EQ(b.input.value["brokers"][0].Scalar(), "b:9092");
  EXPECT_EQ(b.input.value["group"].Scalar(), "kayak-p-posts");
  EXPECT_EQ(b.input.value["properties"]["security.protocol"].Scalar(), "plaintext");
  ASSERT_EQ(b.transforms.size(), 1u);
  EXPECT_EQ(b.transforms[0].def->type, "bucket");
  // A repartition step after it cuts the next part, from the same brokers.
  const PipelineSpec& c = *by_id["p-part3"];
  EXPECT_EQ(c.input.value["topics"].Scalar(), "by-site");
  EXPECT_EQ(c.input.value["brokers"][0].Scalar(), "b:9092");
  ASSERT_EQ(c.outputs.size(), 1u);
  EXPECT_EQ(by_id["q"]->upstreams, (std::vector<std::string>{"p-part3"}));
  // Without `topic`, nothing is cut.
  EXPECT_EQ(by_id["r"]->transforms.size(), 1u);
}

TEST(Config, AnHttpInputsKafkaOptionsGoWithTopic) {
  const std::string text =
      "pipelines:\n"
      "  p:\n"
      "    input: {http: {path: /a, topic: posts}}\n"
      "  q:\n"
      "    input: {http: {path: /b, key: dev}}\n"
      "  r:\n"
      "    input: {http: {path: /c, topic: posts, brokers: [b], kafka_properties: {no.such: 1}}}\n"
      "  r-part2: {input: {dummy: {}}}\n";
  const std::string out = CheckText(text);
  EXPECT_NE(out.find("give `brokers` with `topic`"), std::string::npos) << out;
  EXPECT_NE(out.find("only with `topic`"), std::string::npos) << out;
  EXPECT_NE(out.find("no.such"), std::string::npos) << out;
  ExpectError(out, Pos(text, 7, "http"), "declares too");
}

TEST(Config, ServerConfigCluster) {
  ServerConfig c;
  ErrorList errors;
  ASSERT_TRUE(LoadServerConfigText(
      "cluster: {name: orders, member: kayak-1, store: /mnt/shards, partitioner: murmur2}\n",
      "s.yaml", &c, &errors))
      << errors.ToString();
  EXPECT_EQ(c.cluster_name, "orders");
  EXPECT_EQ(c.cluster_member, "kayak-1");
  EXPECT_EQ(c.cluster_store, "/mnt/shards");
  EXPECT_EQ(c.cluster_partitioner, "murmur2");
  ServerConfig d;
  ErrorList e2;
  EXPECT_FALSE(LoadServerConfigText(
      "cluster: {name: ../up, member: a, partitioner: fnv, seeds: x}\n", "s.yaml", &d, &e2));
  const std::string text = e2.ToString();
  EXPECT_EQ(e2.size(), 4u) << text;
  EXPECT_NE(text.find("unknown key 'seeds' in cluster"), std::string::npos) << text;
  EXPECT_NE(text.find("cluster.store is required"), std::string::npos) << text;
  EXPECT_NE(text.find("cluster.name may hold only"), std::string::npos) << text;
  EXPECT_NE(text.find("cluster.partitioner must be murmur2"), std::string::npos) << text;
}

TEST(Config, ServerConfigClusterInS3) {
  ::setenv("KAYAK_TEST_CLUSTER_SECRET", "s3cr3t", 1);
  ServerConfig c;
  ErrorList errors;
  ASSERT_TRUE(LoadServerConfigText(
      "cluster: {name: orders, member: kayak-1, store: s3://shards/prod, partitioner: crc32,\n"
      "          s3: {endpoint: 'http://127.0.0.1:9000', path_style: true, access_key_id: k,\n"
      "               secret_access_key: '${KAYAK_TEST_CLUSTER_SECRET}'}}\n",
      "s.yaml", &c, &errors))
      << errors.ToString();
  EXPECT_EQ(c.cluster_store, "s3://shards/prod");
  EXPECT_EQ(c.cluster_s3, (std::map<std::string, std::string>{
                              {"endpoint", "http://127.0.0.1:9000"},
                              {"path_style", "true"},
                              {"access_key_id", "k"},
                              {"secret_access_key", "s3cr3t"}}));
  // Keys for S3 without a store there; a store in S3 without its keys; a
  // kind of store there is none of.
  struct Case {
    const char* text;
    const char* want;
  };
  const Case cases[] = {
      {"cluster: {name: o, member: a, store: /mnt/s, partitioner: crc32, s3: {region: x}}\n",
       "cluster.s3 is for a store in S3"},
      {"cluster: {name: o, member: a, store: s3://b, partitioner: crc32}\n",
       "cluster.s3.access_key_id is required"},
      {"cluster: {name: o, member: a, store: s3://b, partitioner: crc32, "
       "s3: {access_key_id: k, secret_access_key: s, bucket: b}}\n",
       "unknown key 'bucket' in cluster.s3"},
      {"cluster: {name: o, member: a, store: s3://b, partitioner: crc32, "
       "s3: {access_key_id: k, secret_access_key: '${KAYAK_TEST_UNSET_VAR}'}}\n",
       "KAYAK_TEST_UNSET_VAR"},
      {"cluster: {name: o, member: a, store: 'gs://b', partitioner: crc32}\n",
       "cluster.store is a directory or s3://bucket/prefix"},
  };
  for (const Case& k : cases) {
    ServerConfig d;
    ErrorList e;
    EXPECT_FALSE(LoadServerConfigText(k.text, "s.yaml", &d, &e)) << k.text;
    EXPECT_NE(e.ToString().find(k.want), std::string::npos) << k.text << ": " << e.ToString();
  }
}

TEST(Config, ServerConfig) {
  ServerConfig c;
  ErrorList errors;
  ASSERT_TRUE(LoadServerConfigText(
      "listen: 127.0.0.1:0\nlog_level: warn\ncheckpoint: {interval_secs: 2}\n"
      "limits: {max_body_bytes: 100}\n",
      "s.yaml", &c, &errors));
  EXPECT_EQ(c.listen_port, 0);
  EXPECT_EQ(c.log_level, "warn");
  EXPECT_EQ(c.checkpoint_interval_secs, 2);
  EXPECT_EQ(c.checkpoint_timeout_secs, 60);
  EXPECT_EQ(c.max_body_bytes, 100);
  ServerConfig d;
  ErrorList e2;
  EXPECT_FALSE(LoadServerConfigText(
      "listen: nowhere\nlog_level: loud\ncheckpoint: {interval_secs: 0, every: 1}\nextra: 1\n",
      "s.yaml", &d, &e2));
  EXPECT_EQ(e2.size(), 5u) << e2.ToString();
  EXPECT_NE(e2.ToString().find("s.yaml:1:9: listen must be host:port"), std::string::npos);
  EXPECT_NE(e2.ToString().find("s.yaml:4:1: unknown key 'extra'"), std::string::npos);
  ServerConfig l;
  ErrorList e3;
  ASSERT_TRUE(LoadServerConfigText(
      "limits: {max_header_bytes: 4096, read_timeout_secs: 5, idle_timeout_secs: 9, "
      "max_connections: 3}\n",
      "s.yaml", &l, &e3))
      << e3.ToString();
  EXPECT_EQ(l.max_header_bytes, 4096);
  EXPECT_EQ(l.read_timeout_secs, 5);
  EXPECT_EQ(l.idle_timeout_secs, 9);
  EXPECT_EQ(l.max_connections, 3);
  ErrorList e4;
  EXPECT_FALSE(LoadServerConfigText(
      "limits: {max_header_bytes: 10, read_timeout_secs: 99999999999999999999, "
      "idle_timeout_secs: 0, max_connections: many}\n",
      "s.yaml", &l, &e4));
  EXPECT_EQ(e4.size(), 4u) << e4.ToString();
  ServerConfig m;
  ErrorList e5;
  ASSERT_TRUE(LoadServerConfigText("memory_limit_bytes: 268435456\n", "s.yaml", &m, &e5))
      << e5.ToString();
  EXPECT_EQ(m.memory_limit_bytes, 268435456);
  EXPECT_EQ(ServerConfig().memory_limit_bytes, 0);  // no limit unless asked
  for (const char* bad : {"memory_limit_bytes: 1000\n", "memory_limit_bytes: 1GB\n",
                          "memory_limit_bytes: -1\n"}) {
    ErrorList e6;
    EXPECT_FALSE(LoadServerConfigText(bad, "s.yaml", &m, &e6)) << bad;
    EXPECT_NE(e6.ToString().find("memory_limit_bytes must be a whole number of bytes >= 1048576"),
              std::string::npos)
        << e6.ToString();
  }
}

}  // namespace
}  // namespace kayak

namespace kayak {
namespace {

std::string InputFingerprint(const std::string& input) {
  GraphSpec spec;
  ErrorList errors;
  EXPECT_TRUE(LoadGraphText("pipelines:\n  p:\n    input: " + input +
                                "\n    outputs: [{stdout: {}}]\n",
                            "p.yaml", BuiltinComponents(), &spec, &errors))
      << errors.ToString();
  return spec.pipelines.empty() ? "" : spec.pipelines[0].input.fingerprint;
}

// An option is identity only when restoring the old state under its new value
// would be wrong: credentials, the way to the same system, timeouts and sizes
// are tuning (docs/connectors.md).
TEST(Config, ACredentialOrTheWayToTheSameSystemIsNotIdentity) {
  const std::string q = "query: 'SELECT 1 AS a', watermark: a";
  const std::string pg = InputFingerprint("{postgres: {url: 'postgresql://kit:one@127.0.0.1:5432/kit', " + q + "}}");
  EXPECT_EQ(pg, InputFingerprint("{postgres: {url: 'postgresql://kat:two@db:6432/kit?sslmode=require', " + q +
                                 ", start_from: '5', lag_secs: 2}}"));
  EXPECT_NE(pg, InputFingerprint("{postgres: {url: 'postgresql://kit:one@127.0.0.1:5432/other', " + q + "}}"));
  EXPECT_NE(pg, InputFingerprint("{postgres: {url: 'postgresql://kit:one@127.0.0.1:5432/kit', query: "
                                 "'SELECT 2 AS a', watermark: a}}"));
  EXPECT_EQ(pg.find("one"), std::string::npos) << pg;
  const std::string ch = "{clickhouse: {url: 'http://127.0.0.1:8123', " + q;
  EXPECT_EQ(InputFingerprint(ch + ", user: a, password: x}}"),
            InputFingerprint(ch + ", user: b, password: y}}"));
  EXPECT_EQ(InputFingerprint("{kafka: {brokers: 'a:9092', topics: t, group: g}}"),
            InputFingerprint("{kafka: {brokers: 'b:9092', topics: t, group: g, properties: "
                             "{sasl.password: z}}}"));
  EXPECT_NE(InputFingerprint("{kafka: {brokers: 'a:9092', topics: t, group: g}}"),
            InputFingerprint("{kafka: {brokers: 'a:9092', topics: t, group: h}}"));
}

TEST(Config, TheValueOfASecretOptionIsRedactedOnceLoaded) {
  InputFingerprint("{nats: {url: 'nats://kit:canary-nats-pw@127.0.0.1:4222', subject: s}}");
  EXPECT_EQ(Redact("auth canary-nats-pw failed"), "auth *** failed");
}

}  // namespace
}  // namespace kayak
