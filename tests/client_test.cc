// The baton CLI's model commands, run in-process through RunTool exactly as a user types them.
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/model/flux2_model.h"
#include "core/model/flux2_weights.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/common.h"
#include "core/util/files.h"
#include "tools/tool_commands.h"

namespace baton {
namespace {

TEST(ClientTest, InitWeightsThenForwardMatchesTheLibraryInBothFormats) {
  std::string dir = test_util::MakeTempDir("client");
  Flux2Config c = test_util::TinyFlux2Config();
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "config.json"), Flux2ConfigToJson(c)).ok());
  const std::string config = JoinPath(dir, "config.json");
  ASSERT_EQ(RunTool({"init-weights", "--config", config, "--out", JoinPath(dir, "model"), "--seed", "4"}), 0);
  ASSERT_EQ(RunTool({"init-weights", "--config", config, "--out", JoinPath(dir, "flux2.safetensors"), "--seed", "4",
                     "--format", "bfl"}),
            0);
  auto in = test_util::MakeTinyInputs(c, 1, 2, 3, 4, 6);
  ASSERT_TRUE(WriteSafetensors(JoinPath(dir, "in.safetensors"), {{"hidden_states", in.hidden_states},
                                                                 {"encoder_hidden_states", in.encoder_hidden_states},
                                                                 {"timestep", in.timestep},
                                                                 {"guidance", in.guidance},
                                                                 {"img_ids", in.img_ids},
                                                                 {"txt_ids", in.txt_ids}})
                  .ok());
  ASSERT_EQ(RunTool({"forward", "--model", JoinPath(dir, "model"), "--inputs", JoinPath(dir, "in.safetensors"),
                     "--output", JoinPath(dir, "out.safetensors")}),
            0);
  ASSERT_EQ(RunTool({"forward", "--model", JoinPath(dir, "flux2.safetensors"), "--config", config, "--inputs",
                     JoinPath(dir, "in.safetensors"), "--output", JoinPath(dir, "out_bfl.safetensors")}),
            0);
  auto out = LoadAllSafetensors(JoinPath(dir, "out.safetensors"));
  auto out_bfl = LoadAllSafetensors(JoinPath(dir, "out_bfl.safetensors"));
  ASSERT_TRUE(out.ok() && out_bfl.ok());

  auto ckpt = Flux2Checkpoint::Open(JoinPath(dir, "model"));
  ASSERT_TRUE(ckpt.ok());
  auto shell = BuildFlux2Shell(**ckpt, at::kFloat, at::kCPU);
  auto stage = BuildFlux2Stage(**ckpt, Flux2StageRange::Full(c), at::kFloat, at::kCPU, nullptr, false);
  ASSERT_TRUE(shell.ok() && stage.ok());
  at::NoGradGuard no_grad;
  at::Tensor expect = Flux2Forward(*shell, *stage, in.hidden_states, in.encoder_hidden_states, in.timestep, in.guidance,
                                   in.img_ids, in.txt_ids);
  EXPECT_TRUE(at::equal(out->at("output"), expect));
  EXPECT_TRUE(at::equal(out_bfl->at("output"), expect));

  // A missing input is a clear failure, not a crash.
  ASSERT_TRUE(WriteSafetensors(JoinPath(dir, "bad.safetensors"), {{"hidden_states", in.hidden_states}}).ok());
  EXPECT_EQ(RunTool({"forward", "--model", JoinPath(dir, "model"), "--inputs", JoinPath(dir, "bad.safetensors"),
                     "--output", JoinPath(dir, "x.safetensors")}),
            1);
  EXPECT_EQ(RunTool({"forward", "--bogus"}), 2);
  // Inputs of the wrong rank (a rank-0 img_ids used to abort): exit 1 with a message, not a crash.
  for (auto [key, t] : {std::pair<const char*, at::Tensor>{"img_ids", at::zeros({})},
                        {"txt_ids", at::zeros({6, 2})},
                        {"timestep", at::zeros({2, 2})}}) {
    std::map<std::string, at::Tensor> bad = {{"hidden_states", in.hidden_states},
                                             {"encoder_hidden_states", in.encoder_hidden_states},
                                             {"timestep", in.timestep},
                                             {"guidance", in.guidance},
                                             {"img_ids", in.img_ids},
                                             {"txt_ids", in.txt_ids}};
    bad[key] = t;
    ASSERT_TRUE(WriteSafetensors(JoinPath(dir, "rank.safetensors"), bad).ok());
    EXPECT_EQ(RunTool({"forward", "--model", JoinPath(dir, "model"), "--inputs", JoinPath(dir, "rank.safetensors"),
                       "--output", JoinPath(dir, "x.safetensors")}),
              1)
        << key;
  }
}

