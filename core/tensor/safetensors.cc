#include "core/tensor/safetensors.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/tensor/shape.h"
#include "core/tensor/torch_call.h"
#include "core/util/files.h"
#include "core/util/status.h"

// Tensor bytes are copied verbatim; the format is little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace baton {
namespace {

// Same cap as the Rust reference: a header larger than this is an attack or a corrupt file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Real headers nest 3 deep; nlohmann's parser recurses, so bound depth before handing it the bytes.
constexpr int kMaxJsonDepth = 32;
constexpr const char* kMetadataKey = "__metadata__";

struct DtypeInfo {
  const char* code;
  at::ScalarType type;
  uint64_t itemsize;
};

constexpr DtypeInfo kDtypes[] = {
    {"F64", at::kDouble, 8},
    {"F32", at::kFloat, 4},
    {"F16", at::kHalf, 2},
    {"BF16", at::kBFloat16, 2},
    {"I64", at::kLong, 8},
    {"I32", at::kInt, 4},
    {"I16", at::kShort, 2},
    {"I8", at::kChar, 1},
    {"U8", at::kByte, 1},
    {"BOOL", at::kBool, 1},
    // 8-bit floats (quantized frozen weights; core/quant/stored_quant.h).
    {"F8_E4M3", at::kFloat8_e4m3fn, 1},
    {"F8_E5M2", at::kFloat8_e5m2, 1},
};

const DtypeInfo* FindDtype(const std::string& code) {
  for (const auto& d : kDtypes) {
    if (code == d.code) return &d;
  }
  return nullptr;
}

// Product of dims × itemsize; false on uint64 overflow.
bool ByteSize(const std::vector<int64_t>& shape, uint64_t itemsize, uint64_t* out) {
  uint64_t n = itemsize;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

// Scans JSON text for bracket nesting deeper than kMaxJsonDepth (ignoring brackets inside strings).
bool NestingTooDeep(const char* p, size_t n) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = p[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) return true;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return false;
}

absl::Status Invalid(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// Parses one header entry; `where` is "<path>: tensor '<key>'" for messages.
absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& where, const nlohmann::json& j, uint64_t data_size) {
  auto fail = [&](const std::string& what) { return absl::InvalidArgumentError(absl::StrCat(where, ": ", what)); };
  if (!j.is_object()) return fail(absl::StrCat("entry is not a JSON object but ", j.type_name()));
  SafetensorsEntry e;

  auto dtype = j.find("dtype");
  if (dtype == j.end() || !dtype->is_string()) return fail("missing or non-string 'dtype'");
  e.dtype = dtype->get<std::string>();
  const DtypeInfo* info = FindDtype(e.dtype);
  if (info == nullptr) {
    return fail(absl::StrCat("unsupported dtype '", e.dtype,
                             "' (known: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3 F8_E5M2)"));
  }

  auto shape = j.find("shape");
  if (shape == j.end() || !shape->is_array()) return fail("missing or non-array 'shape'");
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return fail(absl::StrCat("shape ", shape->dump(), " has an entry that is not a non-negative integer"));
    }
    e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }

  auto offsets = j.find("data_offsets");
  if (offsets == j.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned()) {
    return fail(absl::StrCat("'data_offsets' must be [begin, end] of non-negative integers, got ",
                             offsets == j.end() ? "nothing" : offsets->dump()));
  }
  e.begin = (*offsets)[0].get<uint64_t>();
  e.end = (*offsets)[1].get<uint64_t>();
  const std::string range = absl::StrCat("data_offsets [", e.begin, ", ", e.end, "]");
  if (e.begin > e.end) return fail(absl::StrCat(range, ": begin > end"));
  if (e.end > data_size) {
    return fail(
        absl::StrCat(range, " exceed the ", data_size, "-byte data section (file truncated or offsets corrupt)"));
  }
  uint64_t need = 0;
  if (!ByteSize(e.shape, info->itemsize, &need)) {
    return fail(absl::StrCat(e.dtype, " ", ShapeString(e.shape), " overflows 64-bit byte size"));
  }
  if (e.end - e.begin != need) {
    return fail(absl::StrCat(range, " hold ", e.end - e.begin, " bytes but ", e.dtype, " ", ShapeString(e.shape),
                             " needs ", need));
  }
  return e;
}

