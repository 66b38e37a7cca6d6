// marlin-pack CPU throughput on a 70B-class layer set (Llama-2/3-70B linear shapes, W[K, N]).
//
// Prints, per shape, GB/s of int4 codes (K * N / 2 bytes, the size of the packed weight) for
//   codes   marlin_pack_codes into a preallocated B (all cores, then one core),
//   section marlin_pack_into(QuantWeight): validation + B + permuted s + delta into a section
//           reused across weights, as marlin-pack does,
//   fresh   marlin_pack(QuantWeight) allocating a new section each time: the difference is the
//           cost of faulting in fresh pages for B (large on this VM),
//   memcpy  a plain memcpy of the same K * N / 2 bytes in the same run (the machine's ceiling
//           for "read X bytes, write X bytes"; the packer reads 2X: one code per byte in RAM).
// Correctness first: the fast packer is checked against the literal reference on a random
// weight and the benchmark exits 1 without timing anything if they differ.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "formats/marlin_layout.h"

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

bool check_against_reference() {
  const int64_t K = 512, N = 768;
  std::mt19937 rng(7);
  std::vector<uint8_t> q(size_t(K * N));
  for (auto& v : q) v = uint8_t(rng() & 15u);
  std::vector<int32_t> fast(size_t(K / 16 * 2 * N)), ref(fast.size());
  tl::marlin_pack_codes(q.data(), K, N, fast.data());
  tl::marlin_pack_codes_ref(q.data(), K, N, ref.data());
  return fast == ref;
}

}  // namespace

int main() {
  if (!check_against_reference()) {
    std::fprintf(stderr, "bench_marlin_pack: fast packer differs from the reference; not timing\n");
    return 1;
  }
  struct Shape { int64_t K, N; const char* what; };
  const Shape shapes[] = {{8192, 10240, "attn qkv (GQA)"},
                          {8192, 8192, "attn out"},
                          {8192, 57344, "mlp gate+up"},
                          {28672, 8192, "mlp down"}};
  const int reps = 5;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::printf("marlin-pack CPU benchmark: GB/s of int4 codes (K*N/2 bytes), best of %d, %u threads\n",
              reps, cores);
  std::printf("| K x N | layer | MB int4 | codes (%u thr) | codes (1 thr) | section | fresh | memcpy |\n", cores);
  std::printf("|---|---|---|---|---|---|---|---|\n");
  double tot_bytes = 0, tot_codes = 0, tot_one = 0, tot_section = 0, tot_fresh = 0, tot_memcpy = 0;
  std::mt19937 rng(1234);
  for (const Shape& sh : shapes) {
    const int64_t K = sh.K, N = sh.N, G = K / 128;
    tl::QuantWeight w;
    w.name = "bench";
    w.K = K;
    w.N = N;
    w.group_size = 128;
    w.q.resize(size_t(K * N));
    // Random codes, filled 8 at a time (a full mt19937 call per code would dominate setup).
    for (size_t i = 0; i < w.q.size(); i += 8) {
      const uint64_t r = (uint64_t(rng()) << 32) | rng();
      for (size_t j = 0; j < 8 && i + j < w.q.size(); ++j) w.q[i + j] = uint8_t((r >> (4 * j)) & 15u);
    }
    w.scale.assign(size_t(G * N), tl::float_to_half(0.01f));
    w.zero.assign(size_t(G * N), tl::float_to_half(-0.08f));
    const double bytes = double(K) * double(N) / 2.0;
    std::vector<int32_t> B(size_t(K / 16 * 2 * N));
    const size_t nbytes = size_t(K * N / 2);
    std::vector<uint8_t> src(nbytes), dst(nbytes);
    std::memset(src.data(), 0x5a, src.size());
    std::memset(dst.data(), 0, dst.size());  // touch the pages before timing
    tl::marlin_pack_codes(w.q.data(), K, N, B.data());  // warm-up, faults B in

    const double t_codes = best_seconds(reps, [&] { tl::marlin_pack_codes(w.q.data(), K, N, B.data(), 0); });
    const double t_one = best_seconds(reps, [&] { tl::marlin_pack_codes(w.q.data(), K, N, B.data(), 1); });
    tl::MarlinSection reused;
    const double t_section = best_seconds(reps, [&] { tl::marlin_pack_into(w, "", &reused); });
    const double t_fresh = best_seconds(reps, [&] {
      tl::MarlinSection m = tl::marlin_pack(w);
      if (m.B.size() != B.size()) std::abort();
    });
    const double t_memcpy = best_seconds(reps, [&] { std::memcpy(dst.data(), src.data(), src.size()); });
    std::printf("| %lld x %lld | %s | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", (long long)K,
                (long long)N, sh.what, bytes / 1e6, bytes / t_codes / 1e9, bytes / t_one / 1e9,
                bytes / t_section / 1e9, bytes / t_fresh / 1e9, bytes / t_memcpy / 1e9);
    tot_bytes += bytes;
    tot_codes += t_codes;
    tot_one += t_one;
    tot_section += t_section;
    tot_fresh += t_fresh;
    tot_memcpy += t_memcpy;
  }
  std::printf("| total | 70B layer set | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", tot_bytes / 1e6,
              tot_bytes / tot_codes / 1e9, tot_bytes / tot_one / 1e9, tot_bytes / tot_section / 1e9,
              tot_bytes / tot_fresh / 1e9, tot_bytes / tot_memcpy / 1e9);
  return 0;
}
