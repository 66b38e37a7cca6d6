// .tinyloop round trips, carry-through of unknown content, checksums and bad inputs.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>

#include <cmath>
#include <cstring>

#include <hdf5.h>

#include "fixtures.h"
#include "core/error.h"
#include "formats/h5_util.h"
#include "formats/h5_write.h"
#include "formats/marlin_layout.h"
#include "formats/tinyloop_file.h"

using namespace tl;
using tl::test::scratch;

namespace {

Tensor random_dense(const std::string& name, DType dt, std::vector<int64_t> shape, std::mt19937& rng) {
  Tensor t;
  t.name = name;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.data.resize(size_t(t.numel()) * dtype_size(dt));
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = nd(rng);
    switch (dt) {
      case DType::F64: t.as<double>()[i] = double(v) * 1e-3 + 1e-9 * double(i); break;
      case DType::F32: t.as<float>()[i] = v; break;
      case DType::F16: t.as<uint16_t>()[i] = float_to_half(v); break;
      case DType::BF16: t.as<uint16_t>()[i] = float_to_bf16(v); break;
      case DType::I64: t.as<int64_t>()[i] = int64_t(rng()); break;
      case DType::I32: t.as<int32_t>()[i] = int32_t(rng()); break;
      case DType::I8: t.as<int8_t>()[i] = int8_t(rng()); break;
      case DType::U8: t.as<uint8_t>()[i] = uint8_t(rng()); break;
    }
  }
  return t;
}

// Opens a written file for in-place edits that build the bad inputs.
struct RawFile {
  hid_t f;
  explicit RawFile(const std::string& p) : f(H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)) { REQUIRE(f >= 0); }
  ~RawFile() { H5Fclose(f); }
};

std::string write_sample(const std::string& dir, std::mt19937& rng, int64_t N = 37) {
  const std::string p = dir + "/m.tinyloop";
  TinyloopWriter w(p, "test");
  w.write_config(test::small_config());
  w.write_dense(random_dense("embed", DType::F16, {50, 64}, rng));
  QuantWeight q = test::random_quant("blk0.mlp_up", 64, N, 16, rng);
  w.write_quant(q);
  w.commit();
  return p;
}

void require_throws_with(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const auto& p : parts) {
      INFO("message: " << m);
      CHECK(m.find(p) != std::string::npos);
    }
    return;
  }
  FAIL("expected tl::Error mentioning " << parts.front());
}

}  // namespace

TEST_CASE("tinyloop: dense tensors of every dtype round-trip bit for bit") {
  const std::string dir = scratch("tl_dense");
  std::mt19937 rng(1234);
  const DType all[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I32, DType::I8, DType::U8};
  std::vector<Tensor> ts;
  for (DType dt : all) ts.push_back(random_dense(std::string("t_") + dtype_name(dt), dt, {7, 33}, rng));
  ts.push_back(random_dense("vec", DType::F32, {1000}, rng));
  ts.push_back(random_dense("rank3", DType::F16, {3, 5, 7}, rng));
  ts.push_back(random_dense("empty", DType::F32, {0, 4}, rng));
  ts.push_back(random_dense("scalar", DType::F32, {}, rng));
  // Bigger than one chunk in both directions, so chunking splits rows.
  ts.push_back(random_dense("big", DType::F32, {700, 600}, rng));
  const std::string p = dir + "/dense.tinyloop";
  {
    TinyloopWriter w(p, "test");
    for (const auto& t : ts) w.write_dense(t);
    w.commit();
  }
  TinyloopReader r(p);
  CHECK(r.dense_names().size() == ts.size());
  CHECK(r.quant_names().empty());
  for (const auto& t : ts) {
    CAPTURE(t.name);
    REQUIRE(r.has_dense(t.name));
    const Tensor b = r.read_dense(t.name);
    CHECK(b.dtype == t.dtype);
    CHECK(b.shape == t.shape);
    CHECK(b.data == t.data);
    const EntryInfo e = r.info(t.name);
    CHECK(!e.quantized);
    CHECK(e.dtype == t.dtype);
    CHECK(e.shape == t.shape);
  }
  const nlohmann::json root = r.root_attributes();
  CHECK(root["format"] == "tinyloop");
  CHECK(root["format_version"] == 1);
  CHECK(root["producer"] == "test");
}