// `baton quantize` from a BFL single file, then `baton forward` on the result == `baton forward --quantize`
// on the source, bit for bit; fp8 over the int8 folder is refused (exit 1).
TEST(ClientTest, QuantizeThenForwardEqualsForwardQuantize) {
  std::string dir = test_util::MakeTempDir("client_quant");
  Flux2Config c = test_util::TinyFlux2Config();
  const std::string config = JoinPath(dir, "config.json");
  ASSERT_TRUE(WriteFileAtomic(config, Flux2ConfigToJson(c)).ok());
  const std::string bfl = JoinPath(dir, "flux2.safetensors");
  ASSERT_EQ(RunTool({"init-weights", "--config", config, "--out", bfl, "--seed", "2", "--format", "bfl"}), 0);
  auto in = test_util::MakeTinyInputs(c, 1, 2, 3, 4, 6);
  const std::string inputs = JoinPath(dir, "in.safetensors");
  ASSERT_TRUE(WriteSafetensors(inputs, {{"hidden_states", in.hidden_states},
                                        {"encoder_hidden_states", in.encoder_hidden_states},
                                        {"timestep", in.timestep},
                                        {"guidance", in.guidance},
                                        {"img_ids", in.img_ids},
                                        {"txt_ids", in.txt_ids}})
                  .ok());
  const std::string q = JoinPath(dir, "int8");
  ASSERT_EQ(RunTool({"quantize", "--model", bfl, "--config", config, "--out", q, "--quantize", "int8"}), 0);
  ASSERT_EQ(RunTool({"forward", "--model", bfl, "--config", config, "--inputs", inputs, "--output",
                     JoinPath(dir, "a.safetensors"), "--quantize", "int8"}),
            0);
  ASSERT_EQ(RunTool({"forward", "--model", q, "--inputs", inputs, "--output", JoinPath(dir, "b.safetensors")}), 0);
  ASSERT_EQ(RunTool({"forward", "--model", bfl, "--config", config, "--inputs", inputs, "--output",
                     JoinPath(dir, "full.safetensors")}),
            0);
  auto a = LoadAllSafetensors(JoinPath(dir, "a.safetensors"));
  auto b = LoadAllSafetensors(JoinPath(dir, "b.safetensors"));
  auto full = LoadAllSafetensors(JoinPath(dir, "full.safetensors"));
  ASSERT_TRUE(a.ok() && b.ok() && full.ok());
  EXPECT_TRUE(at::equal(a->at("output"), b->at("output")));
  EXPECT_FALSE(at::equal(a->at("output"), full->at("output")));
  EXPECT_EQ(RunTool({"forward", "--model", q, "--inputs", inputs, "--output", JoinPath(dir, "c.safetensors"),
                     "--quantize", "fp8"}),
            1);
  EXPECT_EQ(RunTool({"quantize", "--model", q, "--out", JoinPath(dir, "x"), "--quantize", "none"}), 1);
}

// `--references N` (FLUX.2 editing): each reference image adds the target's image tokens, which every block runs and
// the head does not; more than 4 are refused.
TEST(ClientTest, PlanCountsReferenceImagesTokens) {
  const std::string plan = JoinPath(test_util::BinDir(), "baton") + " plan --model-config " +
                           JoinPath(test_util::SourceDir(), "configs/models/flux2-dev.json") + " --stages 4";
  auto edit = test_util::RunCommand(plan + " --references 1", /*with_stderr=*/true);
  EXPECT_EQ(edit.exit_code, 0) << edit.output;
  EXPECT_NE(edit.output.find("8704 tokens/micro-batch (512 text, 4096 of reference images)"), std::string::npos)
      << edit.output;
  auto many = test_util::RunCommand(plan + " --references 5", true);
  EXPECT_EQ(many.exit_code, 1);
  EXPECT_NE(many.output.find("--references must be 0..4"), std::string::npos) << many.output;
}

