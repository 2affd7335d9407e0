#include "core/text/pre_tokenizer.h"

#include <absl/strings/str_cat.h>

#include <cstdint>

#include "core/text/unicode_class.h"
#include "core/text/utf8.h"

namespace baton {
namespace {

constexpr size_t kNoMatch = static_cast<size_t>(-1);

constexpr const char kTekkenRegex[] =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char kQwen2Regex[] =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char kLlama3Regex[] =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char kGpt2Regex[] = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";

struct CodePoint {
  uint32_t cp;
  uint32_t begin;  // byte offset in the text
  CharClass cls;
};

// Strict UTF-8 decoding; an invalid or truncated sequence yields one U+FFFD (class kOther) per byte.
std::vector<CodePoint> DecodeUtf8(absl::string_view text) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Step step = DecodeUtf8At(text, i);
    const uint32_t cp = step.valid ? step.cp : 0xFFFD;
    out.push_back({cp, static_cast<uint32_t>(i), ClassifyCodePoint(cp)});
    i += step.length;
  }
  return out;
}

// Matching over decoded code points. Each Match* returns the end index of the match starting at
// `i`, or kNoMatch. The comments give the regex fragment and why the code equals its first match
// under backtracking.
class Matcher {
 public:
  explicit Matcher(const std::vector<CodePoint>& c) : c_(c), n_(c.size()) {}

  size_t Match(SplitPattern p, size_t i) const {
    size_t e;
    switch (p) {
      case SplitPattern::kTekken:
        if ((e = OptPrefix(i, &Matcher::UpperStarLowerPlus)) != kNoMatch) return e;
        if ((e = OptPrefix(i, &Matcher::UpperPlusLowerStar)) != kNoMatch) return e;
        if ((e = Numbers(i, 1)) != kNoMatch) return e;
        if ((e = Punct(i, /*slash_in_tail=*/true)) != kNoMatch) return e;
        return Whitespace(i, /*newline_alt=*/true);
      case SplitPattern::kQwen2:
      case SplitPattern::kLlama3:
        if ((e = Contraction(i, /*ignore_case=*/true)) != kNoMatch) return e;
        if ((e = OptPrefix(i, &Matcher::Letters)) != kNoMatch) return e;
        if ((e = Numbers(i, p == SplitPattern::kQwen2 ? 1 : 3)) != kNoMatch) return e;
        if ((e = Punct(i, /*slash_in_tail=*/false)) != kNoMatch) return e;
        return Whitespace(i, /*newline_alt=*/true);
      case SplitPattern::kGpt2:
        if ((e = Contraction(i, /*ignore_case=*/false)) != kNoMatch) return e;
        if ((e = OptSpace(i, &Matcher::Letters)) != kNoMatch) return e;
        if ((e = OptSpace(i, &Matcher::NumberRun)) != kNoMatch) return e;
        if ((e = OptSpace(i, &Matcher::PunctRun)) != kNoMatch) return e;
        return Whitespace(i, /*newline_alt=*/false);
    }
    return kNoMatch;
  }

 private:
  using Sub = size_t (Matcher::*)(size_t) const;

