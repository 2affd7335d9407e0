// The 8-bit text encoder (issue 26): speed, resident memory and prompt-embedding error of encoder_worker --quantize
// int8 | fp8 against the bf16 encoder, on random bf16 checkpoints of two shapes:
//   tiny  TinyMistral3TextConfig (40 layers, hidden 32): errors at FLUX.2-dev's layers 10/20/30 and the worst layer;
//   real  Mistral-Small-3.1 24B's layer shapes (hidden 5120, 32 heads x 128, 8 KV heads, SwiGLU 32768) with
//         --real-layers layers (3 by default: 1.1 GB of bf16 each), errors at every layer.
// Each precision runs in a child process of its own (this binary with --child), so its peak and resident memory are
// its own: Open, one cold Encode (the 8-bit ones quantize here), then --repeats warm Encodes of one --tokens prompt.
//
//   bench_encoder_quant [--dir /tmp/bench_encoder_quant] [--configs tiny,real] [--real-layers 3] [--tokens 512]
//                       [--threads 2] [--repeats 2]
// prints a Markdown table (BENCHMARKS.md "bench_encoder_quant").
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <absl/flags/flag.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "core/device/threads.h"
#include "core/quant/eight_bit_linear.h"
#include "core/tensor/safetensors.h"
#include "core/text/text_encoder.h"
#include "core/text/text_encoder_checkpoint.h"
#include "core/text/text_encoder_config.h"
#include "core/util/files.h"
#include "core/util/status.h"

ABSL_FLAG(std::string, dir, "/tmp/bench_encoder_quant", "checkpoints and outputs go here (kept between runs)");
ABSL_FLAG(std::vector<std::string>, configs, std::vector<std::string>({"tiny", "real"}), "tiny and/or real");
ABSL_FLAG(int64_t, real_layers, 3, "decoder layers of the real-width checkpoint");
ABSL_FLAG(int64_t, tokens, 512, "prompt length (FLUX.2's max_sequence_length)");
ABSL_FLAG(int, threads, 2, "compute threads");
ABSL_FLAG(int, repeats, 2, "warm Encodes timed after the cold one");
ABSL_FLAG(std::string, child, "", "internal: run one precision (CONFIG:QUANT:GEMM) and print JSON");

namespace baton {
namespace {

TextEncoderConfig ConfigNamed(const std::string& name) {
  TextEncoderConfig c = TinyMistral3TextConfig();
  if (name == "real") {  // Mistral-Small-3.1-24B's text model, fewer layers
    c.hidden_size = 5120;
    c.intermediate_size = 32768;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.head_dim = 128;
    c.num_hidden_layers = absl::GetFlag(FLAGS_real_layers);
  }
  return c;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int64_t CurrentRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    int64_t kb = 0;
    if (key == "VmRSS:" && status >> kb) return kb * 1024;
  }
  return 0;
}

// One precision: prints {"cold": s, "warm": s, "peak_rss": B, "rss": B, "resident": B} and writes the hidden states.
absl::Status RunChild(const std::string& spec) {
  const std::vector<std::string> parts = absl::StrSplit(spec, ':');
  if (parts.size() != 3) return absl::InvalidArgumentError("--child CONFIG:QUANT:GEMM");
  const std::string dir = JoinPath(absl::GetFlag(FLAGS_dir), parts[0]);
  ASSIGN_OR_RETURN(WeightQuant q, ParseWeightQuant(parts[1]));
  ASSIGN_OR_RETURN(EightBitGemm gemm, ParseEightBitGemm(parts[2]));
  SetEightBitGemm(gemm);
  SetComputeThreads(absl::GetFlag(FLAGS_threads));
  ASSIGN_OR_RETURN(auto enc, TextEncoder::Open(JoinPath(dir, "text_encoder"), at::kBFloat16, at::kCPU, q));
  const int64_t n = enc->config().num_hidden_layers, tokens = absl::GetFlag(FLAGS_tokens);
  auto gen = at::detail::createCPUGenerator(7);
  const at::Tensor ids = at::randint(1, enc->config().vocab_size, {1, tokens}, gen, at::kLong);
  std::vector<int64_t> layers(n);
  std::iota(layers.begin(), layers.end(), 1);
  auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(at::Tensor out, enc->Encode(ids, at::Tensor(), layers));
  const double cold = Seconds(start);
  std::vector<double> warm;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(out, enc->Encode(ids, at::Tensor(), layers));
    warm.push_back(Seconds(start));
  }
  std::sort(warm.begin(), warm.end());
  RETURN_IF_ERROR(WriteSafetensors(JoinPath(dir, absl::StrCat("out_", parts[1], "_", parts[2], ".safetensors")),
                                   {{"hidden", out.contiguous()}}, {}));
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  nlohmann::json j = {{"cold", cold},
                      {"warm", warm.empty() ? cold : warm[warm.size() / 2]},
                      {"peak_rss", static_cast<int64_t>(usage.ru_maxrss) * 1024},
                      {"rss", CurrentRssBytes()},
                      {"resident", enc->resident_weight_bytes()}};
  std::printf("%s\n", j.dump().c_str());
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> Child(const std::string& self, const std::string& spec) {
  const std::string cmd =
      absl::StrCat(self, " --child ", spec, " --dir ", absl::GetFlag(FLAGS_dir), " --tokens ",
                   absl::GetFlag(FLAGS_tokens), " --threads ", absl::GetFlag(FLAGS_threads), " --repeats ",
                   absl::GetFlag(FLAGS_repeats), " --real-layers ", absl::GetFlag(FLAGS_real_layers));
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return absl::InternalError("popen failed");
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, got);
  if (pclose(pipe) != 0) return absl::InternalError(absl::StrCat(spec, " failed: ", out));
  return nlohmann::json::parse(out.substr(out.rfind('{')));
}

