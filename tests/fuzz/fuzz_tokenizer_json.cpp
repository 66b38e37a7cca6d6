// Text tokenization with a model folder's tokenizer.json (text/text_tokens.h ->
// text/bpe_tokenizer.h): an archive of files (tokenizer.json, text.txt) as the folder and the
// text; the text is tokenized as tl-verify --text does. The tokenizer.json is untrusted input
// like any other: its regexes run in PCRE2 (bounded by PCRE2's match limit), its vocabulary and
// merges feed the BPE loop.
#include "fuzz_util.h"
#include "text/text_tokens.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tl::fuzz::Files files = tl::fuzz::unpack_files(data, size);
  std::string text = "tokenize me";
  for (auto it = files.begin(); it != files.end(); ++it)
    if (it->first == "text.txt") {
      text = it->second;
      files.erase(it);
      break;
    }
  const std::string dir = tl::fuzz::write_folder("tok", files);
  const std::string text_path =
      tl::fuzz::write_input("text.txt", reinterpret_cast<const uint8_t*>(text.data()), text.size());
  tl::fuzz::refuse_or_read([&] { (void)tl::tokenize_text_file(text_path, dir, int64_t(1) << 24); });
  return 0;
}