// `baton command-server` (the referees' one process per script): each request runs as `baton ARGS` would, its output
// in the files it names, its exit code answered on a line; a malformed request is answered, not fatal.
TEST(ClientTest, CommandServerRunsEachRequestAsItsOwnBatonCall) {
  const std::string dir = test_util::MakeTempDir("command_server");
  const std::string config = JoinPath(test_util::SourceDir(), "configs/models/flux2-dev.json");
  auto request = [&](const std::string& args, const std::string& name) {
    return absl::StrCat("{\"args\": [", args, "], \"stdout\": \"", JoinPath(dir, name + ".out"), "\", \"stderr\": \"",
                        JoinPath(dir, name + ".err"), "\"}\n");
  };
  const std::string requests =
      request(absl::StrCat("\"plan\", \"--model-config\", \"", config, "\", \"--stages\", \"4\""), "plan") +
      "not json\n" + request("\"no-such-command\"", "unknown");
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "requests"), requests).ok());
  auto run = test_util::RunCommand(
      absl::StrCat(JoinPath(test_util::BinDir(), "baton"), " command-server < ", JoinPath(dir, "requests")));
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.output, "{\"rc\":0}\n{\"error\":\"expected {args: [...], stdout, stderr}\",\"rc\":2}\n{\"rc\":2}\n");
  EXPECT_NE(ReadFile(JoinPath(dir, "plan.out"))->find("FLUX.2 plan: 56 blocks"), std::string::npos);
  EXPECT_NE(ReadFile(JoinPath(dir, "unknown.err"))->find("unknown command 'no-such-command'"), std::string::npos);
}

TEST(ClientTest, PlanSaysWhenFlux2DevDoesNotFit) {
  const std::string config = JoinPath(test_util::SourceDir(), "configs/models/flux2-dev.json");
  EXPECT_EQ(RunTool({"plan", "--model-config", config, "--stages", "2", "--memory-per-stage", "24GB"}), 1);
  EXPECT_EQ(RunTool({"plan", "--model-config", config, "--stages", "4", "--memory-per-stage", "24GB"}), 0);
  // With 8-bit block weights two 24 GB cards do (the planner recomputes where it must); bad values are refused.
  EXPECT_EQ(
      RunTool({"plan", "--model-config", config, "--stages", "2", "--memory-per-stage", "24GB", "--quantize", "int8"}),
      0);
  // A 48 GB card as a one-stage replica beside two 24 GB cards as a two-stage one: each replica planned for its own
  // budgets (every worker's, replica after replica); the same three budgets of 24 GB do not fit the one-stage replica.
  EXPECT_EQ(RunTool({"plan", "--model-config", config, "--replica-stages", "1,2", "--memory-per-stage",
                     "48GB,24GB,24GB", "--quantize", "int8"}),
            0);
  EXPECT_EQ(RunTool({"plan", "--model-config", config, "--replica-stages", "1,2", "--memory-per-stage", "24GB",
                     "--quantize", "int8"}),
            1);
  EXPECT_EQ(RunTool({"plan", "--model-config", config, "--replica-stages", "1,x"}), 1);
  EXPECT_EQ(RunTool({"plan", "--model-config", config, "--quantize", "int8"}), 1);  // neither --stages nor replicas
  EXPECT_EQ(RunTool({"plan", "--model-config", config, "--stages", "2", "--quantize", "int4"}), 1);
  EXPECT_EQ(RunTool({"plan", "--model-config", config, "--stages", "2", "--recompute", "maybe"}), 1);
  EXPECT_EQ(RunTool({"plan", "--model-config", config, "--stages", "2", "--device", "tpu"}), 1);
  // One 24 GB card, or two 16 GB cards: with block swap from host memory (offload).
  for (const auto& [stages, budget] : {std::pair{"1", "24GB"}, std::pair{"2", "16GB"}}) {
    EXPECT_EQ(RunTool({"plan", "--model-config", config, "--stages", stages, "--memory-per-stage", budget, "--quantize",
                       "int8"}),
              1);
    EXPECT_EQ(RunTool({"plan", "--model-config", config, "--stages", stages, "--memory-per-stage", budget, "--quantize",
                       "int8", "--offload", "auto"}),
              0);
  }
  EXPECT_EQ(RunTool({"plan", "--model-config", config, "--stages", "2", "--offload", "some"}), 1);
  EXPECT_EQ(RunTool({"plan", "--model-config", config, "--stages", "2", "--offload", "4", "--recompute", "false"}), 1);
  EXPECT_EQ(RunTool({"schedule", "--stages", "4", "--micro-batches", "8", "--kind", "1f1b"}), 0);
  EXPECT_EQ(RunTool({"schedule", "--stages", "4", "--micro-batches", "8", "--kind", "interleaved", "--chunks", "2"}),
            0);
  // Without --chunks, interleaved runs 2 chunks per stage as the job key does; 1 chunk is refused.
  EXPECT_EQ(RunTool({"schedule", "--stages", "4", "--micro-batches", "8", "--kind", "interleaved"}), 0);
  EXPECT_EQ(RunTool({"schedule", "--stages", "4", "--micro-batches", "8", "--kind", "interleaved", "--chunks", "1"}),
            1);
  // Interleaving needs micro-batches in multiples of the stages, and --chunks only goes with it.
  EXPECT_EQ(RunTool({"schedule", "--stages", "4", "--micro-batches", "6", "--kind", "interleaved", "--chunks", "2"}),
            1);
  EXPECT_EQ(RunTool({"schedule", "--stages", "4", "--micro-batches", "8", "--kind", "1f1b", "--chunks", "2"}), 1);
}