  CharClass Cls(size_t i) const { return c_[i].cls; }
  bool IsNewline(size_t i) const { return i < n_ && (c_[i].cp == '\r' || c_[i].cp == '\n'); }
  bool IsLetter(size_t i) const { return i < n_ && IsLetterClass(Cls(i)); }
  bool IsNumber(size_t i) const { return i < n_ && Cls(i) == CharClass::kNumber; }
  bool IsSpace(size_t i) const { return i < n_ && Cls(i) == CharClass::kSpace; }
  // [^\r\n\p{L}\p{N}]: spaces, marks, punctuation, symbols.
  bool IsPrefix(size_t i) const { return i < n_ && !IsNewline(i) && !IsLetter(i) && !IsNumber(i); }
  // [^\s\p{L}\p{N}]
  bool IsPunct(size_t i) const { return i < n_ && !IsSpace(i) && !IsLetter(i) && !IsNumber(i); }
  // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  bool IsTekkenUpper(size_t i) const {
    if (i >= n_) return false;
    CharClass c = Cls(i);
    return c == CharClass::kUpper || c == CharClass::kOtherLetter || c == CharClass::kMark;
  }
  // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
  bool IsTekkenLower(size_t i) const {
    if (i >= n_) return false;
    CharClass c = Cls(i);
    return c == CharClass::kLower || c == CharClass::kOtherLetter || c == CharClass::kMark;
  }

  template <typename Pred>
  size_t RunEnd(size_t i, Pred pred) const {
    while (pred(i)) ++i;
    return i;
  }

  // X? Y where the greedy optional X is tried first: Y after one prefix char, else Y right here.
  size_t OptPrefix(size_t i, Sub sub) const {
    if (IsPrefix(i)) {
      size_t e = (this->*sub)(i + 1);
      if (e != kNoMatch) return e;
    }
    return (this->*sub)(i);
  }
  // " ?Y": like OptPrefix with a literal U+0020 as the only prefix. Y never starts with a space,
  // so when the space is present only the first branch can succeed.
  size_t OptSpace(size_t i, Sub sub) const {
    if (i < n_ && c_[i].cp == ' ') return (this->*sub)(i + 1);
    return (this->*sub)(i);
  }

  // [U]*[L]+ with U and L overlapping (Lm, Lo, M are in both). Greedy U* takes the whole U run
  // [i, q); backtracking then gives back one char at a time until L+ can start at k, and L+ takes
  // the whole L run from k. The first k tried that works is the regex's match.
  size_t UpperStarLowerPlus(size_t i) const {
    size_t q = RunEnd(i, [this](size_t k) { return IsTekkenUpper(k); });
    for (size_t k = q + 1; k-- > i;) {
      if (IsTekkenLower(k)) return RunEnd(k, [this](size_t j) { return IsTekkenLower(j); });
    }
    return kNoMatch;
  }
  // [U]+[L]*: both greedy and nothing follows, so no backtracking is needed.
  size_t UpperPlusLowerStar(size_t i) const {
    size_t q = RunEnd(i, [this](size_t k) { return IsTekkenUpper(k); });
    if (q == i) return kNoMatch;
    return RunEnd(q, [this](size_t k) { return IsTekkenLower(k); });
  }
  // \p{L}+
  size_t Letters(size_t i) const {
    size_t e = RunEnd(i, [this](size_t k) { return IsLetter(k); });
    return e == i ? kNoMatch : e;
  }
  // \p{N}+
  size_t NumberRun(size_t i) const {
    size_t e = RunEnd(i, [this](size_t k) { return IsNumber(k); });
    return e == i ? kNoMatch : e;
  }
  // [^\s\p{L}\p{N}]+
  size_t PunctRun(size_t i) const {
    size_t e = RunEnd(i, [this](size_t k) { return IsPunct(k); });
    return e == i ? kNoMatch : e;
  }
  // \p{N}{1,max}
  size_t Numbers(size_t i, size_t max) const {
    size_t e = i;
    while (e - i < max && IsNumber(e)) ++e;
    return e == i ? kNoMatch : e;
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n]*" (Tekken: "[\r\n/]*" as the tail).
  size_t Punct(size_t i, bool slash_in_tail) const {
    size_t e = OptSpace(i, &Matcher::PunctRun);
    if (e == kNoMatch) return e;
    while (e < n_ && (IsNewline(e) || (slash_in_tail && c_[e].cp == '/'))) ++e;
    return e;
  }
  // (?i:'s|'t|'re|'ve|'m|'ll|'d) or the case-sensitive GPT-2 form. Under Unicode case folding
  // U+017F (long s) matches 's' too.
  size_t Contraction(size_t i, bool ignore_case) const {
    if (i + 1 >= n_ || c_[i].cp != '\'') return kNoMatch;
    auto lower = [&](size_t k) -> uint32_t {
      if (k >= n_) return 0;
      uint32_t cp = c_[k].cp;
      if (!ignore_case) return cp;
      if (cp >= 'A' && cp <= 'Z') return cp + 32;
      if (cp == 0x17F) return 's';
      return cp;
    };
    uint32_t a = lower(i + 1), b = lower(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return kNoMatch;
  }
  // \s*[\r\n]+ (when newline_alt) | \s+(?!\S) | \s+
  size_t Whitespace(size_t i, bool newline_alt) const {
    size_t q = RunEnd(i, [this](size_t k) { return IsSpace(k); });
    if (q == i) return kNoMatch;
    if (newline_alt) {
      // Greedy \s* backs off until [\r\n]+ can match: that is at the last newline of the run,
      // and [\r\n]+ then ends right after it (the next char is not a newline by choice of k).
      for (size_t k = q; k-- > i;) {
        if (IsNewline(k)) return k + 1;
      }
    }
    // \s+(?!\S): the whole run if it reaches the end of text, else all but the last space (which
    // is then followed by a space, not \S). A single space before \S falls to \s+ below.
    if (q == n_) return q;
    if (q - i >= 2) return q - 1;
    return q;
  }

  const std::vector<CodePoint>& c_;
  size_t n_;
};

}  // namespace

const char* SplitPatternRegex(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kTekken:
      return kTekkenRegex;
    case SplitPattern::kQwen2:
      return kQwen2Regex;
    case SplitPattern::kLlama3:
      return kLlama3Regex;
    case SplitPattern::kGpt2:
      return kGpt2Regex;
  }
  return "";
}

absl::StatusOr<SplitPattern> SplitPatternFromRegex(absl::string_view regex) {
  for (SplitPattern p : {SplitPattern::kTekken, SplitPattern::kQwen2, SplitPattern::kLlama3, SplitPattern::kGpt2}) {
    if (regex == SplitPatternRegex(p)) return p;
  }
  return absl::UnimplementedError(
      absl::StrCat("unsupported pre-tokenizer Split regex (supported: Tekken, Qwen2/3, Llama-3, GPT-2): ", regex));
}

std::vector<absl::string_view> SplitText(absl::string_view text, SplitPattern pattern) {
  std::vector<CodePoint> cps = DecodeUtf8(text);
  Matcher matcher(cps);
  auto offset = [&](size_t k) { return k < cps.size() ? cps[k].begin : text.size(); };
  std::vector<absl::string_view> pieces;
  size_t i = 0;
  size_t gap_begin = kNoMatch;  // unmatched code points become one piece (behavior=Isolated)
  while (i < cps.size()) {
    size_t e = matcher.Match(pattern, i);
    if (e == kNoMatch || e <= i) {
      if (gap_begin == kNoMatch) gap_begin = i;
      ++i;
      continue;
    }
    if (gap_begin != kNoMatch) {
      pieces.push_back(text.substr(offset(gap_begin), offset(i) - offset(gap_begin)));
      gap_begin = kNoMatch;
    }
    pieces.push_back(text.substr(offset(i), offset(e) - offset(i)));
    i = e;
  }
  if (gap_begin != kNoMatch) {
    pieces.push_back(text.substr(offset(gap_begin), text.size() - offset(gap_begin)));
  }
  return pieces;
}

}  // namespace baton
