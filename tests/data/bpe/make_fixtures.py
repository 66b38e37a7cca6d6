#!/usr/bin/env python3
"""Writes the byte-level BPE fixtures of tests/data/bpe (see README.md there).

Four small tokenizer.json files laid out as Llama 3, Qwen2, GPT-2 and SmolLM lay theirs out,
trained by the Python `tokenizers` package on this project's docs as of a pinned commit (so a later
edit of docs/ does not change them), and, for sample.txt and a few short edge texts, the ids that
`tokenizers` gives (`Tokenizer.from_file(path).encode(text).ids`, add_special_tokens left at its
default) in <fixture>/expected_ids.json.

Run from anywhere: python3 tests/data/bpe/make_fixtures.py   (deterministic: a second run
rewrites the same bytes).
"""
import json
import os
import subprocess
import sys

import tokenizers
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
CORPUS_COMMIT = "83a51f36cf8564c6cf20be02b815f8957e2b13db"

# The pre-tokenizer regexes, as the published tokenizer.json files spell them.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# A little non-English text so that merges across multi-byte characters exist.
MULTILINGUAL = """Le café est très bon à Paris ; l'été, la forêt est déjà belle.
Übergrößenträger fahren über die Brücke, schön und groß.
Καλημέρα κόσμε, η γλώσσα είναι ωραία.
Привет, мир! Это тестовый текст на русском языке.
日本語のテキストです。東京は大きい都市です。
中文文本测试。我们测试分词器。
한국어 텍스트입니다.
Emoji: 🙂 👍 🎉 🚀 🙂🙂
São Paulo, Ångström, naïve, façade, jalapeño, crème brûlée.
"""

# sample.txt: accents, precomposed and decomposed (NFC changes the latter), CJK, emoji (with ZWJ,
# skin tone, flags, variation selector), digit runs, whitespace runs, tabs, \r\n, blank lines,
# contractions in both cases (and a long s, which case-folds to s), literal special tokens of each
# fixture mid-text, NEL / no-break / em / ideographic spaces, U+180E (a space to PCRE2's \s, not to
# Oniguruma's), and no newline at the very end.
SAMPLE = (
    "Tinyloop tokenizer check: byte-level BPE, as Llama 3, Qwen2 and GPT-2 encode it.\n"
    "I'll say it: DON'T quantize what you haven't measured. She's here; we've 'quoted' it, they'd, YOU'RE, I'M, "
    "it'Ll, 'ſ.\n"
    "Numbers: 1234567 and 3.14159, 2024-12-04, 1,000,000, x86_64, ٣٤٥ (Arabic-Indic) ２０２４ (fullwidth) ½.\n"
    "Accents: café, naïve, Ångström, façade, Übergrößenträger, São Paulo, crème brûlée.\n"
    "Decomposed (NFC composes these): cafe\u0301, n\u0303, A\u030angstro\u0308m, e\u0301\u0301, "
    "\u1100\u1161\u11a8 (Hangul jamo), \u212b (Angstrom sign), \u2126 (Ohm sign).\n"
    "Greek: Καλημέρα κόσμε. Russian: Привет, мир!\n"
    "CJK: 日本語のテキストです。中文文本测试。한국어 텍스트.\n"
    "Emoji: 🙂 👍🏽 👨\u200d👩\u200d👧 🇫🇷 ✔\ufe0f🚀🚀\n"
    "Tabs:\tone\t\ttwo\t \tthree\n"
    "Spaces:    four,  two,   three.   \n"
    "Windows line\r\nends\r\n\r\nhere.\r\n"
    "Multiple newlines:\n\n\n\nthree blank lines above,     trailing spaces    \n"
    "Specials mid-text: <|end_of_text|> and <|begin_of_text|>x<|im_start|>user\n<|im_end|> and "
    "<|endoftext|>, partial <|end_of_ and <|reserved_special_token_3|><|eot_id|>.\n"
    "Code: if (x != 0) { return a->b[i] * 2; } // done!!! ... ===>\n"
    "URL: https://example.com/path?q=1&r=2#frag  ok\n"
    "  leading spaces line\n"
    "\u00a0no-break\u00a0spaces\u2003em-space\u3000ideographic \u0085NEL\u0085 \u180e (not a space) end"
)


def corpus_lines():
    out = subprocess.run(["git", "-C", ROOT, "ls-tree", "--name-only", CORPUS_COMMIT, "docs/"],
                         check=True, capture_output=True, text=True).stdout.split()
    files = sorted(p for p in out if p.endswith(".md")) + ["README.md"]
    text = ""
    for p in files:
        text += subprocess.run(["git", "-C", ROOT, "show", f"{CORPUS_COMMIT}:{p}"],
                               check=True, capture_output=True, text=True).stdout
    text += MULTILINGUAL * 5
    return text.splitlines(keepends=True)