absl::Status ParseMetadata(const std::string& path, const nlohmann::json& j, std::map<std::string, std::string>* out) {
  if (!j.is_object()) return Invalid(path, absl::StrCat("'__metadata__' is not an object but ", j.type_name()));
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string()) {
      return Invalid(
          path, absl::StrCat("'__metadata__' key '", k, "' has a ", v.type_name(), " value; only strings are allowed"));
    }
    (*out)[k] = v.get<std::string>();
  }
  return absl::OkStatus();
}

// Entries may leave gaps but must not share bytes. Zero-byte entries overlap nothing.
absl::Status CheckNoOverlap(const std::string& path, const std::map<std::string, SafetensorsEntry>& entries) {
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> sorted;
  for (const auto& [k, e] : entries) {
    if (e.end > e.begin) sorted.emplace_back(&k, &e);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    const auto& [pk, p] = sorted[i - 1];
    const auto& [ck, c] = sorted[i];
    if (c->begin < p->end) {
      return Invalid(path, absl::StrCat("tensors '", *pk, "' [", p->begin, ", ", p->end, "] and '", *ck, "' [",
                                        c->begin, ", ", c->end, "] overlap"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<at::ScalarType> SafetensorsDtypeToTorch(const std::string& code) {
  const DtypeInfo* info = FindDtype(code);
  if (info == nullptr) return absl::InvalidArgumentError(absl::StrCat("unsupported safetensors dtype '", code, "'"));
  return info->type;
}

absl::StatusOr<std::string> TorchDtypeToSafetensors(at::ScalarType dtype) {
  for (const auto& d : kDtypes) {
    if (d.type == dtype) return std::string(d.code);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("torch dtype ", c10::toString(dtype), " has no supported safetensors code"));
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0) {
    const int err = errno;
    std::string msg = absl::StrCat("cannot open ", path, ": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::InternalError(msg);
  }
  struct stat st;
  if (::fstat(f->fd_, &st) != 0) {
    return absl::InternalError(absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return Invalid(path, "not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    return Invalid(path,
                   absl::StrCat("file is ", file_size, " bytes, too small for the 8-byte header length (truncated?)"));
  }
  f->map_ = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, f->fd_, 0);
  if (f->map_ == MAP_FAILED) {
    f->map_ = nullptr;
    return absl::InternalError(absl::StrCat("cannot mmap ", path, ": ", std::strerror(errno)));
  }
  f->map_size_ = file_size;
  const uint8_t* base = static_cast<const uint8_t*>(f->map_);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];
  if (header_len > kMaxHeaderBytes) {
    return Invalid(path, absl::StrCat("header length ", header_len, " exceeds the ", kMaxHeaderBytes,
                                      "-byte limit (not a safetensors file?)"));
  }
  if (header_len > file_size - 8) {
    return Invalid(path, absl::StrCat("header length ", header_len, " but only ", file_size - 8,
                                      " bytes follow the length field (file truncated?)"));
  }
  const char* header = reinterpret_cast<const char*>(base + 8);
  f->data_ = base + 8 + header_len;
  f->data_size_ = file_size - 8 - header_len;

  if (NestingTooDeep(header, header_len)) {
    return Invalid(path, absl::StrCat("header JSON nests deeper than ", kMaxJsonDepth, " levels"));
  }
  nlohmann::json j = nlohmann::json::parse(header, header + header_len, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Invalid(path, absl::StrCat("header (", header_len, " bytes) is not valid JSON"));
  if (!j.is_object()) return Invalid(path, absl::StrCat("header is JSON ", j.type_name(), ", not an object"));

  for (const auto& [key, value] : j.items()) {
    if (key == kMetadataKey) {
      RETURN_IF_ERROR(ParseMetadata(path, value, &f->metadata_));
      continue;
    }
    ASSIGN_OR_RETURN(SafetensorsEntry e, ParseEntry(absl::StrCat(path, ": tensor '", key, "'"), value, f->data_size_));
    f->entries_.emplace(key, std::move(e));
  }
  RETURN_IF_ERROR(CheckNoOverlap(path, f->entries_));
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  if (fd_ >= 0) ::close(fd_);
}

std::vector<std::string> SafetensorsFile::Keys() const {
  std::vector<std::string> keys;
  keys.reserve(entries_.size());
  for (const auto& [k, e] : entries_) keys.push_back(k);
  return keys;
}

absl::StatusOr<SafetensorsEntry> SafetensorsFile::Entry(const std::string& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor '", key, "' (file has ", entries_.size(), " tensors)"));
  }
  return it->second;
}

absl::StatusOr<at::Tensor> SafetensorsFile::Load(const std::string& key, at::ScalarType dtype) const {
  ASSIGN_OR_RETURN(SafetensorsEntry e, Entry(key));
  // Validated in Open: dtype is known and end - begin == numel × itemsize.
  const at::ScalarType stored = FindDtype(e.dtype)->type;
  const uint64_t nbytes = e.end - e.begin;
  const uint8_t* src = data_ + e.begin;
  StartReadahead(src, nbytes);
  at::Tensor out;
  RETURN_IF_ERROR(Annotate(TorchCall("load",
                                     [&] {
                                       out = at::empty(e.shape, at::TensorOptions().dtype(stored));
                                       if (nbytes > 0) std::memcpy(out.data_ptr(), src, nbytes);
                                       if (dtype != at::ScalarType::Undefined && dtype != stored) out = out.to(dtype);
                                     }),
                           absl::StrCat(path_, ": tensor '", key, "'")));
  ReleaseMappedPages(src, nbytes);
  return out;
}

absl::StatusOr<at::Tensor> SafetensorsFile::View(const std::shared_ptr<const SafetensorsFile>& file,
                                                 const std::string& key) {
  ASSIGN_OR_RETURN(SafetensorsEntry e, file->Entry(key));
  const at::ScalarType stored = FindDtype(e.dtype)->type;
  const uint64_t nbytes = e.end - e.begin;
  const uint8_t* src = file->data_ + e.begin;
  if (nbytes == 0 || reinterpret_cast<uintptr_t>(src) % c10::elementSize(stored) != 0) return file->Load(key);
  StartReadahead(src, nbytes);
  at::Tensor out;
  RETURN_IF_ERROR(Annotate(TorchCall("view",
                                     [&] {
                                       out = at::from_blob(
                                           const_cast<uint8_t*>(src), e.shape,
                                           [file, src, nbytes](void*) { ReleaseMappedPages(src, nbytes); },
                                           at::TensorOptions().dtype(stored));
                                     }),
                           absl::StrCat(file->path_, ": tensor '", key, "'")));
  return out;
}

void SafetensorsFile::StartReadahead(const uint8_t* src, uint64_t nbytes) {
  if (nbytes == 0) return;
  // Exactly this tensor's pages; madvise needs a page-aligned start.
  static const uintptr_t kPage = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(src) & ~(kPage - 1);
  ::madvise(reinterpret_cast<void*>(lo), reinterpret_cast<uintptr_t>(src) + nbytes - lo, MADV_WILLNEED);
}

void SafetensorsFile::ReleaseMappedPages(const uint8_t* src, uint64_t nbytes) {
  if (nbytes == 0) return;
  // The copy above is what the caller keeps; the mapping's pages of this tensor would otherwise stay
  // resident in this process too, holding the weights twice (a stage's RSS was anonymous copy + file
  // pages). MADV_DONTNEED on a read-only private file mapping only unmaps them from this process: the
  // file's pages stay in the page cache (shared, reclaimable) and a later read faults them back in, so
  // it is safe for the partial pages shared with neighbouring tensors or the header too.
  static const uintptr_t kPage = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(src) & ~(kPage - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(src) + nbytes + kPage - 1) & ~(kPage - 1);
  ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

absl::StatusOr<SafetensorsLayout> LayOutSafetensors(const std::map<std::string, at::Tensor>& tensors,
                                                    const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps insertion order: __metadata__ first, then tensors in key order, fields as
  // dtype/shape/data_offsets — the layout the Rust reference writes.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header[kMetadataKey] = std::move(m);
  }
  std::vector<at::Tensor> cpu;
  cpu.reserve(tensors.size());
  uint64_t offset = 0;
  for (const auto& [key, t] : tensors) {
    if (key == kMetadataKey) {
      return absl::InvalidArgumentError("tensor key '__metadata__' is reserved by the safetensors format");
    }
    if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat("tensor '", key, "' is undefined"));
    auto code = TorchDtypeToSafetensors(t.scalar_type());
    if (!code.ok()) return Annotate(code.status(), absl::StrCat("tensor '", key, "'"));
    at::Tensor c;
    RETURN_IF_ERROR(Annotate(TorchCall("to cpu", [&, &t = t] { c = t.detach().to(at::kCPU).contiguous(); }),
                             absl::StrCat("tensor '", key, "'")));
    const uint64_t nbytes = static_cast<uint64_t>(c.numel()) * c.element_size();
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = *code;
    entry["shape"] = c.sizes().vec();
    entry["data_offsets"] = {offset, offset + nbytes};
    header[key] = std::move(entry);
    offset += nbytes;
    cpu.push_back(std::move(c));
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const std::exception& e) {
    // Only failure mode: a key or metadata string that is not valid UTF-8.
    return absl::InvalidArgumentError(absl::StrCat("cannot encode safetensors header: ", e.what()));
  }
  json.append((8 - json.size() % 8) % 8, ' ');
  SafetensorsLayout layout;
  layout.head.reserve(8 + json.size());
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) layout.head.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  layout.head += json;
  layout.data = std::move(cpu);
  layout.data_bytes = offset;
  return layout;
}

absl::StatusOr<std::string> SerializeSafetensors(const std::map<std::string, at::Tensor>& tensors,
                                                 const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(SafetensorsLayout layout, LayOutSafetensors(tensors, metadata));
  std::string out;
  out.reserve(layout.head.size() + layout.data_bytes);
  out += layout.head;
  for (const at::Tensor& c : layout.data) {
    const size_t nbytes = static_cast<size_t>(c.numel()) * c.element_size();
    if (nbytes > 0) out.append(static_cast<const char*>(c.data_ptr()), nbytes);
  }
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(std::string bytes, SerializeSafetensors(tensors, metadata));
  return Annotate(WriteFileAtomic(path, bytes), "writing safetensors");
}

absl::StatusOr<std::map<std::string, at::Tensor>> LoadAllSafetensors(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::Open(path));
  std::map<std::string, at::Tensor> out;
  for (const std::string& key : f->Keys()) {
    ASSIGN_OR_RETURN(at::Tensor t, f->Load(key));
    out.emplace(key, std::move(t));
  }
  return out;
}

absl::Status WriteShardedSafetensors(const std::string& dir, const std::string& stem,
                                     const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                     const std::map<std::string, std::string>& metadata, int64_t max_shard_bytes) {
  if (max_shard_bytes <= 0) {
    std::map<std::string, at::Tensor> all(tensors.begin(), tensors.end());
    return WriteSafetensors(JoinPath(dir, stem + ".safetensors"), all, metadata);
  }
  std::vector<std::map<std::string, at::Tensor>> shards(1);
  int64_t bytes = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t n = t.numel() * static_cast<int64_t>(t.element_size());
    if (bytes > 0 && bytes + n > max_shard_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back()[name] = t;
    bytes += n;
    total += n;
  }
  nlohmann::ordered_json index;
  index["metadata"]["total_size"] = total;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = absl::StrFormat("%s-%05d-of-%05d.safetensors", stem, i + 1, shards.size());
    RETURN_IF_ERROR(WriteSafetensors(JoinPath(dir, file), shards[i], metadata));
    for (const auto& [name, t] : shards[i]) index["weight_map"][name] = file;
  }
  return WriteFileAtomic(JoinPath(dir, stem + ".safetensors.index.json"), index.dump(2));
}

