#include "core/tensor/safetensors.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "core/util/files.h"

namespace baton {
namespace {

// A fresh directory per test under the gtest temp dir.
std::string TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = JoinPath(::testing::TempDir(), absl::StrCat("safetensors_test_", info->name()));
  EXPECT_TRUE(RemoveAll(dir).ok());
  EXPECT_TRUE(MakeDirs(dir).ok());
  return dir;
}

// 8-byte little-endian header length, the header text, then the data bytes — built by hand so the
// reader is checked against the format itself rather than against our writer.
std::string RawFile(const std::string& header, const std::string& data) {
  std::string out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + header + data;
}

std::string LengthPrefix(uint64_t n) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out;
}

std::string WriteRaw(const std::string& dir, const std::string& bytes) {
  std::string path = JoinPath(dir, "model.safetensors");
  EXPECT_TRUE(WriteFileAtomic(path, bytes).ok());
  return path;
}

std::string Bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

// Opens `bytes` as a file and expects failure with `code` and a message naming the path and `substr`.
void ExpectOpenError(const std::string& bytes, absl::StatusCode code, const std::string& substr) {
  const std::string path = WriteRaw(TestDir(), bytes);
  auto f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), code) << f.status();
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find(substr), std::string::npos) << "want '" << substr << "' in " << f.status();
}

TEST(SafetensorsTest, RoundTripsDtypesScalarsAndEmptyTensors) {
  at::manual_seed(0);
  std::map<std::string, at::Tensor> tensors = {
      {"f64", at::randn({2, 3}, at::kDouble)},
      {"f32", at::randn({3, 4})},
      {"f32.transposed", at::randn({4, 3}).t()},  // non-contiguous: writer must compact it
      {"bf16", at::randn({2, 5}).to(at::kBFloat16)},
      {"f16", at::randn({5}).to(at::kHalf)},
      {"i64", at::arange(6, at::kLong) * (int64_t{1} << 40) - 7},
      {"i32", at::randint(-1000, 1000, {4}, at::kInt)},
      {"i16", at::randint(-300, 300, {2, 2}, at::kShort)},
      {"i8", at::randint(-128, 127, {3}, at::kChar)},
      {"u8", at::randint(0, 255, {3}, at::kByte)},
      {"bool", at::rand({7}) > 0.5},
      {"scalar", at::scalar_tensor(3.25)},
      {"empty", at::zeros({0, 3})},
  };
  const std::string path = JoinPath(TestDir(), "all.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());

  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->Keys().size(), tensors.size());
  EXPECT_TRUE((*f)->metadata().empty());
  for (const auto& [key, want] : tensors) {
    SCOPED_TRACE(key);
    auto got = (*f)->Load(key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->scalar_type(), want.scalar_type());
    EXPECT_EQ(got->sizes(), want.sizes());
    EXPECT_TRUE(got->is_contiguous());
    EXPECT_TRUE(at::equal(*got, want));
  }
  auto entry = (*f)->Entry("scalar");
  ASSERT_TRUE(entry.ok());
  EXPECT_TRUE(entry->shape.empty());
  EXPECT_EQ(entry->dtype, "F32");
  EXPECT_EQ(entry->end - entry->begin, 4u);

  // The loaded tensor owns its memory: it survives the file being closed.
  auto t = (*f)->Load("f32");
  ASSERT_TRUE(t.ok());
  f->reset();
  EXPECT_TRUE(at::equal(*t, tensors.at("f32")));
}

TEST(SafetensorsTest, MetadataRoundTripsAndIsOmittedWhenEmpty) {
  const std::string dir = TestDir();
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}, {"note", "ä \"q\""}};
  const std::map<std::string, at::Tensor> tensors = {{"w", at::ones({2})}};
  const std::string with = JoinPath(dir, "with.safetensors");
  ASSERT_TRUE(WriteSafetensors(with, tensors, meta).ok());
  auto f = SafetensorsFile::Open(with);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->metadata(), meta);
  EXPECT_EQ((*f)->Keys(), std::vector<std::string>{"w"});

  auto bytes = SerializeSafetensors(tensors);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->find("__metadata__"), std::string::npos);
}

TEST(SafetensorsTest, LoadConvertsDtype) {
  at::manual_seed(1);
  const at::Tensor t = at::randn({3, 7});
  const std::string path = JoinPath(TestDir(), "conv.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"bf", t.to(at::kBFloat16)}, {"f", t}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();

  auto up = (*f)->Load("bf", at::kFloat);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(*up, t.to(at::kBFloat16).to(at::kFloat)));
  EXPECT_FALSE(at::equal(*up, t));  // bf16 rounding really happened

  auto down = (*f)->Load("f", at::kBFloat16);
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(down->scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(*down, t.to(at::kBFloat16)));
}