// Malformed inputs files for `baton forward`, `vae-encode` and `text-encode`, each run as its own process the way
// a user runs it: every one is refused with exit 1 and a message naming the file and what is wrong, never an
// abort (exit 134) — the files that are no safetensors at all, and those whose tensors are wrong.
class MalformedInputsTest : public ::testing::Test {
 protected:
  using Tensors = std::map<std::string, at::Tensor>;
  struct Case {
    std::string label;
    std::string bytes;   // the file as written
    std::string expect;  // in the output
  };

  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("malformed_inputs"));
    auto r = test_util::RunCommand(
        absl::StrCat(JoinPath(test_util::BinDir(), "baton"), " init-weights --pipeline tiny --out ", Pipe()), true);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Pipe() { return JoinPath(*dir_, "pipe"); }

  static std::string Bytes(const Tensors& t) {
    auto s = SerializeSafetensors(t);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : "";
  }
  // What every reader must refuse, whatever it reads: a file that is not safetensors, truncated or empty.
  static std::vector<Case> NotSafetensors(const Tensors& valid) {
    const std::string good = Bytes(valid);
    return {{"not safetensors", "this is a text file, not a safetensors file\n", "safetensors"},
            {"truncated", good.substr(0, good.size() / 2), "truncated"},
            {"truncated header", good.substr(0, 20), "truncated"},
            {"empty", "", "0 bytes"},
            {"no tensors", Bytes({}), "missing"}};
  }
  // Runs `command` (its flags but the inputs file's) on each case's file: exit 1, the expected words, the path. The
  // first kOwnProcesses cases run as processes of their own (exit 1, never an abort); the rest one after another in
  // one `baton command-server` beside them (tools/command_server.h: each as `baton ARGS` would run, libtorch's start
  // paid once; a case that crashed would take the server down and leave the rest unanswered, failing them).
  static void ExpectEachRefused(const std::string& command, const std::string& inputs_flag,
                                const std::vector<Case>& cases) {
    constexpr size_t kOwnProcesses = 2;
    const std::string work = test_util::MakeTempDir("malformed_case");
    const std::string baton = JoinPath(test_util::BinDir(), "baton");
    const std::string requests = JoinPath(work, "requests.jsonl"), answers = JoinPath(work, "answers.jsonl");
    std::string script, lines;
    for (size_t i = 0; i < cases.size(); ++i) {
      const std::string path = JoinPath(work, absl::StrCat("case", i, ".safetensors"));
      ASSERT_TRUE(WriteFileAtomic(path, cases[i].bytes).ok());
      const std::string args = absl::StrCat(command, " ", inputs_flag, " ", path, " --output ", path, ".out");
      if (i < kOwnProcesses) {
        absl::StrAppend(&script, "(", baton, " ", args, " >", path, ".log 2>&1; echo $? >", path, ".rc) & ");
      } else {
        const std::vector<std::string> argv = absl::StrSplit(args, ' ', absl::SkipEmpty());
        nlohmann::json request = {{"args", argv}, {"stdout", path + ".stdout"}, {"stderr", path + ".log"}};
        absl::StrAppend(&lines, request.dump(), "\n");
      }
    }
    ASSERT_TRUE(WriteFileAtomic(requests, lines).ok());
    ASSERT_EQ(test_util::RunCommand(absl::StrCat(script, baton, " command-server <", requests, " >", answers, "; wait"))
                  .exit_code,
              0);
    const std::vector<std::string> served = absl::StrSplit(ReadFile(answers).value_or(""), '\n', absl::SkipEmpty());
    auto exit_code = [&](size_t i, const std::string& path) -> std::string {
      if (i < kOwnProcesses) return ReadFile(path + ".rc").value_or("?");
      if (i - kOwnProcesses >= served.size()) return "(no answer: the command server ended before this case)";
      return absl::StrCat(nlohmann::json::parse(served[i - kOwnProcesses])["rc"].get<int>(), "\n");
    };
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const std::string path = JoinPath(work, absl::StrCat("case", i, ".safetensors"));
      const std::string output =
          ReadFile(path + ".log").value_or("(no output)") + ReadFile(path + ".stdout").value_or("");
      EXPECT_EQ(exit_code(i, path), "1\n") << command << ", " << c.label << ":\n" << output;
      EXPECT_NE(output.find(path), std::string::npos) << c.label << ": the message names the file\n" << output;
      EXPECT_NE(output.find(c.expect), std::string::npos) << c.label << ": expected '" << c.expect << "'\n" << output;
    }
  }
  static std::string* dir_;
};
std::string* MalformedInputsTest::dir_ = nullptr;

