// `baton tokenize`: token ids of strings with a tokenizer.json, as Hugging Face tokenizers'
// encode(text, add_special_tokens=False).ids, for the tokenizer referee (tests/upstream/test_tokenizer.py).
#pragma once

#include "client/commands.h"

namespace baton {

Command TokenizeCommand();

}  // namespace baton