TEST_CASE("tinyloop: every non-empty dataset is chunked (~1 MiB) with Fletcher32") {
  const std::string dir = scratch("tl_chunks");
  std::mt19937 rng(7);
  const std::string p = dir + "/c.tinyloop";
  {
    TinyloopWriter w(p, "test");
    w.write_dense(random_dense("big", DType::F32, {700, 600}, rng));
    QuantWeight q = test::random_quant("lin", 128, 256, 128, rng);
    q.marlin = test::random_marlin(q, rng);
    w.write_quant(q);
    w.commit();
  }
  hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  for (const char* ds : {"/tensors/big", "/quant/lin/q", "/quant/lin/scale", "/quant/lin/zero",
                         "/quant/lin/marlin/B", "/quant/lin/marlin/s", "/quant/lin/marlin/delta"}) {
    CAPTURE(ds);
    hid_t d = H5Dopen2(f, ds, H5P_DEFAULT);
    hid_t pl = H5Dget_create_plist(d);
    CHECK(H5Pget_layout(pl) == H5D_CHUNKED);
    bool fletcher = false;
    for (int i = 0; i < H5Pget_nfilters(pl); ++i) {
      unsigned flags;
      size_t nelem = 0;
      char name[64];
      unsigned cfg;
      if (H5Pget_filter2(pl, unsigned(i), &flags, &nelem, nullptr, sizeof name, name, &cfg) == H5Z_FILTER_FLETCHER32)
        fletcher = true;
    }
    CHECK(fletcher);
    hsize_t chunk[4] = {};
    const int rank = H5Pget_chunk(pl, 4, chunk);
    hid_t t = H5Dget_type(d);
    size_t bytes = H5Tget_size(t);
    for (int i = 0; i < rank; ++i) bytes *= chunk[i];
    CHECK(bytes <= h5::kChunkBytes);
    H5Tclose(t);
    H5Pclose(pl);
    H5Dclose(d);
  }
  H5Fclose(f);
  // 700 x 600 float32 = 1.6 MiB: chunks of 436 whole rows (436 * 2400 B <= 1 MiB).
  CHECK(h5::chunk_shape({700, 600}, 4) == std::vector<hsize_t>{436, 600});
  CHECK(h5::chunk_shape({3, 1 << 20}, 4) == std::vector<hsize_t>{1, 262144});
  CHECK(h5::chunk_shape({}, 4).empty());
  CHECK(h5::chunk_shape({0, 5}, 4).empty());
}

