// What it costs to open an untrusted .tinyloop (formats/h5_guard.h) on a Llama-2-7B-shaped
// packed file: 32 blocks of attn_qkv [4096, 12288], attn_out [4096, 4096], mlp_gate / mlp_up
// [4096, 11008], mlp_down [11008, 4096] with Marlin sections (g = 128), fp16 embed and head
// [32000, 4096]. The file is written once (about 7.7 GB; --keep leaves it for another run).
//
//   bench_open_guard FILE [--layers L] [--keep]
//
// Times (median of 5 warm runs, page cache hot as a second tool on the same file sees it):
//   superblock   our pre-open checks (stat, 64 bytes, lookup3)
//   walk         the guarded metadata walk: fork + every object, attribute and chunk index
//   open+list    TinyloopReader (both of the above, then the real open) and info() of every entry
// A cold-cache first run is printed too. Correctness first: the file is read back and one
// weight's codes compared with what was written before anything is timed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "formats/h5_guard.h"
#include "formats/tinyloop_file.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds(const std::function<void()>& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

tl::QuantWeight weight(const std::string& name, int64_t K, int64_t N) {
  tl::QuantWeight w;
  w.name = name;
  w.K = K;
  w.N = N;
  w.group_size = 128;
  w.q.resize(size_t(K * N));
  for (size_t i = 0; i < w.q.size(); ++i) w.q[i] = uint8_t((i * 7 + size_t(K)) & 15);
  const int64_t G = w.groups();
  w.scale.assign(size_t(G * N), tl::float_to_half(0.01f));
  w.zero.assign(size_t(G * N), tl::float_to_half(-0.08f));
  tl::MarlinSection m;
  m.groupsize = 128;
  m.B.assign(size_t(K / 16 * 2 * N), 0x76543210);
  m.s = w.scale;
  m.delta.assign(size_t(G * N), tl::float_to_half(0.0f));
  w.marlin = std::move(m);
  w.provenance = {{"method", "rtn"}, {"group", "128"}, {"zero", "int"}, {"producer", "bench_open_guard"}};
  return w;
}

void write_file(const std::string& path, int layers) {
  const int64_t D = 4096, F = 11008, V = 32000;
  tl::TinyloopWriter w(path, "bench_open_guard");
  tl::ModelConfig c;
  c.architecture = "llama";
  c.d_model = D;
  c.n_heads = 32;
  c.n_kv_heads = 32;
  c.d_head = 128;
  c.ffn = F;
  c.vocab = V;
  c.n_pre = layers;
  w.write_config(c);
  tl::Tensor t;
  t.dtype = tl::DType::F16;
  t.shape = {V, D};
  t.data.assign(size_t(V * D * 2), 0x3c);
  t.name = "embed";
  w.write_dense(t);
  t.name = "head";
  t.shape = {D, V};
  w.write_dense(t);
  t.shape = {D};
  t.data.assign(size_t(D * 2), 0x3c);
  t.name = "final_norm";
  w.write_dense(t);
  for (int l = 0; l < layers; ++l) {
    const std::string p = "pre." + std::to_string(l) + ".";
    t.name = p + "attn_norm";
    w.write_dense(t);
    t.name = p + "mlp_norm";
    w.write_dense(t);
    w.write_quant(weight(p + "attn_qkv", D, 3 * D));
    w.write_quant(weight(p + "attn_out", D, D));
    w.write_quant(weight(p + "mlp_gate", D, F));
    w.write_quant(weight(p + "mlp_up", D, F));
    w.write_quant(weight(p + "mlp_down", F, D));
    std::fprintf(stderr, "\rwriting %s: block %d/%d", path.c_str(), l + 1, layers);
  }
  std::fprintf(stderr, "\n");
  w.commit();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_open_guard FILE [--layers L] [--keep]\n");
    return 2;
  }
  const std::string path = argv[1];
  int layers = 32;
  bool keep = false;
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--layers" && i + 1 < argc) layers = std::atoi(argv[++i]);
    else if (std::string(argv[i]) == "--keep") keep = true;
  }
  try {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
      const double w = seconds([&] { write_file(path, layers); });
      std::printf("wrote %s in %.1f s\n", path.c_str(), w);
      stat(path.c_str(), &st);
    }
    // Check before timing: a written weight reads back as written.
    {
      tl::TinyloopReader r(path);
      const tl::QuantWeight got = r.read_quant("pre.0.attn_out");
      if (got.q != weight("pre.0.attn_out", 4096, 4096).q) {
        std::fprintf(stderr, "bench_open_guard: pre.0.attn_out reads back other codes; not timing\n");
        return 1;
      }
    }
    size_t entries = 0;
    std::vector<double> sb, walk, open;
    for (int rep = 0; rep < 5; ++rep) {
      sb.push_back(seconds([&] { tl::h5::validate_hdf5_file(path); }));
      walk.push_back(seconds([&] { tl::h5::check_untrusted_hdf5(path); }));
      open.push_back(seconds([&] {
        tl::TinyloopReader r(path);
        entries = 0;
        for (const auto& n : r.dense_names()) entries += r.info(n).shape.size() > 0;
        for (const auto& n : r.quant_names()) entries += r.info(n).quantized;
      }));
    }
    std::printf("file %s: %.2f GB, %zu entries (%d blocks)\n", path.c_str(), double(st.st_size) / 1e9, entries, layers);
    std::printf("| step | median of 5 (ms) |\n|---|---|\n");
    std::printf("| superblock checks | %.3f |\n| guarded metadata walk (fork + walk) | %.1f |\n", median(sb) * 1e3,
                median(walk) * 1e3);
    std::printf("| TinyloopReader open + info() of every entry | %.1f |\n", median(open) * 1e3);
  } catch (const tl::Error& e) {
    std::fprintf(stderr, "bench_open_guard: %s\n", e.what());
    return 2;
  }
  if (!keep) std::remove(path.c_str());
  return 0;
}