double Rel(const at::Tensor& got, const at::Tensor& want) {
  return ((got.to(at::kDouble) - want.to(at::kDouble)).norm() / want.to(at::kDouble).norm()).item<double>();
}

std::string Gib(int64_t bytes) { return absl::StrFormat("%.2f", bytes / double(int64_t{1} << 30)); }

absl::Status RunConfig(const std::string& self, const std::string& name) {
  const TextEncoderConfig c = ConfigNamed(name);
  const std::string dir = JoinPath(absl::GetFlag(FLAGS_dir), name);
  if (!PathExists(JoinPath(dir, "text_encoder/config.json"))) {
    RETURN_IF_ERROR(WriteRandomTextEncoder(c, JoinPath(dir, "text_encoder"), /*seed=*/1));
  }
  const int64_t n = c.num_hidden_layers, h = c.hidden_size;
  std::vector<int64_t> shown = n >= 30 ? std::vector<int64_t>{10, 20, 30} : std::vector<int64_t>{};
  if (shown.empty()) {
    for (int64_t k = 1; k <= n; ++k) shown.push_back(k);
  }
  std::printf("\n%s: hidden %lld, %lld layers, %lld tokens, bf16 compute, %d threads\n\n", name.c_str(),
              static_cast<long long>(h), static_cast<long long>(n), static_cast<long long>(absl::GetFlag(FLAGS_tokens)),
              absl::GetFlag(FLAGS_threads));
  std::vector<std::string> err_heads;
  for (int64_t k : shown) err_heads.push_back(absl::StrCat("err L", k));
  std::printf(
      "| text encoder | GEMM | cold s | warm s | vs bf16 | %s | worst layer | 8-bit GiB | peak RSS GiB | RSS GiB |\n",
      absl::StrJoin(err_heads, " | ").c_str());
  std::string rule = "|---|---|---|---|---|";
  for (size_t i = 0; i < shown.size(); ++i) rule += "---|";
  std::printf("%s---|---|---|---|\n", rule.c_str());
  at::Tensor base;
  double base_warm = 0;
  for (const auto& [quant, gemm] : std::vector<std::pair<std::string, std::string>>{
           {"none", "dequantize"}, {"int8", "dequantize"}, {"int8", "int8pack"}, {"fp8", "dequantize"}}) {
    ASSIGN_OR_RETURN(nlohmann::json r, Child(self, absl::StrCat(name, ":", quant, ":", gemm)));
    ASSIGN_OR_RETURN(auto file,
                     LoadAllSafetensors(JoinPath(dir, absl::StrCat("out_", quant, "_", gemm, ".safetensors"))));
    const at::Tensor out = file.at("hidden");
    if (!base.defined()) {
      base = out;
      base_warm = r["warm"].get<double>();
    }
    std::vector<std::string> errs;
    double worst = 0;
    for (int64_t k = 1; k <= n; ++k) {
      const double e = Rel(out.narrow(-1, (k - 1) * h, h), base.narrow(-1, (k - 1) * h, h));
      worst = std::max(worst, e);
      if (std::find(shown.begin(), shown.end(), k) != shown.end()) errs.push_back(absl::StrFormat("%.2e", e));
    }
    std::printf("| %s | %s | %.2f | %.2f | %.2fx | %s | %.2e | %s | %s | %s |\n",
                quant == "none" ? "bf16" : quant.c_str(), quant == "none" ? "-" : gemm.c_str(), r["cold"].get<double>(),
                r["warm"].get<double>(), r["warm"].get<double>() / base_warm, absl::StrJoin(errs, " | ").c_str(), worst,
                Gib(r["resident"].get<int64_t>()).c_str(), Gib(r["peak_rss"].get<int64_t>()).c_str(),
                Gib(r["rss"].get<int64_t>()).c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  RETURN_IF_ERROR(ParseBenchFlags(argc, argv, "bench_encoder_quant [--configs tiny,real] (see the file's comment)"));
  if (!absl::GetFlag(FLAGS_child).empty()) return RunChild(absl::GetFlag(FLAGS_child));
  char path[4096];
  const ssize_t len = ::readlink("/proc/self/exe", path, sizeof(path) - 1);  // popen's shell has its own
  if (len <= 0) return absl::InternalError("readlink /proc/self/exe failed");
  const std::string self(path, static_cast<size_t>(len));
  for (const std::string& name : absl::GetFlag(FLAGS_configs)) {
    if (name != "tiny" && name != "real") return absl::InvalidArgumentError("--configs: tiny and/or real");
    RETURN_IF_ERROR(RunConfig(self, name));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  absl::Status s = baton::Run(argc, argv);
  if (!s.ok()) std::fprintf(stderr, "bench_encoder_quant: %s\n", s.ToString().c_str());
  return s.ok() ? 0 : 1;
}
