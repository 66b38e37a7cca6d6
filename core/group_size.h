// The group size, and what the Marlin kernel can run: the one place these rules live
// (DESIGN.md, "Math contracts"). Every layer -- the quantizers, the file readers and writers,
// the packer, the CUDA launchers and the dispatcher -- calls this header instead of re-deriving.
//
// Encodings, and where each one appears:
//   effective group size  rows of K per group, == K for one group per output column ("per
//                         row"). The .tinyloop attribute group_size, QuantWeight, the quantizers,
//                         and every kernel launcher of cuda/tl_kernels.h take this form.
//   GroupSize             a group size chosen before K is known (gptq-quantize --group-size):
//                         32 | 64 | 128 | 256 | row. effective(K) turns it into the above; a
//                         group size larger than K is an error, never silently per-row.
//   Marlin's argument     -1 for one group per column, else the group size (upstream
//                         marlin.Layer.pack and the kernel; the file's marlin/groupsize
//                         attribute). marlin_groupsize_arg / group_size_from_marlin convert.
//   upstream GPTQ         -1 for per row (IST-DASLab/gptq, GPTQ checkpoints' quantize_config.json,
//                         the golden files): group_size_from_upstream converts.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace tl {

// ---- group sizes of the quantizer ----

// The --group-size values of gptq-quantize besides "row" (one table: parsing, validation, --help).
constexpr int64_t kGptqGroupSizes[] = {32, 64, 128, 256};

class GroupSize {
 public:
  GroupSize() = default;  // 128
  static GroupSize rows(int64_t n) { return GroupSize(n); }
  static GroupSize per_row() { return GroupSize(0); }

  bool is_per_row() const { return rows_ == 0; }
  int64_t rows() const { return rows_; }  // 0 for per row
  // "128" / "row": the flag's spelling, used in messages, provenance and JSON.
  std::string name() const { return is_per_row() ? "row" : std::to_string(rows_); }
  // The effective group size for a weight of K rows (K for per row). A group larger than K
  // cannot be stored as the user asked: tl::Error naming the weight.
  int64_t effective(int64_t K, const std::string& weight = "") const {
    if (is_per_row()) return K;
    if (rows_ > K)
      throw Error("--group-size " + name() + " is larger than K = " + std::to_string(K) +
                      " (in_features); use --group-size row for one group per output column", "", weight);
    return rows_;
  }

 private:
  explicit GroupSize(int64_t n) : rows_(n) {}
  int64_t rows_ = 128;
};

