// tl_make_fixtures DIR: writes the deterministic sample files the CLI tests inspect.
//   DIR/model.tinyloop      config, 2 dense tensors, 3 quantized weights (two with Marlin
//                           sections, one with odd N and an extra sign_bit channel)
//   DIR/model.safetensors   F32 / F16 / I32 / U8 tensors with metadata
//   DIR/sharded/            two bf16 shards + model.safetensors.index.json (HF [N, K] names)
//   DIR/calib.h5            two Hessians (tinyloop-calib layout)
//   DIR/bad/*.tinyloop      one defect each: missing_dataset, wrong_dtype, wrong_shape,
//                           version9, nan_dense, truncated, not_tinyloop (plain HDF5)
// The Marlin words are random: these files test the container, not the packer.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <sys/stat.h>

#include "formats/calib_file.h"
#include "core/error.h"
#include "formats/h5_write.h"
#include "formats/safetensors.h"
#include "formats/tinyloop_file.h"
#include "tests/formats/fixtures.h"

using namespace tl;

namespace {

std::mt19937 rng(20240601);

Tensor randn(const std::string& name, DType dt, std::vector<int64_t> shape, float sd = 0.02f) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::normal_distribution<float> nd(0.f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  return Tensor::from_float(name, std::move(shape), v.data(), dt);
}

// The formats tests' random quantized weight and Marlin section (tests/formats/fixtures.h).
QuantWeight quant(const std::string& name, int64_t K, int64_t N, int64_t gs, bool marlin) {
  QuantWeight w = test::random_quant(name, K, N, gs, rng);
  if (marlin) w.marlin = test::random_marlin(w, rng);
  return w;
}

ModelConfig config() {
  ModelConfig c;
  c.d_model = 128;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_head = 32;
  c.ffn = 256;
  c.vocab = 100;
  c.n_pre = 1;
  c.n_loop = 1;
  c.loops = 2;
  return c;
}

void write_model(const std::string& p) {
  TinyloopWriter w(p, "tl_make_fixtures");
  w.write_config(config());
  w.write_dense(randn("tok_embed", DType::F16, {100, 128}));
  w.write_dense(randn("final_norm", DType::F32, {128}, 1.f));
  w.write_quant(quant("blk0.attn_qkv", 128, 256, 128, true));  // per-row: Marlin groupsize -1
  w.write_quant(quant("blk0.mlp_up", 256, 256, 128, true));    // grouped: Marlin groupsize 128
  w.write_quant(quant("head", 128, 37, 64, false));            // odd N, not packable
  w.commit();
  // A runtime channel this build does not know, to show carry-through in listings.
  hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  std::vector<uint8_t> bits((128 * 37 + 7) / 8, 0x5a);
  h5::write_dataset(f, "/quant/head/sign_bit", H5T_STD_U8LE, H5T_NATIVE_UINT8, {int64_t(bits.size())}, bits.data(), p);
  H5Fclose(f);
}

void copy_file(const std::string& from, const std::string& to, size_t keep = SIZE_MAX) {
  FILE* in = std::fopen(from.c_str(), "rb");
  FILE* out = std::fopen(to.c_str(), "wb");
  if (!in || !out) throw Error("cannot copy", from);
  char buf[65536];
  size_t n, total = 0;
  while ((n = std::fread(buf, 1, sizeof buf, in)) > 0 && total < keep) {
    const size_t k = std::min(n, keep - total);
    std::fwrite(buf, 1, k, out);
    total += k;
  }
  std::fclose(in);
  std::fclose(out);
}

void edit(const std::string& p, const std::function<void(hid_t)>& fn) {
  hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) throw Error("cannot open for editing", p);
  fn(f);
  H5Fclose(f);
}

