#include "core/text/wan_prompt.h"

#include <absl/strings/str_cat.h>

#include "core/tensor/torch_call.h"
#include "core/text/html_unescape.h"
#include "core/text/utf8.h"
#include "core/util/status.h"

namespace baton {
namespace {

// The regex module's \s on str: Unicode White_Space.
bool IsRegexSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Python's str.isspace (what str.strip() removes): White_Space plus the separators U+001C..U+001F.
bool IsPythonSpace(uint32_t cp) { return IsRegexSpace(cp) || (cp >= 0x1C && cp <= 0x1F); }

std::string PythonStrip(absl::string_view s) {
  size_t begin = 0, end = s.size();
  while (begin < end) {
    const Utf8Step step = DecodeUtf8At(s, begin);
    if (!step.valid || !IsPythonSpace(step.cp)) break;
    begin += step.length;
  }
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    const Utf8Step step = DecodeUtf8At(s, start);
    if (!step.valid || start + step.length != end || !IsPythonSpace(step.cp)) break;
    end = start;
  }
  return std::string(s.substr(begin, end - begin));
}

}  // namespace

std::string WanPromptClean(absl::string_view prompt) {
  const std::string basic = PythonStrip(HtmlUnescape(HtmlUnescape(prompt)));  // basic_clean without ftfy
  std::string collapsed;
  bool in_space = false;
  for (size_t i = 0; i < basic.size();) {
    const Utf8Step step = DecodeUtf8At(basic, i);
    if (step.valid && IsRegexSpace(step.cp)) {
      if (!in_space) collapsed.push_back(' ');
      in_space = true;
    } else {
      collapsed.append(basic, i, step.length);
      in_space = false;
    }
    i += step.length;
  }
  return PythonStrip(collapsed);
}

absl::StatusOr<WanPromptIds> BuildWanPromptIds(const UnigramTokenizer& tok, absl::string_view prompt,
                                               int64_t max_length) {
  const int64_t specials = static_cast<int64_t>(tok.template_prefix().size() + tok.template_suffix().size());
  if (max_length <= specials) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_sequence_length ", max_length, " leaves no room beside ", specials, " special tokens"));
  }
  if (!tok.pad_id().has_value()) {
    return absl::FailedPreconditionError("the tokenizer has no pad token (tokenizer_config.json pad_token)");
  }
  std::vector<int64_t> body = tok.Encode(WanPromptClean(prompt), /*add_special_tokens=*/false);
  if (static_cast<int64_t>(body.size()) > max_length - specials) body.resize(max_length - specials);
  std::vector<int64_t> ids = tok.template_prefix();
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), tok.template_suffix().begin(), tok.template_suffix().end());
  WanPromptIds out;
  out.length = static_cast<int64_t>(ids.size());
  out.input_ids = at::full({1, max_length}, *tok.pad_id(), at::kLong);
  out.attention_mask = at::zeros({1, max_length}, at::kLong);
  auto id_acc = out.input_ids.accessor<int64_t, 2>();
  auto mask_acc = out.attention_mask.accessor<int64_t, 2>();
  for (int64_t i = 0; i < out.length; ++i) {
    id_acc[0][i] = ids[i];
    mask_acc[0][i] = 1;
  }
  return out;
}

absl::StatusOr<at::Tensor> EncodeWanPrompt(Umt5Encoder& encoder, const WanPromptIds& ids) {
  const int64_t max_length = ids.input_ids.size(1);
  ASSIGN_OR_RETURN(at::Tensor real, encoder.Encode(ids.input_ids.narrow(1, 0, ids.length), at::Tensor()));
  at::Tensor out;
  RETURN_IF_ERROR(TorchCall("Wan prompt padding", [&] {
    out = at::zeros({1, max_length, real.size(2)}, real.options());
    out.narrow(1, 0, ids.length).copy_(real);
  }));
  return out;
}

}  // namespace baton