absl::StatusOr<std::map<std::string, std::string>> ReadSafetensorsIndex(const std::string& dir,
                                                                        const std::string& stem) {
  const std::string index_path = JoinPath(dir, stem + ".safetensors.index.json");
  ASSIGN_OR_RETURN(std::string text, ReadFileBounded(index_path, uint64_t{64} << 20));
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": not a JSON object with a weight_map"));
  }
  std::map<std::string, std::string> out;
  for (auto& [key, file] : j["weight_map"].items()) {
    if (!file.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map['", key, "'] is not a string"));
    }
    const std::string name = file.get<std::string>();
    if (name.empty() || name[0] == '/' || name.find("..") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": shard name '", name, "' for '", key, "' leaves the folder"));
    }
    out[key] = JoinPath(dir, name);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> SafetensorsShardPaths(const std::string& dir, const std::string& stem) {
  const std::string index = stem + ".safetensors.index.json", single = stem + ".safetensors";
  if (PathExists(JoinPath(dir, index))) {
    ASSIGN_OR_RETURN(auto weight_map, ReadSafetensorsIndex(dir, stem));
    std::set<std::string> files;
    for (const auto& [key, path] : weight_map) files.insert(path);
    return std::vector<std::string>(files.begin(), files.end());
  }
  if (PathExists(JoinPath(dir, single))) return std::vector<std::string>{JoinPath(dir, single)};
  return absl::NotFoundError(absl::StrCat(dir, ": neither ", single, " nor ", index, " found"));
}

}  // namespace baton