TEST_CASE("tinyloop: quantized weights (odd N, per-row, Marlin) and provenance round-trip") {
  const std::string dir = scratch("tl_quant");
  std::mt19937 rng(99);
  struct Case { const char* name; int64_t K, N, gs; bool marlin; };
  const Case cases[] = {{"odd_n", 48, 37, 16, false},  {"one_col", 32, 1, 32, false},
                        {"per_row", 64, 130, 64, false}, {"marlin_g", 256, 256, 128, true},
                        {"marlin_col", 128, 256, 128, true}, {"ragged_last_group", 40, 9, 16, false}};
  std::vector<QuantWeight> ws;
  for (const Case& c : cases) {
    ws.push_back(test::random_quant(c.name, c.K, c.N, c.gs, rng));
    if (c.marlin) ws.back().marlin = test::random_marlin(ws.back(), rng);
  }
  const std::string p = dir + "/q.tinyloop";
  {
    TinyloopWriter w(p, "gptq-quantize");
    w.write_config(test::small_config());
    for (const auto& q : ws) w.write_quant(q);
    w.commit();
  }
  TinyloopReader r(p);
  CHECK(r.quant_names().size() == ws.size());
  const ModelConfig c = r.config();
  nlohmann::json a, b;
  to_json(a, c);
  to_json(b, test::small_config());
  CHECK(a == b);
  for (const auto& q : ws) {
    CAPTURE(q.name);
    const QuantWeight g = r.read_quant(q.name);
    CHECK(g.K == q.K);
    CHECK(g.N == q.N);
    CHECK(g.group_size == q.group_size);
    CHECK(g.q == q.q);
    CHECK(g.scale == q.scale);
    CHECK(g.zero == q.zero);
    CHECK(g.provenance == q.provenance);
    REQUIRE(g.marlin.has_value() == q.marlin.has_value());
    if (q.marlin) {
      CHECK(g.marlin->B == q.marlin->B);
      CHECK(g.marlin->s == q.marlin->s);
      CHECK(g.marlin->delta == q.marlin->delta);
      CHECK(g.marlin->groupsize == q.marlin->groupsize);
      CHECK(g.marlin->layout == kMarlinLayoutTag);
      CHECK(!r.read_quant(q.name, false).marlin.has_value());
    }
    const EntryInfo e = r.info(q.name);
    CHECK(e.quantized);
    CHECK(e.shape == std::vector<int64_t>{q.K, q.N});
    CHECK(e.has_marlin == q.marlin.has_value());
    CHECK(e.attributes["method"] == "gptq");
  }
  // The stored q really is two codes per byte, low nibble = even n: check one byte by hand.
  hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  std::vector<int64_t> shape;
  const auto packed = h5::read<uint8_t>(f, "/quant/odd_n/q", p, &shape);
  H5Fclose(f);
  CHECK(shape == std::vector<int64_t>{48, 19});
  const QuantWeight& q0 = ws[0];
  CHECK(packed[5 * 19 + 3] == uint8_t(q0.q[5 * 37 + 6] | (q0.q[5 * 37 + 7] << 4)));
  CHECK(packed[5 * 19 + 18] == q0.q[5 * 37 + 36]);  // odd N: the last high nibble is 0
}

TEST_CASE("tinyloop: dequantize is q * scale + zero with groups along K") {
  std::mt19937 rng(5);
  const QuantWeight w = test::random_quant("w", 40, 9, 16, rng);  // groups 0..15, 16..31, 32..39
  const std::vector<float> wh = w.dequantize();
  for (int64_t k : {0, 15, 16, 31, 32, 39})
    for (int64_t n = 0; n < 9; ++n) {
      const int64_t g = k / 16;
      const double ref = double(w.q[size_t(k * 9 + n)]) * half_to_float(w.scale[size_t(g * 9 + n)]) +
                         half_to_float(w.zero[size_t(g * 9 + n)]);
      // float32 evaluation of an exact product plus one add: within half an ulp of float32.
      CHECK(std::fabs(double(wh[size_t(k * 9 + n)]) - ref) <= std::fabs(ref) * 6e-8 + 1e-30);
    }
}