TEST_F(MalformedInputsTest, ForwardRefusesEachMalformedFile) {
  auto ckpt = Flux2Checkpoint::Open(Pipe());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const Flux2Config& c = (*ckpt)->config();
  auto in = test_util::MakeTinyInputs(c, 1, 2, 3, 4, 6);
  const Tensors valid = {{"hidden_states", in.hidden_states},
                         {"encoder_hidden_states", in.encoder_hidden_states},
                         {"timestep", in.timestep},
                         {"guidance", in.guidance},
                         {"img_ids", in.img_ids},
                         {"txt_ids", in.txt_ids}};
  auto with = [&](const std::string& key, at::Tensor t) {
    Tensors m = valid;
    if (t.defined()) {
      m[key] = t;
    } else {
      m.erase(key);
    }
    return Bytes(m);
  };
  std::vector<Case> cases = NotSafetensors(valid);
  const int64_t C = c.in_channels, J = c.joint_attention_dim;
  std::vector<Case> tensors = {
      {"missing hidden_states", with("hidden_states", {}), "missing input 'hidden_states'"},
      {"missing guidance", with("guidance", {}), "missing input 'guidance'"},
      {"int hidden_states", with("hidden_states", at::zeros({1, 6, C}, at::kLong)), "hidden_states must be"},
      {"bool timestep", with("timestep", at::zeros({1}, at::kBool)), "timestep must be"},
      {"bool img_ids", with("img_ids", at::zeros({6, 4}, at::kBool)), "img_ids must be"},
      {"rank-2 hidden_states", with("hidden_states", at::zeros({6, C})), "hidden_states must be"},
      {"rank-0 img_ids", with("img_ids", at::zeros({})), "img_ids must be"},
      {"rank-4 txt_ids", with("txt_ids", at::zeros({1, 1, 4, 4})), "txt_ids must be"},
      {"rank-2 timestep", with("timestep", at::zeros({2, 2})), "timestep must be"},
      {"wrong channels", with("hidden_states", at::zeros({1, 6, C + 1})), "hidden_states must be"},
      {"wrong text dim", with("encoder_hidden_states", at::zeros({1, 4, J - 1})), "encoder_hidden_states must be"},
      {"batch mismatch", with("encoder_hidden_states", at::zeros({2, 4, J})), "encoder_hidden_states must"},
      {"img_ids rows", with("img_ids", at::zeros({5, 4})), "img_ids must be"},
      {"img_ids axes", with("img_ids", at::zeros({6, 3})), "img_ids must be"},
      {"timestep batch", with("timestep", at::zeros({3})), "timestep must be"},
      {"empty image sequence", with("hidden_states", at::zeros({1, 0, C})), "hidden_states must be"},
      {"empty batch", with("hidden_states", at::zeros({0, 6, C})), "hidden_states must be"},
      {"empty batched ids", with("img_ids", at::zeros({0, 6, 4})), "img_ids must be"},
  };
  cases.insert(cases.end(), tensors.begin(), tensors.end());
  ExpectEachRefused(absl::StrCat("forward --model ", Pipe()), "--inputs", cases);
}

