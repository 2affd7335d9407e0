#include "core/text/tiny_tokenizer.h"

#include <map>
#include <nlohmann/json.hpp>

#include "core/text/tokenizer.h"
#include "core/util/files.h"

namespace baton {
namespace {

// Tekken's first special tokens, at their ids in Mistral-Small-3.1's tokenizer.json.
constexpr const char* kSpecialTokens[] = {
    "<unk>",
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CALLS]",
    "[IMG]",
    "<pad>",
    "[IMG_BREAK]",
    "[IMG_END]",
    "[PREFIX]",
    "[MIDDLE]",
    "[SUFFIX]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
};
constexpr int kNumSpecial = sizeof(kSpecialTokens) / sizeof(kSpecialTokens[0]);

// Written for this project; plain descriptive English like training captions and prompts.
constexpr const char kCorpus[] = R"corpus(
You are an assistant that describes images. You give clear answers that focus on the objects in
the picture, how they relate to each other, their colors and materials, and what is happening,
without guessing about things that cannot be seen.
A photo of a red apple on a wooden table next to a glass of water.
A small dog with brown fur sitting on the grass in a sunny park.
A portrait of a woman with long black hair, smiling, in soft window light.
A close-up photo of a cat sleeping on a blue blanket.
An old stone bridge over a quiet river at sunset, with trees on both sides.
A city street at night with wet pavement reflecting the lights of the shops.
A bowl of fresh fruit: oranges, bananas, grapes and a green pear.
A man in a grey coat walking through the snow with a black umbrella.
A red square on a white background. A blue circle on a black background.
A green triangle above a yellow line. A simple pattern of colored stripes.
A watercolor painting of mountains and a lake under a cloudy sky.
A drawing of a house with a red roof, two windows and a door.
The image shows a bicycle leaning against a brick wall near a wooden door.
The picture is bright and sharp, taken in the morning with natural light.
Two children are playing with a ball on the beach while the waves come in.
A cup of coffee and a book on a table by the window on a rainy day.
The camera is close to the subject, and the background is soft and out of focus.
In the style of an oil painting, a field of flowers under a wide blue sky.
A black and white photograph of a street market with many people.
A bird with bright feathers standing on a branch in the forest.
The light comes from the left side and makes long shadows on the ground.
A modern kitchen with white cabinets, a steel sink and plants on the shelf.
A tall building made of glass and metal against a clear evening sky.
This is a test of the tokenizer. It should handle numbers like 1, 2, 3, 42 and 2026,
punctuation such as commas, periods, question marks? and exclamation marks!
It's a photo, isn't it? They're here, we've seen it, I'll check, you'd know, I'm sure.
Colors: red, orange, yellow, green, blue, purple, pink, brown, black, white and grey.
Shapes: square, circle, triangle, rectangle, line, dot, star and heart.
Materials: wood, stone, glass, metal, paper, cloth, water, sand and snow.
There is a person on the left, a tree in the center and a car on the right of the image.
The scene is calm and quiet, with warm colors and a soft, even light.
)corpus";

using OrderedJson = nlohmann::ordered_json;

}  // namespace

absl::string_view TinyBpeCorpus() { return kCorpus; }

std::vector<std::pair<std::string, std::string>> TrainByteLevelBpe(const std::vector<std::string>& texts,
                                                                   SplitPattern pattern, int num_merges) {
  std::map<std::string, int64_t> piece_counts;  // ordered: deterministic iteration
  for (const std::string& text : texts) {
    for (absl::string_view piece : SplitText(text, pattern)) ++piece_counts[std::string(piece)];
  }
  std::vector<std::string> token_bytes;
  std::map<std::string, int> token_ids;
  for (int b = 0; b < 256; ++b) {
    token_bytes.emplace_back(1, static_cast<char>(b));
    token_ids[token_bytes.back()] = b;
  }
  struct Word {
    std::vector<int> symbols;
    int64_t count;
  };
  std::vector<Word> words;
  for (const auto& [piece, count] : piece_counts) {
    Word w{{}, count};
    for (unsigned char c : piece) w.symbols.push_back(c);
    words.push_back(std::move(w));
  }

  std::vector<std::pair<std::string, std::string>> merges;
  while (static_cast<int>(merges.size()) < num_merges) {
    std::map<std::pair<int, int>, int64_t> pair_counts;
    for (const Word& w : words) {
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i) {
        pair_counts[{w.symbols[i], w.symbols[i + 1]}] += w.count;
      }
    }
    if (pair_counts.empty()) break;
    auto best = pair_counts.begin();
    for (auto it = pair_counts.begin(); it != pair_counts.end(); ++it) {
      if (it->second > best->second) best = it;  // strict: the smallest pair wins ties
    }
    auto [left, right] = best->first;
    std::string merged = token_bytes[left] + token_bytes[right];
    auto found = token_ids.find(merged);
    int new_id;
    if (found != token_ids.end()) {
      new_id = found->second;
    } else {
      new_id = static_cast<int>(token_bytes.size());
      token_bytes.push_back(merged);
      token_ids[merged] = new_id;
    }
    merges.emplace_back(token_bytes[left], token_bytes[right]);
    for (Word& w : words) {
      std::vector<int> out;
      out.reserve(w.symbols.size());
      for (size_t i = 0; i < w.symbols.size(); ++i) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == left && w.symbols[i + 1] == right) {
          out.push_back(new_id);
          ++i;
        } else {
          out.push_back(w.symbols[i]);
        }
      }
      w.symbols = std::move(out);
    }
  }
  return merges;
}

