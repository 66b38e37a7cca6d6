// Text inputs: a UTF-8 text file tokenized with a model folder's own tokenizer, for the tools
// that take token ids (tl-verify --text, beside --tokens; gptq-quantize --calib-text). The whole
// file is one text; EOS is never appended. The e2e tier then cuts its windows from that one
// stream, as llama.cpp's perplexity does with `-f file.txt`. Which file tokenizes it:
//
//   tokenizer.model  when the folder has one (Llama 1 / 2, Mistral, TinyLlama: SentencePiece;
//                    their folders often hold a tokenizer.json too, a SentencePiece-style BPE,
//                    which is then not read): libsentencepiece encodes the text as HF's
//                    LlamaTokenizer (legacy) does; the model's BOS id is prepended once when
//                    tokenizer_config.json's add_bos_token is true or absent (LlamaTokenizer's
//                    default).
//   tokenizer.json   otherwise (byte-level BPE: Llama 3, Qwen2 / 2.5 / 3, GPT-2, SmolLM): read by
//                    text/bpe_tokenizer.h, ids as HF `tokenizers` gives them for
//                    Tokenizer.from_file(...).encode(text): added (special) tokens written in
//                    the text become their ids; the BOS rule is the file's own post_processor
//                    (Llama 3's TemplateProcessing prepends <|begin_of_text|>; Qwen2 and GPT-2
//                    prepend nothing); tokenizer_config.json is not read. A template that appends
//                    after the text (an EOS) is refused, as is anything bpe_tokenizer.h does not
//                    support, by name.
// Bad input is tl::Error naming the file: not UTF-8 (the byte offset), empty, an id outside the
// model's vocabulary, a folder without a tokenizer, a build without SentencePiece (for
// tokenizer.model) or without PCRE2 (for tokenizer.json).
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

// Empty when this build tokenizes text with a tokenizer.model (SentencePiece), else why not.
std::string text_tokenizer_unavailable_reason();
// Empty when this build tokenizes text with a tokenizer.json (byte-level BPE), else why not.
std::string tokenizer_json_unavailable_reason();
TextTokens tokenize_text_file(const std::string& text_path, const std::string& tokenizer_dir, int64_t vocab);

}  // namespace tl