// A view is the file's bytes in place: two views of one tensor share their memory (Load copies), and a view
// outlives the caller's handle on the file (it keeps the mapping).
TEST(SafetensorsTest, ViewReadsInPlaceAndKeepsTheFileMapped) {
  at::manual_seed(2);
  const at::Tensor t = at::randn({5, 9}).to(at::kBFloat16);
  const std::string path = JoinPath(TestDir(), "view.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"a", at::randn({3})}, {"w", t}}).ok());
  auto opened = SafetensorsFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const SafetensorsFile> file = std::move(*opened);
  auto first = SafetensorsFile::View(file, "w");
  auto second = SafetensorsFile::View(file, "w");
  auto copy = file->Load("w");
  ASSERT_TRUE(first.ok() && second.ok() && copy.ok()) << first.status() << second.status() << copy.status();
  EXPECT_EQ(first->data_ptr(), second->data_ptr());
  EXPECT_NE(first->data_ptr(), copy->data_ptr());
  EXPECT_EQ(first->scalar_type(), at::kBFloat16);
  EXPECT_EQ(first->sizes(), t.sizes());
  file.reset();
  second = at::Tensor();
  EXPECT_TRUE(at::equal(*first, t));  // still mapped
  EXPECT_EQ(SafetensorsFile::View(std::shared_ptr<const SafetensorsFile>(std::move(*SafetensorsFile::Open(path))), "x")
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, ReadsHandBuiltFile) {
  // Unsorted keys, __metadata__ in the middle, unpadded header, a 3-byte gap before the last tensor.
  const std::string header = R"({"zeta":{"dtype":"I16","shape":[1,2],"data_offsets":[8,12]},)"
                             R"("__metadata__":{"format":"pt"},)"
                             R"("Alpha":{"shape":[2],"dtype":"F32","data_offsets":[0,8]},)"
                             R"("mid":{"dtype":"BF16","shape":[],"data_offsets":[12,14]},)"
                             R"("flags":{"dtype":"BOOL","shape":[3],"data_offsets":[17,20]},)"
                             R"("none":{"dtype":"F16","shape":[0],"data_offsets":[14,14]}})";
  const std::string data = Bytes({0x00, 0x00, 0xC0, 0x3F,  // 1.5f
                                  0x00, 0x00, 0x00, 0xC0,  // -2.0f
                                  0x02, 0x01, 0xFF, 0xFF,  // int16 258, -1
                                  0x80, 0x3F,              // bf16 1.0
                                  0xAA, 0xAA, 0xAA,        // gap
                                  0x01, 0x00, 0x01});      // true false true
  const std::string path = WriteRaw(TestDir(), RawFile(header, data));
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->Keys(), (std::vector<std::string>{"Alpha", "flags", "mid", "none", "zeta"}));
  EXPECT_EQ((*f)->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));

  auto alpha = (*f)->Load("Alpha");
  ASSERT_TRUE(alpha.ok()) << alpha.status();
  ASSERT_EQ(alpha->scalar_type(), at::kFloat);
  EXPECT_EQ(alpha->data_ptr<float>()[0], 1.5f);
  EXPECT_EQ(alpha->data_ptr<float>()[1], -2.0f);

  auto zeta = (*f)->Load("zeta");
  ASSERT_TRUE(zeta.ok()) << zeta.status();
  ASSERT_EQ(zeta->scalar_type(), at::kShort);
  EXPECT_EQ(zeta->sizes(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(zeta->data_ptr<int16_t>()[0], 258);
  EXPECT_EQ(zeta->data_ptr<int16_t>()[1], -1);

  auto mid = (*f)->Load("mid", at::kFloat);
  ASSERT_TRUE(mid.ok()) << mid.status();
  EXPECT_EQ(mid->dim(), 0);
  EXPECT_EQ(mid->item<float>(), 1.0f);

  auto flags = (*f)->Load("flags");
  ASSERT_TRUE(flags.ok()) << flags.status();
  ASSERT_EQ(flags->scalar_type(), at::kBool);
  EXPECT_TRUE(flags->data_ptr<bool>()[0]);
  EXPECT_FALSE(flags->data_ptr<bool>()[1]);
  EXPECT_TRUE(flags->data_ptr<bool>()[2]);

  auto none = (*f)->Load("none");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->scalar_type(), at::kHalf);
  EXPECT_EQ(none->numel(), 0);

  EXPECT_TRUE((*f)->Contains("zeta"));
  EXPECT_FALSE((*f)->Contains("__metadata__"));
  auto missing = (*f)->Load("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos) << missing.status();
  EXPECT_NE(missing.status().message().find(path), std::string::npos) << missing.status();
}

TEST(SafetensorsTest, WriterUsesReferenceLayout) {
  // The Rust reference writes __metadata__ first, fields dtype/shape/data_offsets, packed offsets,
  // and pads the header with spaces to a multiple of 8.
  std::map<std::string, at::Tensor> tensors = {{"b", at::tensor({int16_t{258}})}, {"a", at::tensor({1.5f, -2.0f})}};
  auto bytes = SerializeSafetensors(tensors, {{"k", "v"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::string header = R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"I16","shape":[1],"data_offsets":[8,10]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string data = Bytes({0x00, 0x00, 0xC0, 0x3F, 0x00, 0x00, 0x00, 0xC0, 0x02, 0x01});
  EXPECT_EQ(*bytes, RawFile(header, data));
  EXPECT_EQ((bytes->size() - data.size()) % 8, 0u);
}

TEST(SafetensorsTest, WriterRejectsReservedKeyAndUnsupportedDtype) {
  auto reserved = SerializeSafetensors({{"__metadata__", at::ones({1})}});
  EXPECT_EQ(reserved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(reserved.status().message().find("reserved"), std::string::npos) << reserved.status();

  auto complex = SerializeSafetensors({{"c", at::ones({1}, at::kComplexFloat)}});
  EXPECT_EQ(complex.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(complex.status().message().find("tensor 'c'"), std::string::npos) << complex.status();
}

TEST(SafetensorsTest, DtypeMappingRoundTrips) {
  for (const char* code :
       {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2"}) {
    auto t = SafetensorsDtypeToTorch(code);
    ASSERT_TRUE(t.ok()) << code;
    auto back = TorchDtypeToSafetensors(*t);
    ASSERT_TRUE(back.ok()) << code;
    EXPECT_EQ(*back, code);
  }
  EXPECT_EQ(*SafetensorsDtypeToTorch("BF16"), at::kBFloat16);
  EXPECT_EQ(*SafetensorsDtypeToTorch("F16"), at::kHalf);
  EXPECT_EQ(*SafetensorsDtypeToTorch("F8_E4M3"), at::kFloat8_e4m3fn);
  EXPECT_EQ(SafetensorsDtypeToTorch("F4").status().code(), absl::StatusCode::kInvalidArgument);
}

// 8-bit quantized weights (core/quant) are stored as I8 and F8_E4M3 and must come back bit for bit.
TEST(SafetensorsTest, EightBitTensorsRoundTripBitwise) {
  const std::string path = JoinPath(TestDir(), "q.safetensors");
  at::Tensor i8 = at::arange(-127, 128, at::kShort).to(at::kChar).reshape({5, 51});
  at::Tensor f8 = (at::linspace(-448, 448, 64, at::kFloat)).to(at::kFloat8_e4m3fn).reshape({8, 8});
  ASSERT_TRUE(WriteSafetensors(path, {{"a", i8}, {"b", f8}}).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->Entry("b")->dtype, "F8_E4M3");
  auto a = (*file)->Load("a");
  auto b = (*file)->Load("b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(at::equal(*a, i8));
  ASSERT_EQ(b->scalar_type(), at::kFloat8_e4m3fn);
  EXPECT_TRUE(at::equal(b->view(at::kByte), f8.view(at::kByte)));
  auto widened = (*file)->Load("b", at::kFloat);  // conversion on load works for fp8 too
  ASSERT_TRUE(widened.ok());
  EXPECT_TRUE(at::equal(*widened, f8.to(at::kFloat)));
}

// ---- Broken files ----

TEST(SafetensorsTest, ShardedFolderRoundTripsThroughTheIndex) {
  const std::string dir = TestDir();
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (int i = 0; i < 5; ++i) tensors.emplace_back(absl::StrCat("w", i), at::full({256}, static_cast<float>(i)));
  // 1 KiB tensors, 2 KiB shards: 3 files, filled in order.
  ASSERT_TRUE(WriteShardedSafetensors(dir, "model", tensors, {{"format", "pt"}}, 2048).ok());
  auto paths = SafetensorsShardPaths(dir, "model");
  ASSERT_TRUE(paths.ok()) << paths.status();
  ASSERT_EQ(paths->size(), 3u);
  EXPECT_EQ(paths->front(), JoinPath(dir, "model-00001-of-00003.safetensors"));
  auto weight_map = ReadSafetensorsIndex(dir, "model");
  ASSERT_TRUE(weight_map.ok()) << weight_map.status();
  ASSERT_EQ(weight_map->size(), 5u);
  for (const auto& [name, t] : tensors) {
    auto file = LoadAllSafetensors(weight_map->at(name));
    ASSERT_TRUE(file.ok()) << name;
    EXPECT_TRUE(at::equal(file->at(name), t)) << name;
  }
  // Unsharded: the single file; nothing: an error naming both layouts.
  ASSERT_TRUE(WriteShardedSafetensors(dir, "single", tensors, {}, 0).ok());
  auto single = SafetensorsShardPaths(dir, "single");
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(*single, std::vector<std::string>{JoinPath(dir, "single.safetensors")});
  auto none = SafetensorsShardPaths(dir, "absent");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("absent.safetensors.index.json"), absl::string_view::npos);
  // A shard name that leaves the folder is refused.
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "evil.safetensors.index.json"),
                              R"({"weight_map": {"w0": "../outside.safetensors"}})")
                  .ok());
  auto evil = ReadSafetensorsIndex(dir, "evil");
  ASSERT_FALSE(evil.ok());
  EXPECT_NE(evil.status().message().find("leaves the folder"), absl::string_view::npos);
}

TEST(SafetensorsTest, RejectsTruncatedData) {
  auto bytes = SerializeSafetensors({{"w", at::ones({4, 4})}});
  ASSERT_TRUE(bytes.ok());
  ExpectOpenError(bytes->substr(0, bytes->size() - 4), absl::StatusCode::kInvalidArgument, "truncated");
  ExpectOpenError(bytes->substr(0, bytes->size() - 4), absl::StatusCode::kInvalidArgument, "tensor 'w'");
}

TEST(SafetensorsTest, RejectsHeaderLengthLargerThanFile) {
  ExpectOpenError(LengthPrefix(1000) + "{}        ", absl::StatusCode::kInvalidArgument,
                  "header length 1000 but only 10 bytes");
  ExpectOpenError(LengthPrefix(1000) + "{}", absl::StatusCode::kInvalidArgument, "truncated");
  ExpectOpenError(LengthPrefix(uint64_t{1} << 62), absl::StatusCode::kInvalidArgument,
                  "exceeds the 100000000-byte limit");
}

TEST(SafetensorsTest, RejectsHeaderThatIsNotJsonObject) {
  ExpectOpenError(RawFile(R"({"w": {"dtype": "F32",)", ""), absl::StatusCode::kInvalidArgument, "not valid JSON");
  ExpectOpenError(RawFile("", ""), absl::StatusCode::kInvalidArgument, "not valid JSON");
  ExpectOpenError(RawFile("[1, 2]", ""), absl::StatusCode::kInvalidArgument, "not an object");
  ExpectOpenError(RawFile(std::string(5000, '[') + std::string(5000, ']'), ""), absl::StatusCode::kInvalidArgument,
                  "nests deeper");
}

TEST(SafetensorsTest, RejectsBadDtype) {
  ExpectOpenError(RawFile(R"({"x.weight":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})", "ab"),
                  absl::StatusCode::kInvalidArgument, "tensor 'x.weight': unsupported dtype 'Q4'");
  ExpectOpenError(RawFile(R"({"x":{"dtype":7,"shape":[2],"data_offsets":[0,2]}})", "ab"),
                  absl::StatusCode::kInvalidArgument, "non-string 'dtype'");
}

TEST(SafetensorsTest, RejectsBadShape) {
  ExpectOpenError(RawFile(R"({"x":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}})", "ab"),
                  absl::StatusCode::kInvalidArgument, "not a non-negative integer");
  ExpectOpenError(RawFile(R"({"x":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}})", "ab"),
                  absl::StatusCode::kInvalidArgument, "not a non-negative integer");
  ExpectOpenError(RawFile(R"({"x":{"dtype":"U8","data_offsets":[0,2]}})", "ab"), absl::StatusCode::kInvalidArgument,
                  "'shape'");
}

TEST(SafetensorsTest, RejectsOffsetsOutOfRange) {
  ExpectOpenError(RawFile(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, '\0')),
                  absl::StatusCode::kInvalidArgument, "data_offsets [0, 16] exceed the 8-byte data section");
  ExpectOpenError(RawFile(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", std::string(8, '\0')),
                  absl::StatusCode::kInvalidArgument, "begin > end");
  ExpectOpenError(RawFile(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", std::string(8, '\0')),
                  absl::StatusCode::kInvalidArgument, "'data_offsets' must be [begin, end]");
}

TEST(SafetensorsTest, RejectsOverlappingOffsets) {
  ExpectOpenError(RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          std::string(12, '\0')),
                  absl::StatusCode::kInvalidArgument, "'a' [0, 8] and 'b' [4, 12] overlap");
}

TEST(SafetensorsTest, RejectsShapeSizeMismatch) {
  ExpectOpenError(RawFile(R"({"x.weight":{"dtype":"F32","shape":[4,8],"data_offsets":[0,96]}})", std::string(96, '\0')),
                  absl::StatusCode::kInvalidArgument,
                  "tensor 'x.weight': data_offsets [0, 96] hold 96 bytes but F32 [4, 8] needs 128");
  // numel × itemsize that overflows 64 bits must not wrap around to a small "valid" size.
  ExpectOpenError(RawFile(R"({"x":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", ""),
                  absl::StatusCode::kInvalidArgument, "overflows");
}

TEST(SafetensorsTest, RejectsBadMetadata) {
  ExpectOpenError(RawFile(R"({"__metadata__":{"step":12}})", ""), absl::StatusCode::kInvalidArgument,
                  "'__metadata__' key 'step'");
  ExpectOpenError(RawFile(R"({"__metadata__":["a"]})", ""), absl::StatusCode::kInvalidArgument,
                  "'__metadata__' is not an object");
}

TEST(SafetensorsTest, RejectsZeroByteAndMissingFiles) {
  ExpectOpenError("", absl::StatusCode::kInvalidArgument, "file is 0 bytes");
  ExpectOpenError("abc", absl::StatusCode::kInvalidArgument, "too small");

  const std::string missing = JoinPath(TestDir(), "absent.safetensors");
  auto f = SafetensorsFile::Open(missing);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find(missing), std::string::npos) << f.status();

  auto all = LoadAllSafetensors(missing);
  EXPECT_EQ(all.status().code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, LoadAllReturnsEveryTensor) {
  const std::map<std::string, at::Tensor> tensors = {{"a", at::arange(3)}, {"b", at::ones({2, 2})}};
  const std::string path = JoinPath(TestDir(), "all.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  auto all = LoadAllSafetensors(path);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_TRUE(at::equal(all->at("a"), tensors.at("a")));
  EXPECT_TRUE(at::equal(all->at("b"), tensors.at("b")));
}

// kB of one "Name:  123 kB" line of /proc/self/status (-1 when absent, e.g. not Linux).
int64_t StatusKb(const std::string& name) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) == 0) return std::stoll(line.substr(name.size() + 1));
  }
  return -1;
}

// A stage must hold its frozen weights once: loading N bytes of tensors grows the process by ~N (the owned
// copies), not ~2N (copies + the mapping's file pages, which is what a 2-stage klein-4B run showed).
// RssFile is the direct measure: the file pages this process maps. It must not grow by more than a
// quarter of the weights (page-granular slack); the total must stay under 1.3x (anonymous copies are
// exactly 1x; the bound leaves room for allocator noise, not for a second copy).
TEST(SafetensorsTest, LoadedWeightsAreResidentOnce) {
  if (StatusKb("RssFile") < 0) GTEST_SKIP() << "no /proc/self/status RssFile";
  constexpr int kTensors = 8;
  constexpr int64_t kRows = 2048, kCols = 2048;  // 16 MiB fp32 each, 128 MiB in all
  const std::string path = JoinPath(TestDir(), "big.safetensors");
  {
    std::map<std::string, at::Tensor> tensors;
    for (int i = 0; i < kTensors; ++i) tensors[absl::StrCat("w", i)] = at::full({kRows, kCols}, 1.0f + i);
    ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  }
  const double weights_kb = kTensors * kRows * kCols * 4 / 1024.0;
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const int64_t rss0 = StatusKb("VmRSS"), file0 = StatusKb("RssFile");
  std::vector<at::Tensor> kept;
  for (int i = 0; i < kTensors; ++i) {
    auto t = (*f)->Load(absl::StrCat("w", i));
    ASSERT_TRUE(t.ok()) << t.status();
    kept.push_back(*t);
  }
  const int64_t rss1 = StatusKb("VmRSS"), file1 = StatusKb("RssFile");
  EXPECT_LT(static_cast<double>(file1 - file0), 0.25 * weights_kb) << "mapped file pages stayed resident";
  EXPECT_LT(static_cast<double>(rss1 - rss0), 1.3 * weights_kb) << "weights resident more than once";
  for (int i = 0; i < kTensors; ++i) EXPECT_EQ(kept[i][kRows - 1][kCols - 1].item<float>(), 1.0f + i);
}

}  // namespace
}  // namespace baton