TinyTokenizerJson BuildTinyBpeTokenizerJson() {
  auto merges = TrainByteLevelBpe({std::string(kCorpus)}, SplitPattern::kTekken, kTinyBpeNumMerges);

  OrderedJson vocab = OrderedJson::object();
  int64_t next_id = 0;
  for (const char* s : kSpecialTokens) vocab[s] = next_id++;
  for (int b = 0; b < 256; ++b) vocab[ByteLevelEncode(std::string(1, static_cast<char>(b)))] = next_id++;
  OrderedJson merge_list = OrderedJson::array();
  for (const auto& [left, right] : merges) {
    std::string l = ByteLevelEncode(left), r = ByteLevelEncode(right);
    std::string merged = l + r;
    if (!vocab.contains(merged)) vocab[merged] = next_id++;
    merge_list.push_back(OrderedJson::array({l, r}));
  }

  OrderedJson added = OrderedJson::array();
  for (int i = 0; i < kNumSpecial; ++i) {
    added.push_back({{"id", i},
                     {"content", kSpecialTokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  OrderedJson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       OrderedJson::array(
           {{{"type", "Split"},
             {"pattern", {{"Regex", SplitPatternRegex(SplitPattern::kTekken)}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}};
  j["post_processor"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", true},
                {"vocab", vocab},
                {"merges", merge_list}};
  return {j.dump(2) + "\n", next_id};
}

absl::Status WriteTinyBpeTokenizerJson(const std::string& path) {
  return WriteFileAtomic(path, BuildTinyBpeTokenizerJson().json);
}

// Mistral-Small-3.1's chat template trimmed to system + user text (what Flux2Pipeline renders), so that
// transformers' apply_chat_template on this folder gives RenderFlux2Prompt's text.
constexpr const char kMistralChatTemplate[] =
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- if messages[0]['content'] is string %}{%- set system_message = messages[0]['content'] %}"
    "{%- else %}{%- set system_message = messages[0]['content'][0]['text'] %}{%- endif %}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set system_message = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}"
    "{%- for message in loop_messages %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if message['content'] is string %}{{- '[INST]' + message['content'] + '[/INST]' }}"
    "{%- else %}{{- '[INST]' }}{%- for block in message['content'] %}"
    "{%- if block['type'] == 'text' %}{{- block['text'] }}{%- else %}{{- '[IMG]' }}{%- endif %}"
    "{%- endfor %}{{- '[/INST]' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant' %}{{- message['content'] + eos_token }}{%- endif %}"
    "{%- endfor %}";

std::string TinyTokenizerConfigJson() {
  // padding_side "left" as Mistral-Small-3.1's LlamaTokenizerFast: PreTrainedTokenizerFast would pad right.
  OrderedJson j = {{"bos_token", "<s>"},
                   {"eos_token", "</s>"},
                   {"pad_token", "<pad>"},
                   {"unk_token", "<unk>"},
                   {"add_bos_token", false},
                   {"add_eos_token", false},
                   {"model_max_length", 131072},
                   {"padding_side", "left"},
                   {"chat_template", kMistralChatTemplate},
                   {"tokenizer_class", "PreTrainedTokenizerFast"}};
  return j.dump(2) + "\n";
}

}  // namespace baton
