// Structure-aware .tinyloop fuzzing. Byte-level mutation of our files mostly hits a checksum
// (docs/format.md), so this target builds well-formed, checksummed HDF5 files whose *content* is
// chosen by the input -- attribute types and values (huge, negative, NaN, arrays, strings where
// numbers belong), dataset dtypes, shapes and layouts, missing and extra members, Marlin
// sections that disagree -- and reads each back as fuzz_tinyloop does. It exercises the
// reader's own validation (tinyloop_reader.cpp, quant_weight.cpp, model_config.cpp), where the
// range and overflow bugs of issue 15 lived.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <limits>

#include "formats/h5_write.h"
#include "formats/tinyloop_file.h"
#include "fuzz_util.h"

namespace {

nlohmann::json pick_number(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 9)) {
    case 0: return in.ConsumeIntegralInRange<int64_t>(-4, 300);
    case 1: return in.ConsumeIntegral<int64_t>();
    case 2: return std::numeric_limits<int64_t>::max();
    case 3: return in.ConsumeFloatingPoint<double>();
    case 4: return std::nan("");
    case 5: return 1e300;
    case 6: return in.ConsumeRandomLengthString(12);
    case 7: return in.ConsumeBool();
    case 8: return std::numeric_limits<uint64_t>::max();
    default: return int64_t(1) << in.ConsumeIntegralInRange<int>(0, 40);
  }
}

// An attribute: usually a scalar from pick_number, sometimes an array of int64 (readers that
// expect one value must not read an array into a scalar).
void put_attr(hid_t obj, const std::string& name, FuzzedDataProvider& in) {
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) {
    const hsize_t n = in.ConsumeIntegralInRange<hsize_t>(0, 5);
    std::vector<int64_t> v(n);
    for (auto& x : v) x = in.ConsumeIntegral<int64_t>();
    tl::h5::Handle sp(H5Screate_simple(1, &n, nullptr), H5Sclose);
    tl::h5::Handle a(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    if (a.valid() && n) H5Awrite(a, H5T_NATIVE_INT64, v.data());
    return;
  }
  tl::h5::write_attr(obj, name, pick_number(in), "fuzz");
}

hid_t pick_type(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 8)) {
    case 0: return H5T_IEEE_F32LE;
    case 1: return tl::h5::float16_type();
    case 2: return tl::h5::bfloat16_type();
    case 3: return H5T_STD_I32LE;
    case 4: return H5T_STD_U8LE;
    case 5: return H5T_STD_I8LE;
    case 6: return H5T_IEEE_F64LE;
    case 7: return H5T_STD_I64LE;  // not a tinyloop dtype
    default: return H5T_STD_U16LE;
  }
}