TEST_CASE("tinyloop: copy_* carry unknown datasets and attributes through unchanged") {
  const std::string dir = scratch("tl_copy");
  std::mt19937 rng(11);
  const std::string src = write_sample(dir, rng);
  // Add what a newer runtime might put in: per-weight frac4 / sign_bit channels, an unknown
  // attribute on the weight, a root attribute, an unknown root group, a dense-tensor attribute.
  {
    RawFile rf(src);
    std::vector<uint8_t> frac(64 * 37, 3), sign((64 * 37 + 7) / 8, 0xa5);
    h5::write_dataset(rf.f, "/quant/blk0.mlp_up/frac4", H5T_STD_U8LE, H5T_NATIVE_UINT8, {64, 37}, frac.data(), src);
    h5::write_dataset(rf.f, "/quant/blk0.mlp_up/sign_bit", H5T_STD_U8LE, H5T_NATIVE_UINT8,
                      {int64_t(sign.size())}, sign.data(), src);
    hid_t g = H5Gopen2(rf.f, "/quant/blk0.mlp_up", H5P_DEFAULT);
    h5::write_attr(g, "runtime_hint", "fast-path-7", src);
    H5Gclose(g);
    hid_t root = H5Gopen2(rf.f, "/", H5P_DEFAULT);
    h5::write_attr(root, "tokenizer_sha", "abc123", src);
    h5::write_attr(root, "producer", "someone-else", src);
    H5Gclose(root);
    hid_t tok = H5Gcreate2(rf.f, "/tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    std::vector<int32_t> merges = {1, 2, 3, 4};
    h5::write_dataset(tok, "merges", H5T_STD_I32LE, H5T_NATIVE_INT32, {4}, merges.data(), src);
    H5Gclose(tok);
    hid_t d = H5Dopen2(rf.f, "/tensors/embed", H5P_DEFAULT);
    h5::write_attr(d, "note", "tied", src);
    H5Dclose(d);
  }
  const auto src_bytes = test::slurp(src);
  TinyloopReader r(src);
  const QuantWeight orig = r.read_quant("blk0.mlp_up");

  SUBCASE("copy_entry + copy_config_and_attributes") {
    const std::string dst = dir + "/copy.tinyloop";
    TinyloopWriter w(dst, "marlin-pack");
    w.copy_config_and_attributes(r);
    for (const auto& n : r.dense_names()) w.copy_entry(r, n);
    for (const auto& n : r.quant_names()) w.copy_entry(r, n);
    w.commit();
    TinyloopReader c(dst);
    const nlohmann::json root = c.root_attributes();
    CHECK(root["tokenizer_sha"] == "abc123");
    CHECK(root["producer"] == "marlin-pack");  // the writer's own attributes win
    CHECK(c.info("embed").attributes["note"] == "tied");
    hid_t f = H5Fopen(dst.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(h5::read<int32_t>(f, "/tokenizer/merges", dst) == std::vector<int32_t>{1, 2, 3, 4});
    CHECK(h5::read<uint8_t>(f, "/quant/blk0.mlp_up/frac4", dst) == std::vector<uint8_t>(64 * 37, 3));
    H5Fclose(f);
    CHECK(c.read_quant("blk0.mlp_up").provenance["runtime_hint"] == "fast-path-7");
  }
  SUBCASE("copy_quant_with_marlin replaces only marlin/") {
    QuantWeight w64 = orig;  // K = 64, N = 37: Marlin needs K % 16 == 0 only at this level
    const MarlinSection m = test::random_marlin(w64, rng);
    const std::string dst = dir + "/packed.tinyloop";
    {
      TinyloopWriter w(dst, "marlin-pack");
      w.copy_config_and_attributes(r);
      w.copy_entry(r, "embed");
      w.copy_quant_with_marlin(r, r.read_quant("blk0.mlp_up", false), m, CodeStorage::kNative);
      w.commit();
    }
    // and again on the packed file: the old section is replaced, not duplicated
    MarlinSection m2 = test::random_marlin(w64, rng);
    const std::string dst2 = dir + "/repacked.tinyloop";
    {
      TinyloopReader rp(dst);
      TinyloopWriter w(dst2, "marlin-pack");
      w.copy_config_and_attributes(rp);
      w.copy_quant_with_marlin(rp, rp.read_quant("blk0.mlp_up", false), m2, CodeStorage::kNative);
      w.commit();
    }
    TinyloopReader c(dst2);
    const QuantWeight g = c.read_quant("blk0.mlp_up");
    CHECK(g.q == orig.q);
    CHECK(g.scale == orig.scale);
    CHECK(g.provenance == orig.provenance);
    REQUIRE(g.marlin);
    CHECK(g.marlin->B == m2.B);
    hid_t f = H5Fopen(dst2.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(h5::read<uint8_t>(f, "/quant/blk0.mlp_up/frac4", dst2) == std::vector<uint8_t>(64 * 37, 3));
    CHECK(h5::exists(f, "/quant/blk0.mlp_up/sign_bit"));
    H5Fclose(f);
    MarlinSection bad = m2;
    bad.B.pop_back();
    TinyloopWriter w(dir + "/bad.tinyloop", "x");
    require_throws_with([&] { w.copy_quant_with_marlin(c, c.read_quant("blk0.mlp_up", false), bad, CodeStorage::kNative); },
                        {"B: expected"});
  }
  CHECK(test::slurp(src) == src_bytes);  // the input is never touched
}

// w (with its Marlin section) written natively to `native`, then copied compact (codes only in
// the section) to `compact`, as marlin-pack --drop-native does.
static void write_native_and_compact(const QuantWeight& w, const std::string& native, const std::string& compact) {
  {
    TinyloopWriter out(native, "test");
    out.write_quant(w);
    out.commit();
  }
  TinyloopReader r(native);
  TinyloopWriter out(compact, "test");
  out.copy_config_and_attributes(r);
  out.copy_quant_with_marlin(r, r.read_quant(w.name, false), *w.marlin, CodeStorage::kMarlinOnly);
  out.commit();
}

TEST_CASE("tinyloop: a padded Marlin section (N not a multiple of 128) round-trips, native and compact, as version 4") {
  const std::string dir = scratch("tl_padded");
  std::mt19937 rng(std::random_device{}());
  QuantWeight w = test::random_quant("head", 256, 200, 128, rng);
  w.marlin = marlin_pack(w);
  REQUIRE(w.marlin->padded_n == 256);
  const std::string native = dir + "/native.tinyloop", compact = dir + "/compact.tinyloop";
  write_native_and_compact(w, native, compact);
  for (const std::string& path : {native, compact}) {
    CAPTURE(path);
    TinyloopReader r(path);
    CHECK(r.root_attributes()["format_version"] == kTinyloopPaddedFormatVersion);
    CHECK(r.info(w.name).marlin_n == 256);
    const QuantWeight g = r.read_quant(w.name, true);
    CHECK(g.N == 200);
    CHECK(g.q == w.q);
    CHECK(g.scale == w.scale);
    REQUIRE(g.marlin);
    CHECK(g.marlin->padded_n == 256);
    CHECK(g.marlin->B == w.marlin->B);
    CHECK(g.marlin->s == w.marlin->s);
    CHECK(g.marlin->delta == w.marlin->delta);  // compact: derived, padding columns 0 as stored
  }
  // The section's N must be the weight's own or its padded count; and a padded section needs version 4.
  auto with = [&](const std::string& name, const std::function<void(hid_t)>& edit) {
    const std::string p = dir + "/" + name;
    std::filesystem::copy_file(native, p, std::filesystem::copy_options::overwrite_existing);
    hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    edit(f);
    H5Fclose(f);
    return p;
  };
  const std::string n384 = with("n384.tinyloop", [](hid_t f) {
    h5::Handle g = h5::open_group(f, "/quant/head/marlin", "t");
    H5Adelete(g, "N");
    h5::write_attr(g, "N", int64_t(384), "t");
  });
  CHECK_THROWS_WITH_AS(TinyloopReader(n384).read_quant("head", true), doctest::Contains("N = 384: expected 200 or 256"),
                       Error);
  const std::string v3 = with("v3.tinyloop", [](hid_t f) {
    h5::Handle g = h5::open_group(f, "/", "t");
    H5Adelete(g, "format_version");
    h5::write_attr(g, "format_version", int64_t(kTinyloopFamilyFormatVersion), "t");
  });
  CHECK_THROWS_WITH_AS(TinyloopReader(v3).read_quant("head", true), doctest::Contains("a padded Marlin section in a file of format_version 3"),
                       Error);
}

TEST_CASE("tinyloop: a compact weight (codes only in the Marlin section) reads back as the native one") {
  const std::string dir = scratch("tl_compact");
  std::mt19937 rng(std::random_device{}());
  // Grouped and per-column (the two scale permutations), the smallest packable shape and one
  // with several 16 x 64 tiles in both directions.
  for (const auto& [K, N, gs] : {std::tuple<int64_t, int64_t, int64_t>{128, 128, 128}, {384, 256, 128}, {256, 384, 256}}) {
    CAPTURE(K);
    CAPTURE(N);
    CAPTURE(gs);
    QuantWeight w = test::random_quant("blk0.mlp_up", K, N, gs, rng);
    w.marlin = marlin_pack(w);
    const std::string native = dir + "/native.tinyloop", compact = dir + "/compact.tinyloop";
    write_native_and_compact(w, native, compact);
    TinyloopReader c(compact);
    CHECK(c.root_attributes()["format_version"] == kTinyloopCompactFormatVersion);
    const EntryInfo e = c.info(w.name);
    CHECK(e.compact);
    CHECK(e.has_marlin);
    // One copy of the codes: B (K * N / 2 bytes) + s + zero; no q, scale or delta.
    CHECK(e.stored_bytes < uint64_t(K * N / 2 + 2 * 2 * w.groups() * N) + 4096);
    hid_t f = H5Fopen(compact.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK_FALSE(h5::exists(f, "/quant/blk0.mlp_up/q"));
    CHECK_FALSE(h5::exists(f, "/quant/blk0.mlp_up/scale"));
    CHECK_FALSE(h5::exists(f, "/quant/blk0.mlp_up/marlin/delta"));
    H5Fclose(f);
    for (bool with_marlin : {false, true}) {
      const QuantWeight g = c.read_quant(w.name, with_marlin);
      CHECK(g.q == w.q);
      CHECK(g.scale == w.scale);
      CHECK(g.zero == w.zero);
      CHECK(g.provenance == w.provenance);
      CHECK(bool(g.marlin) == with_marlin);
      if (with_marlin) {
        CHECK(g.marlin->B == w.marlin->B);
        CHECK(g.marlin->s == w.marlin->s);
        CHECK(g.marlin->delta == w.marlin->delta);  // recomputed: the same bits marlin_pack wrote
      }
    }
    // And back to native from the compact file: q and scale are written again from the decode.
    const std::string again = dir + "/again.tinyloop";
    {
      TinyloopWriter out(again, "test");
      out.copy_quant_with_marlin(c, c.read_quant(w.name, false), *w.marlin, CodeStorage::kNative);
      out.commit();
    }
    TinyloopReader a(again);
    CHECK(a.root_attributes()["format_version"] == kTinyloopFormatVersion);
    CHECK_FALSE(a.info(w.name).compact);
    const QuantWeight g = a.read_quant(w.name);
    CHECK(g.q == w.q);
    CHECK(g.scale == w.scale);
    CHECK(g.marlin->delta == w.marlin->delta);
    // A copied compact entry keeps the file at version 2.
    const std::string copied = dir + "/copied.tinyloop";
    {
      TinyloopWriter out(copied, "test");
      out.copy_entry(c, w.name);
      out.commit();
    }
    CHECK(TinyloopReader(copied).root_attributes()["format_version"] == kTinyloopCompactFormatVersion);
  }
  // A compact weight needs its section; an unknown codes value is refused by name.
  QuantWeight w = test::random_quant("w", 128, 128, 128, rng);
  {
    TinyloopWriter out(dir + "/x.tinyloop", "test");
    require_throws_with([&] { out.write_quant(w, CodeStorage::kMarlinOnly); }, {"needs its Marlin section"});
  }
  w.marlin = marlin_pack(w);
  const std::string bad = dir + "/bad.tinyloop";
  {
    TinyloopWriter out(bad, "test");
    out.write_quant(w, CodeStorage::kMarlinOnly);
    out.commit();
  }
  hid_t f = H5Fopen(bad.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  {
    h5::Handle g(H5Gopen2(f, "/quant/w", H5P_DEFAULT), H5Gclose);
    h5::write_attr(g, "codes", "nibbles", bad);
  }
  H5Fclose(f);
  require_throws_with([&] { TinyloopReader(bad).read_quant("w"); }, {"codes = 'nibbles'", "/quant/w"});
  f = H5Fopen(bad.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  {
    h5::Handle g(H5Gopen2(f, "/quant/w", H5P_DEFAULT), H5Gclose);
    h5::write_attr(g, "codes", "marlin", bad);
    H5Ldelete(f, "/quant/w/marlin", H5P_DEFAULT);
  }
  H5Fclose(f);
  require_throws_with([&] { TinyloopReader(bad).read_quant("w"); }, {"without its marlin/ section"});
}

TEST_CASE("tinyloop: a flipped byte inside a chunk is caught by the checksum") {
  const std::string dir = scratch("tl_checksum");
  std::mt19937 rng(3);
  const std::string p = dir + "/c.tinyloop";
  {
    TinyloopWriter w(p, "test");
    w.write_dense(random_dense("w", DType::F32, {64, 64}, rng));
    w.commit();
  }
  haddr_t addr = 0;
  hsize_t size = 0;
  {
    hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/tensors/w", H5P_DEFAULT);
    hsize_t offset[2];
    unsigned mask = 0;
    hid_t sp = H5Dget_space(d);
    REQUIRE(H5Dget_chunk_info(d, sp, 0, offset, &mask, &addr, &size) >= 0);
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(f);
  }
  REQUIRE(size == 64 * 64 * 4 + 4);  // data + the 4-byte Fletcher32 checksum
  auto bytes = test::slurp(p);
  bytes[size_t(addr) + 1000] ^= 0x10;  // one bit of one float
  test::spit(p, bytes);
  TinyloopReader r(p);  // metadata is intact
  require_throws_with([&] { r.read_dense("w"); }, {p, "/tensors/w", "checksum"});
}

TEST_CASE("tinyloop: bad inputs give one clear error naming file, item and expectation") {
  const std::string dir = scratch("tl_bad");
  std::mt19937 rng(17);

  SUBCASE("empty file") {
    test::spit(dir + "/e.tinyloop", std::string());
    require_throws_with([&] { TinyloopReader r(dir + "/e.tinyloop"); }, {"e.tinyloop", "empty file"});
  }
  SUBCASE("wrong magic") {
    test::spit(dir + "/m.tinyloop", std::string("PK\x03\x04 this is a zip, not HDF5"));
    require_throws_with([&] { TinyloopReader r(dir + "/m.tinyloop"); }, {"HDF5 signature"});
  }
  SUBCASE("truncated file") {
    const std::string p = write_sample(dir, rng);
    auto bytes = test::slurp(p);
    bytes.resize(bytes.size() / 2);
    test::spit(p, bytes);
    require_throws_with(
        [&] {
          TinyloopReader r(p);
          r.read_quant("blk0.mlp_up");
        },
        {p});
  }
  SUBCASE("directory where a file was expected") {
    require_throws_with([&] { TinyloopReader r(dir); }, {dir, "is a directory"});
  }
  SUBCASE("missing file") {
    require_throws_with([&] { TinyloopReader r(dir + "/nope.tinyloop"); }, {"nope.tinyloop", "No such file"});
  }
  SUBCASE("HDF5 file that is not a .tinyloop") {
    const std::string p = dir + "/other.h5";
    hid_t f = tl::h5::create_file(p, p).release();  // HDF5 1.10 format: readers require it
    H5Fclose(f);
    require_throws_with([&] { TinyloopReader r(p); }, {"'format' is missing"});
  }
  SUBCASE("unsupported format version") {
    const std::string p = write_sample(dir, rng);
    {
      RawFile rf(p);
      hid_t root = H5Gopen2(rf.f, "/", H5P_DEFAULT);
      h5::write_attr(root, "format_version", 5, p);
      H5Gclose(root);
    }
    require_throws_with([&] { TinyloopReader r(p); }, {"unsupported format_version 5", "reads versions 1 to 4"});
  }
  SUBCASE("missing dataset") {
    const std::string p = write_sample(dir, rng);
    { RawFile rf(p); H5Ldelete(rf.f, "/quant/blk0.mlp_up/zero", H5P_DEFAULT); }
    TinyloopReader r(p);
    require_throws_with([&] { r.read_quant("blk0.mlp_up"); }, {p, "/quant/blk0.mlp_up/zero", "missing dataset"});
  }
  SUBCASE("wrong dtype") {
    const std::string p = write_sample(dir, rng);
    {
      RawFile rf(p);
      H5Ldelete(rf.f, "/quant/blk0.mlp_up/scale", H5P_DEFAULT);
      std::vector<float> s(4 * 37, 0.01f);
      h5::write_dataset(rf.f, "/quant/blk0.mlp_up/scale", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4, 37}, s.data(), p);
    }
    TinyloopReader r(p);
    require_throws_with([&] { r.read_quant("blk0.mlp_up"); }, {"/quant/blk0.mlp_up/scale", "float16"});
  }
  SUBCASE("wrong shape") {
    const std::string p = write_sample(dir, rng);
    {
      RawFile rf(p);
      H5Ldelete(rf.f, "/quant/blk0.mlp_up/q", H5P_DEFAULT);
      std::vector<uint8_t> q(64 * 37, 1);  // one code per byte: the unpacked layout
      h5::write_dataset(rf.f, "/quant/blk0.mlp_up/q", H5T_STD_U8LE, H5T_NATIVE_UINT8, {64, 37}, q.data(), p);
    }
    TinyloopReader r(p);
    require_throws_with([&] { r.read_quant("blk0.mlp_up"); }, {"/quant/blk0.mlp_up/q", "expected shape [64, 19]"});
  }
  SUBCASE("NaN in a dense tensor is refused, naming it") {
    Tensor t = random_dense("norm.weight", DType::F32, {8, 8}, rng);
    t.as<float>()[42] = std::nanf("");
    TinyloopWriter w(dir + "/nan.tinyloop", "test");
    require_throws_with([&] { w.write_dense(t); }, {"norm.weight", "NaN at flat index 42"});
    // and a file with one written by someone else is refused on read
    const std::string p = write_sample(dir, rng);
    {
      RawFile rf(p);
      std::vector<float> v(4, 1.f);
      v[3] = INFINITY;
      h5::write_dataset(rf.f, "/tensors/bad", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4}, v.data(), p);
    }
    TinyloopReader r(p);
    require_throws_with([&] { r.read_dense("bad"); }, {"bad", "Inf at flat index 3"});
  }
  SUBCASE("Inf scale in a quantized weight is refused") {
    QuantWeight q = test::random_quant("w", 32, 8, 16, rng);
    q.scale[3] = 0x7c00;
    TinyloopWriter w(dir + "/inf.tinyloop", "test");
    require_throws_with([&] { w.write_quant(q); }, {"w", "scale[0, 3]", "finite"});
  }
  SUBCASE("unwritable output: a path under a regular file, a missing folder, a directory") {
    test::spit(dir + "/somefile", std::string("x"));
    require_throws_with([&] { TinyloopWriter w(dir + "/somefile/out.tinyloop", "t"); }, {"is not a folder"});
    require_throws_with([&] { TinyloopWriter w(dir + "/missing/out.tinyloop", "t"); }, {"does not exist"});
    require_throws_with([&] { TinyloopWriter w(dir, "t"); }, {"is a directory"});
    CHECK(test::count_entries(dir) == 1);
  }
  SUBCASE("an uncommitted writer leaves nothing behind") {
    {
      TinyloopWriter w(dir + "/out.tinyloop", "t");
      w.write_dense(random_dense("x", DType::F32, {4}, rng));
    }
    CHECK(test::count_entries(dir) == 0);
  }
}