TEST_F(MalformedInputsTest, VaeEncodeRefusesEachMalformedFile) {
  auto pixels = [](std::vector<int64_t> shape, at::ScalarType dtype = at::kFloat) {
    return Bytes({{"pixels", at::zeros(shape, at::TensorOptions().dtype(dtype))}});
  };
  std::vector<Case> cases = NotSafetensors({{"pixels", at::zeros({1, 3, 16, 16})}});
  std::vector<Case> tensors = {
      {"missing pixels", Bytes({{"image", at::zeros({1, 3, 16, 16})}}), "missing 'pixels'"},
      {"int pixels", pixels({1, 3, 16, 16}, at::kLong), "pixels must be"},
      {"rank 3", pixels({3, 16, 16}), "pixels must be"},
      {"rank 0", pixels({}), "pixels must be"},
      {"4 channels", pixels({1, 4, 16, 16}), "pixels must be"},
      {"height not a multiple of 16", pixels({1, 3, 20, 16}), "pixels must be"},
      {"empty batch", pixels({0, 3, 16, 16}), "pixels must be"},
      {"zero width", pixels({1, 3, 16, 0}), "pixels must be"},
  };
  cases.insert(cases.end(), tensors.begin(), tensors.end());
  ExpectEachRefused(absl::StrCat("vae-encode --model ", Pipe()), "--inputs", cases);
}

TEST_F(MalformedInputsTest, TextEncodeRefusesEachMalformedFile) {
  auto ids = [](at::Tensor t) { return Bytes({{"input_ids", t}}); };
  std::vector<Case> cases = NotSafetensors({{"input_ids", at::zeros({1, 4}, at::kLong)}});
  std::vector<Case> tensors = {
      {"missing input_ids", Bytes({{"ids", at::zeros({1, 4}, at::kLong)}}), "missing 'input_ids'"},
      {"float ids", ids(at::zeros({1, 4})), "input_ids must be"},
      {"bool ids", ids(at::zeros({1, 4}, at::kBool)), "input_ids must be"},
      {"rank 1", ids(at::zeros({4}, at::kLong)), "input_ids must be"},
      {"batch 2", ids(at::zeros({2, 4}, at::kLong)), "input_ids must be"},
      {"empty", ids(at::zeros({1, 0}, at::kLong)), "input_ids must be"},
      {"negative id", ids(at::full({1, 4}, -1, at::kLong)), "vocabulary"},
      {"id past the vocabulary", ids(at::full({1, 4}, 1 << 30, at::kLong)), "vocabulary"},
  };
  cases.insert(cases.end(), tensors.begin(), tensors.end());
  ExpectEachRefused(absl::StrCat("text-encode --model ", Pipe()), "--input-ids", cases);
}

}  // namespace
}  // namespace baton