void write_bad(const std::string& model, const std::string& dir) {
  copy_file(model, dir + "/missing_dataset.tinyloop");
  edit(dir + "/missing_dataset.tinyloop", [](hid_t f) { H5Ldelete(f, "/quant/blk0.mlp_up/zero", H5P_DEFAULT); });
  copy_file(model, dir + "/wrong_dtype.tinyloop");
  edit(dir + "/wrong_dtype.tinyloop", [&](hid_t f) {
    H5Ldelete(f, "/quant/blk0.mlp_up/scale", H5P_DEFAULT);
    std::vector<float> s(2 * 256, 0.01f);
    h5::write_dataset(f, "/quant/blk0.mlp_up/scale", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {2, 256}, s.data(), dir);
  });
  copy_file(model, dir + "/wrong_shape.tinyloop");
  edit(dir + "/wrong_shape.tinyloop", [&](hid_t f) {
    H5Ldelete(f, "/quant/blk0.mlp_up/marlin/B", H5P_DEFAULT);
    std::vector<int32_t> b(16 * 256, 7);  // [K/16, N] instead of [K/16, 2N]
    h5::write_dataset(f, "/quant/blk0.mlp_up/marlin/B", H5T_STD_I32LE, H5T_NATIVE_INT32, {16, 256}, b.data(), dir);
  });
  copy_file(model, dir + "/version9.tinyloop");
  edit(dir + "/version9.tinyloop", [&](hid_t f) {
    hid_t root = H5Gopen2(f, "/", H5P_DEFAULT);
    h5::write_attr(root, "format_version", 9, dir);
    H5Gclose(root);
  });
  copy_file(model, dir + "/nan_dense.tinyloop");
  edit(dir + "/nan_dense.tinyloop", [&](hid_t f) {
    std::vector<float> v(128, 1.f);
    v[17] = NAN;
    h5::write_dataset(f, "/tensors/bad_norm", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {128}, v.data(), dir);
  });
  struct stat st {};
  stat(model.c_str(), &st);
  copy_file(model, dir + "/truncated.tinyloop", size_t(st.st_size) / 3);
  hid_t f = tl::h5::create_file((dir + "/not_tinyloop.h5"), (dir + "/not_tinyloop.h5")).release();  // HDF5 1.10 format: readers require it
  H5Fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tl_make_fixtures DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  try {
    mkdir(dir.c_str(), 0755);
    mkdir((dir + "/sharded").c_str(), 0755);
    mkdir((dir + "/bad").c_str(), 0755);
    write_model(dir + "/model.tinyloop");

    const Tensor a = randn("embed.weight", DType::F32, {100, 16});
    const Tensor b = randn("layer.weight", DType::F16, {24, 16});
    Tensor c;
    c.name = "position_ids";
    c.dtype = DType::I32;
    c.shape = {8};
    for (int32_t i = 0; i < 8; ++i) c.data.insert(c.data.end(), {uint8_t(i), 0, 0, 0});
    Tensor d;
    d.name = "mask";
    d.dtype = DType::U8;
    d.shape = {3};
    d.data = {1, 0, 1};
    write_safetensors(dir + "/model.safetensors", {&a, &b, &c, &d}, {{"format", "pt"}});

    const Tensor s0 = randn("model.embed_tokens.weight", DType::BF16, {100, 64});
    const Tensor s1 = randn("model.layers.0.self_attn.q_proj.weight", DType::BF16, {64, 64});
    const Tensor s2 = randn("model.layers.0.mlp.down_proj.weight", DType::BF16, {64, 176});
    const Tensor s3 = randn("model.norm.weight", DType::BF16, {64}, 1.f);
    write_safetensors(dir + "/sharded/model-00001-of-00002.safetensors", {&s0, &s1}, {{"format", "pt"}});
    write_safetensors(dir + "/sharded/model-00002-of-00002.safetensors", {&s2, &s3}, {{"format", "pt"}});
    nlohmann::json idx = {{"metadata", {{"total_size", 2 * (100 * 64 + 64 * 64 + 64 * 176 + 64)}}}};
    for (const Tensor* t : {&s0, &s1}) idx["weight_map"][t->name] = "model-00001-of-00002.safetensors";
    for (const Tensor* t : {&s2, &s3}) idx["weight_map"][t->name] = "model-00002-of-00002.safetensors";
    FILE* jf = std::fopen((dir + "/sharded/model.safetensors.index.json").c_str(), "w");
    std::fputs(idx.dump(2).c_str(), jf);
    std::fclose(jf);

    CalibWriter cw(dir + "/calib.h5");
    for (const auto& [name, K] : {std::pair<std::string, int64_t>{"blk0.attn_qkv", 128}, {"blk0.mlp_up", 256}}) {
      Hessian h;
      h.name = name;
      h.K = K;
      h.nsamples = 16;
      const Tensor t = randn("h", DType::F32, {K, K}, 1.f);
      h.H = t.to_float();
      cw.write(h);
    }
    cw.commit();

    write_bad(dir + "/model.tinyloop", dir + "/bad");
  } catch (const Error& e) {
    std::fprintf(stderr, "tl_make_fixtures: %s\n", e.what());
    return 2;
  }
  return 0;
}