def train(pre_tokenizer, normalizer, vocab_size, specials=()):
    """vocab (str -> id) and merges [(a, b)] of a byte-level BPE trained with these settings
    (specials: given the first ids)."""
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=list(specials))
    tok.train_from_iterator(corpus_lines(), trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return model["vocab"], merges


def added(content, id_, normalized=False):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": normalized, "special": True}


def bpe_model(vocab, merges, *, ignore_merges, merges_as_arrays, null_affixes):
    return {
        "type": "BPE", "dropout": None, "unk_token": None,
        "continuing_subword_prefix": None if null_affixes else "",
        "end_of_word_suffix": None if null_affixes else "",
        "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
        "vocab": vocab,
        "merges": [list(m) for m in merges] if merges_as_arrays else [f"{a} {b}" for a, b in merges],
    }


def split_regex(regex):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def byte_level(add_prefix_space, trim_offsets, use_regex):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets,
            "use_regex": use_regex}


def bytes_to_unicode():
    """GPT-2's byte -> character table, as a list indexed by byte."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table, n = [], 0
    for b in range(256):
        if b in keep:
            table.append(chr(b))
        else:
            table.append(chr(256 + n))
            n += 1
    return table


BYTE_TO_CHAR = bytes_to_unicode()
IGNORE_MERGES_WORDS = [" measured", " quantize", " tokenizer", " Tinyloop"]


def llama3():
    vocab, merges = train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), None, 1500)
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(4)] + \
        ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"] + \
        [f"<|reserved_special_token_{i}|>" for i in range(5, 11)]
    # A word of the vocabulary that no merge builds (as in vocabularies converted from tiktoken):
    # only ignore_merges emits it whole.
    for word in IGNORE_MERGES_WORDS:
        token = "".join(BYTE_TO_CHAR[b] for b in word.encode("utf-8"))
        if token not in vocab:
            vocab[token] = len(vocab)
            break
    base = len(vocab)
    bos = base
    j = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(s, base + i) for i, s in enumerate(specials)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split_regex(LLAMA3_REGEX),
                                                                byte_level(False, True, False)]},
        "post_processor": {"type": "Sequence", "processors": [
            byte_level(True, False, True),
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                      "tokens": ["<|begin_of_text|>"]}}}]},
        "decoder": byte_level(True, True, True),
        "model": bpe_model(vocab, merges, ignore_merges=True, merges_as_arrays=False, null_affixes=True),
    }
    config = {
        "added_tokens_decoder": {str(base + i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                                 "single_word": False, "special": True}
                                 for i, s in enumerate(specials)},
        "bos_token": "<|begin_of_text|>",
        "clean_up_tokenization_spaces": True,
        "eos_token": "<|end_of_text|>",
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 1000000000000000019884624838656,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    return j, config, ["<|end_of_text|>", "<|begin_of_text|>", "a<|eot_id|>b", "<|reserved_special_token_10|>"]


def qwen2():
    vocab, merges = train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        tokenizers.normalizers.NFC(), 1200)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    base = len(vocab)
    j = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(s, base + i) for i, s in enumerate(specials)],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split_regex(QWEN2_REGEX),
                                                                byte_level(False, False, False)]},
        "post_processor": byte_level(False, False, False),
        "decoder": byte_level(False, False, False),
        "model": bpe_model(vocab, merges, ignore_merges=False, merges_as_arrays=True, null_affixes=False),
    }
    config = {
        "add_prefix_space": False,
        "added_tokens_decoder": {str(base + i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                                 "single_word": False, "special": True}
                                 for i, s in enumerate(specials)},
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    # The last: combining marks newer than the Unicode tables of tokenizers' NFC (Unicode 9), which
    # it leaves in place, and U+11935 U+11930, which it does not compose.
    return j, config, ["<|im_start|>", "<|im_start|>user\nhi<|im_end|>\n", "cafe\u0301 caf\u00e9", "\u212b\u2126",
                       "z\u05ae\u1dfa a\u0301\u1df6\u0316 \U00011935\U00011930 \u0d15\u0d3c\u0d4d\u0301"]


def gpt2():
    vocab, merges = train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), None, 1000)
    base = len(vocab)
    j = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added("<|endoftext|>", base, normalized=True)],
        "normalizer": None,
        "pre_tokenizer": byte_level(False, True, True),
        "post_processor": byte_level(True, False, True),
        "decoder": byte_level(True, True, True),
        "model": bpe_model(vocab, merges, ignore_merges=False, merges_as_arrays=False, null_affixes=False),
    }
    config = {"model_max_length": 1024}
    return j, config, ["<|endoftext|>", "a<|endoftext|>b <|endoftext|>\n"]


def smollm():
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>",
                "<filename>", "<gh_stars>"]
    vocab, merges = train(pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]), None, 1100, specials)
    # A merge that individual digits never meet (so that Digits shows): 1 2 -> 12.
    vocab["12"] = len(vocab)
    merges.append(("1", "2"))
    j = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(s, vocab[s]) for s in specials],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                                byte_level(False, True, True)]},
        "post_processor": byte_level(True, False, True),
        "decoder": byte_level(True, True, True),
        "model": bpe_model(vocab, merges, ignore_merges=False, merges_as_arrays=False, null_affixes=False),
    }
    config = {
        "add_prefix_space": False,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": "<|im_start|>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "model_max_length": 8192,
        "pad_token": "<|im_end|>",
        "tokenizer_class": "GPT2Tokenizer",
        "unk_token": "<|endoftext|>",
        "vocab_size": 49152,
    }
    # Digits split each numeric character, of every script (Rust's char::is_numeric).
    return j, config, ["<|im_start|>", "<filename>a.py<file_sep>", "x1y22z333 \u0663\u0664 \u2167\u00bd \U0001e5f1\U00011de0"]


# Short texts every fixture checks, beside its own.
EDGES = ["a", "\u00e9", "   \n\t ", " hello world", "I'll DON'T we'VE", "1234567", "\r\n\r\n", "x  \n\n y",
         "👨\u200d👩\u200d👧", "\u0085", "<|unknown|>",
         "  \u180e<", "_\U00013460k a\U00010d40 \U0001e5f1x"]


def ignore_merges_word(path):
    """A word of the vocabulary that BPE merges would split (so ignore_merges shows), or None."""
    j = json.load(open(path, encoding="utf-8"))
    j["model"]["ignore_merges"] = False
    off = Tokenizer.from_str(json.dumps(j))
    on = Tokenizer.from_file(path)
    byte_of = {c: b for b, c in enumerate(BYTE_TO_CHAR)}
    for token in sorted(j["model"]["vocab"], key=lambda t: (j["model"]["vocab"][t])):
        try:
            text = bytes(byte_of[c] for c in token).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            continue
        if len(on.pre_tokenizer.pre_tokenize_str(text)) != 1:
            continue
        if on.encode(text).ids[1:] != off.encode(text).ids[1:]:
            return text
    return None


def dump_compact(obj):
    """JSON with one line per top-level key and per edge text (ids on that line)."""
    def one(v):
        return json.dumps(v, ensure_ascii=False)
    lines = []
    for k, v in obj.items():
        if k == "edges":
            lines.append(f'  "edges": [\n' + ",\n".join("    " + one(e) for e in v) + "\n  ]")
        else:
            lines.append(f"  {one(k)}: {one(v)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main():
    with open(os.path.join(HERE, "sample.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(SAMPLE)
    sample = open(os.path.join(HERE, "sample.txt"), "rb").read().decode("utf-8")
    assert sample == SAMPLE
    for name, make in [("llama3", llama3), ("qwen2", qwen2), ("gpt2", gpt2), ("smollm", smollm)]:
        d = os.path.join(HERE, name)
        os.makedirs(d, exist_ok=True)
        j, config, own_edges = make()
        path = os.path.join(d, "tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, indent=1)
            f.write("\n")
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=2)
            f.write("\n")
        tok = Tokenizer.from_file(path)
        edges = EDGES + own_edges
        if name == "llama3":
            word = ignore_merges_word(path)
            if word is None:
                sys.exit("llama3: no vocabulary word that the merges would split: ignore_merges untested")
            edges.append(word)
        expected = {
            "tokenizers_version": tokenizers.__version__,
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "sample": {"file": "sample.txt", "ids": tok.encode(sample).ids},
            "edges": [{"text": t, "ids": tok.encode(t).ids} for t in edges],
        }
        if name == "llama3":
            expected["ignore_merges_word"] = word
        with open(os.path.join(d, "expected_ids.json"), "w", encoding="utf-8") as f:
            f.write(dump_compact(expected))
        print(f"{name}: {expected['vocab_size']} tokens, {len(j['model']['merges'])} merges, "
              f"sample {len(expected['sample']['ids'])} ids, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
