// Text inputs: a UTF-8 text file tokenized with a model folder's own tokenizer, for the tools
// that take token ids (tl-verify --text, beside --tokens).
//
//   tokenizer.model  SentencePiece (Llama 1 / 2, Mistral, TinyLlama): libsentencepiece encodes the
//                    whole file as one text, as HF's LlamaTokenizer (legacy) does; the model's BOS
//                    id is prepended once when tokenizer_config.json's add_bos_token is true or
//                    absent (LlamaTokenizer's default), EOS is never appended. The e2e tier then
//                    cuts its windows from that one stream, as llama.cpp's perplexity does with
//                    `-f file.txt`.
//   tokenizer.json   alone (byte-level BPE: Llama 3, Qwen2, GPT-2, SmolLM): refused by name, for
//                    now; give token ids (--tokens).
// Bad input is tl::Error naming the file: not UTF-8 (the byte offset), empty, an id outside the
// model's vocabulary, a folder without a tokenizer, a build without SentencePiece.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tl {

struct TextTokens {
  std::vector<int32_t> ids;
  std::string tokenizer;  // the file that tokenized it
  bool bos = false;       // a BOS id was prepended
  int64_t bytes = 0;      // of text
};

// Empty when this build tokenizes text, else why not.
std::string text_tokenizer_unavailable_reason();
TextTokens tokenize_text_file(const std::string& text_path, const std::string& tokenizer_dir, int64_t vocab);

}  // namespace tl
