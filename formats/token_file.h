// Token files: the evaluation / calibration token streams that perplexity and calibration read.
//
// Two encodings, chosen by the file name's extension:
//   .u32, .bin   raw little-endian uint32, no header (size must be a multiple of 4)
//   .npy         NumPy format 1.0 / 2.0 / 3.0, a 1-D C-order array of dtype
//                uint16 (<u2), uint32 (<u4), int32 (<i4) or int64 (<i8), little-endian
// Validation is strict: an empty stream, a ragged size, a multi-dimensional or Fortran-order
// array, a big-endian or other dtype, a negative id or an id >= vocab (when vocab > 0) is a
// tl::Error naming the file, the item and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tl {

// Reads every token. vocab > 0 also checks 0 <= id < vocab (reports the first bad index).
std::vector<int32_t> read_token_file(const std::string& path, int64_t vocab = 0);

// Parses an in-memory image of a token file (the extension of `name` picks the encoding);
// read_token_file's worker, exposed for tests.
std::vector<int32_t> parse_token_bytes(const std::string& name, const std::vector<uint8_t>& bytes,
                                       int64_t vocab = 0);

// True when the name has a token file's extension (.u32, .bin, .npy): for "did you mean the
// other flag" messages, not a validation.
bool looks_like_token_file(const std::string& path);

// Writes raw little-endian uint32 (tests, tools), atomically (temporary file + rename).
void write_token_file_u32(const std::string& path, const std::vector<int32_t>& tokens);

}  // namespace tl