// "32".."256" as in kGptqGroupSizes, "row" (any case), or "-1" (GPTQ's spelling of per row).
inline bool parse_group_size(const std::string& s, GroupSize* out) {
  std::string low = s;
  for (char& c : low) c = (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c;
  if (low == "row" || s == "-1") {
    *out = GroupSize::per_row();
    return true;
  }
  for (int64_t g : kGptqGroupSizes)
    if (s == std::to_string(g)) {
      *out = GroupSize::rows(g);
      return true;
    }
  return false;
}

inline std::string group_size_choices() {  // "32, 64, 128, 256, row"
  std::string s;
  for (int64_t g : kGptqGroupSizes) s += std::to_string(g) + ", ";
  return s + "row";
}

// The effective group size's rule, the one place it is written: 0 < group_size <= K (K: one
// group per output column).
inline bool effective_group_size_ok(int64_t K, int64_t group_size) { return group_size > 0 && group_size <= K; }
// The same rule as a tl::Error (file, item: where the value came from).
inline void check_effective_group_size(int64_t K, int64_t group_size, const std::string& file = "",
                                       const std::string& item = "") {
  if (!effective_group_size_ok(K, group_size))
    throw Error("group size " + std::to_string(group_size) + ": expected 0 < group_size <= K = " + std::to_string(K) +
                    " (K for per row)", file, item);
}

// Groups along K: ceil(K / group_size), without the overflow of K + group_size - 1.
inline int64_t group_count(int64_t K, int64_t group_size) {
  return group_size > 0 ? K / group_size + (K % group_size != 0 ? 1 : 0) : 0;
}

// Upstream GPTQ's convention (-1 = per row) -> the effective group size.
inline int64_t group_size_from_upstream(int64_t gs, int64_t K) { return gs == -1 ? K : gs; }

// ---- the Marlin contract ----

constexpr int64_t kMarlinTileK = 128;           // K % 128 == 0
constexpr int64_t kMarlinTileN = 128;           // N % 128 == 0
constexpr int64_t kMarlinGroupSizes[] = {128};  // besides per column (group_size == K)
constexpr int64_t kMarlinAlignBytes = 16;       // A, B, s, delta and C pointers

// Marlin's groupsize argument from the effective group size, and back.
inline int64_t marlin_groupsize_arg(int64_t K, int64_t group_size) { return group_size == K ? -1 : group_size; }
inline int64_t group_size_from_marlin(int64_t K, int64_t arg) { return arg == -1 ? K : arg; }

inline bool marlin_group_size_ok(int64_t K, int64_t group_size) {
  if (group_size == K) return true;
  for (int64_t s : kMarlinGroupSizes)
    if (group_size == s) return true;
  return false;
}

// The kernels' shape half: K and N whole Marlin tiles (N of the packed section).
inline bool marlin_shape_ok(int64_t K, int64_t N) {
  return K > 0 && N > 0 && K % kMarlinTileK == 0 && N % kMarlinTileN == 0;
}

// The columns of a weight's Marlin section: N rounded up to a whole tile. marlin-pack pads a
// weight whose N is not a multiple of 128 (a vocabulary of 50257: the head) with zero columns
// (docs/format.md, "Padded sections"); the kernels run the padded section and write only the
// weight's own N columns.
inline int64_t marlin_padded_n(int64_t N) { return N > 0 ? (N + kMarlinTileN - 1) / kMarlinTileN * kMarlinTileN : 0; }

// The gate in words, for --help: "K % 128 == 0 (N any: padded to a multiple of 128), group
// size 128 or per-row (= K)".
inline std::string marlin_gate_text() {
  std::string list;
  for (int64_t s : kMarlinGroupSizes) list += std::to_string(s) + " or ";
  return "K % " + std::to_string(kMarlinTileK) + " == 0 (N any: padded to a multiple of " +
         std::to_string(kMarlinTileN) + "), group size " + list + "per-row (= K)";
}

struct MarlinGate {
  bool ok = false;
  std::string reason;  // why not, e.g. "N = 50257 is not a multiple of 128"
};

// Whether the Marlin kernel can run a [K, N] weight with this effective group size (N any:
// the section is padded to marlin_padded_n(N)); every reason that fails, joined with " and "
// ("; " separates the weights' reasons in a tally).
inline MarlinGate marlin_gate(int64_t K, int64_t N, int64_t group_size) {
  MarlinGate g;
  auto add = [&g](const std::string& s) { g.reason += (g.reason.empty() ? "" : " and ") + s; };
  if (K <= 0 || K % kMarlinTileK != 0) add("K = " + std::to_string(K) + " is not a multiple of " + std::to_string(kMarlinTileK));
  if (N <= 0) add("N = " + std::to_string(N));
  if (!marlin_group_size_ok(K, group_size)) {
    std::string list;
    for (int64_t s : kMarlinGroupSizes) list += std::to_string(s) + ", ";
    add("group size " + std::to_string(group_size) + " is not supported by the Marlin kernel (" + list + "or per-row = K)");
  }
  g.ok = g.reason.empty();
  return g;
}

// Which weights fail the gate, and why, counted: the one wording of "cannot run on Marlin"
// in gptq-quantize's warning, marlin-pack's summary and tl-verify's skip reason.
class MarlinGateTally {
 public:
  void add(const std::string& weight, const std::string& reason) {
    if (first_.empty()) first_ = weight;
    ++count_;
    for (auto& r : reasons_)
      if (r.first == reason) {
        ++r.second;
        return;
      }
    reasons_.push_back({reason, 1});
  }
  size_t count() const { return count_; }
  const std::string& first() const { return first_; }
  // "15 x group size 64 is not supported by ...; 2 x N = 50257 is not a multiple of 128"
  std::string text() const {
    std::string out;
    for (const auto& r : reasons_) out += (out.empty() ? "" : "; ") + std::to_string(r.second) + " x " + r.first;
    return out;
  }

 private:
  std::vector<std::pair<std::string, size_t>> reasons_;
  std::string first_;
  size_t count_ = 0;
};

}  // namespace tl