// A dataset of a chosen dtype and shape ("hint" when the input says so), chunked or not,
// filled with input bytes.
void put_dataset(hid_t loc, const std::string& name, const std::vector<int64_t>& hint, FuzzedDataProvider& in) {
  const hid_t type = in.ConsumeBool() ? pick_type(in) : (name == "q" ? H5T_STD_U8LE : name == "B" ? H5T_STD_I32LE : tl::h5::float16_type());
  std::vector<int64_t> shape = hint;
  if (shape.empty() || in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    shape.resize(in.ConsumeIntegralInRange<size_t>(0, 3));
    for (auto& d : shape) d = in.ConsumeIntegralInRange<int64_t>(0, 9);
  }
  int64_t n = 1;
  for (int64_t& d : shape) {
    d = std::max<int64_t>(0, std::min<int64_t>(d, 4096));
    n *= d;
  }
  if (n > (1 << 16)) return;  // keep the files small
  std::vector<uint8_t> bytes(size_t(n) * H5Tget_size(type));
  for (auto& b : bytes) b = in.ConsumeIntegral<uint8_t>();
  if (in.ConsumeBool()) {
    tl::h5::write_dataset(loc, name, type, type, shape, bytes.data(), "fuzz");  // chunked + Fletcher32
    return;
  }
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  tl::h5::Handle sp(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  tl::h5::Handle d(H5Dcreate2(loc, name.c_str(), type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (d.valid() && n > 0) H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
}

// Mostly a consistent small weight, with each layout number replaceable by anything.
void put_quant(hid_t quant, const std::string& name, FuzzedDataProvider& in) {
  tl::h5::Handle g = tl::h5::create_group(quant, name, "fuzz");
  const int64_t K = 16 * in.ConsumeIntegralInRange<int64_t>(1, 8), N = in.ConsumeIntegralInRange<int64_t>(1, 40);
  const int64_t gs = in.ConsumeBool() ? K : 16, G = tl::group_count(K, gs);
  const nlohmann::json vals[] = {4, K, N, gs, G};
  const char* keys[] = {"bits", "K", "N", "group_size", "G"};
  for (int i = 0; i < 5; ++i) {
    const int how = in.ConsumeIntegralInRange<int>(0, 7);
    if (how == 0) continue;  // missing
    if (how == 1) put_attr(g, keys[i], in);
    else tl::h5::write_attr(g, keys[i], vals[i], "fuzz");
  }
  for (int i = in.ConsumeIntegralInRange<int>(0, 3); i > 0; --i) put_attr(g, in.ConsumeRandomLengthString(8), in);
  if (in.ConsumeIntegralInRange<int>(0, 7)) put_dataset(g, "q", {K, (N + 1) / 2}, in);
  if (in.ConsumeIntegralInRange<int>(0, 7)) put_dataset(g, "scale", {G, N}, in);
  if (in.ConsumeIntegralInRange<int>(0, 7)) put_dataset(g, "zero", {G, N}, in);
  if (in.ConsumeBool()) {
    tl::h5::Handle m = tl::h5::create_group(g, "marlin", "fuzz");
    if (in.ConsumeIntegralInRange<int>(0, 5)) tl::h5::write_attr(m, "groupsize", tl::marlin_groupsize_arg(K, gs), "fuzz");
    else put_attr(m, "groupsize", in);
    tl::h5::write_attr(m, "layout", in.ConsumeBool() ? std::string(tl::kMarlinLayoutTag) : in.ConsumeRandomLengthString(8), "fuzz");
    if (in.ConsumeIntegralInRange<int>(0, 7)) put_dataset(m, "B", {K / 16, 2 * N}, in);
    if (in.ConsumeIntegralInRange<int>(0, 7)) put_dataset(m, "s", {G, N}, in);
    if (in.ConsumeIntegralInRange<int>(0, 7)) put_dataset(m, "delta", {G, N}, in);
  }
}

void build(const std::string& path, FuzzedDataProvider& in) {
  tl::h5::Handle f = tl::h5::create_file(path, path);
  tl::h5::Handle root = tl::h5::open_group(f, "/", path);
  tl::h5::write_attr(root, "format", in.ConsumeIntegralInRange<int>(0, 7) ? "tinyloop" : in.ConsumeRandomLengthString(10), path);
  if (in.ConsumeIntegralInRange<int>(0, 7)) tl::h5::write_attr(root, "format_version", 1, path);
  else put_attr(root, "format_version", in);
  if (in.ConsumeBool()) {
    tl::h5::Handle c = tl::h5::create_group(f, "config", path);
    for (const char* k : {"architecture", "d_model", "n_heads", "n_kv_heads", "d_head", "ffn", "vocab", "n_pre",
                          "n_loop", "loops", "norm_eps", "rope_theta", "max_seq", "tie_embeddings"})
      if (in.ConsumeIntegralInRange<int>(0, 5)) put_attr(c, k, in);
  }
  tl::h5::Handle t = tl::h5::create_group(f, "tensors", path);
  for (int i = in.ConsumeIntegralInRange<int>(0, 3); i > 0; --i) {
    const std::string name = in.ConsumeRandomLengthString(6);
    if (!name.empty() && name.find('/') == std::string::npos && name != "." && name != ".." && !tl::h5::exists(t, name))
      put_dataset(t, name, {}, in);
  }
  tl::h5::Handle q = tl::h5::create_group(f, "quant", path);
  for (int i = in.ConsumeIntegralInRange<int>(0, 3); i > 0; --i) {
    const std::string name = "w" + std::to_string(i);
    put_quant(q, name, in);
  }
  tl::h5::close_file(f, path);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string p = tl::fuzz::scratch() + "/structured.tinyloop";
  try {
    build(p, in);
  } catch (const tl::Error&) {
    return 0;  // the builder could not make this file (a name HDF5 refuses): nothing to read
  }
  tl::fuzz::refuse_or_read([&] { tl::fuzz::read_whole_tinyloop(p); });
  return 0;
}
