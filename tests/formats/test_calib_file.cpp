// Calibration files: tinyloop-calib round trip, the golden layout, bad inputs.
#include <doctest/doctest.h>

#include <functional>

#include <hdf5.h>

#include "fixtures.h"
#include "formats/calib_file.h"
#include "core/error.h"
#include "formats/h5_write.h"

using namespace tl;

namespace {
Hessian random_h(const std::string& name, int64_t K, std::mt19937& rng) {
  Hessian h;
  h.name = name;
  h.K = K;
  h.nsamples = 128;
  std::normal_distribution<float> nd;
  h.H.resize(size_t(K * K));
  for (auto& v : h.H) v = nd(rng);
  return h;
}
}  // namespace

TEST_CASE("calib: write / read round trip") {
  const std::string dir = test::scratch("calib_rt");
  std::mt19937 rng(8);
  std::vector<Hessian> hs = {random_h("blk0.attn_qkv", 64, rng), random_h("blk0.mlp_down", 176, rng),
                             random_h("blk1.mlp_up", 1, rng)};
  {
    CalibWriter w(dir + "/c.h5");
    for (const auto& h : hs) w.write(h);
    w.commit();
  }
  CalibReader r(dir + "/c.h5");
  CHECK(r.names() == std::vector<std::string>{"blk0.attn_qkv", "blk0.mlp_down", "blk1.mlp_up"});
  for (const auto& h : hs) {
    const Hessian g = r.read(h.name);
    CHECK(g.K == h.K);
    CHECK(g.nsamples == h.nsamples);
    CHECK(g.H == h.H);
  }
  CHECK(!r.has("nope"));
  CHECK(test::error_message([&] { r.read("nope"); }).find("missing dataset") != std::string::npos);
}

TEST_CASE("calib: the golden layout (root H + nsamples) is read as \"H\"") {
  const std::string dir = test::scratch("calib_golden");
  const std::string p = dir + "/g.h5";
  std::mt19937 rng(9);
  const Hessian h = random_h("H", 32, rng);
  hid_t f = tl::h5::create_file(p, p).release();  // HDF5 1.10 format: readers require it
  h5::write_dataset(f, "H", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {32, 32}, h.H.data(), p);
  hid_t root = H5Gopen2(f, "/", H5P_DEFAULT);
  h5::write_attr(root, "nsamples", 8, p);
  H5Gclose(root);
  H5Fclose(f);
  CalibReader r(p);
  CHECK(r.names() == std::vector<std::string>{"H"});
  const Hessian g = r.read("H");
  CHECK(g.nsamples == 8);
  CHECK(g.H == h.H);
  // The real golden file, when the checkout has it.
  const std::string real = std::string(TL_GOLDEN_DIR) + "/gptq_256x128_calib.h5";
  if (test::file_exists(real)) {
    const Hessian gh = CalibReader(real).read("H");
    CHECK(gh.K == 256);
    CHECK(gh.nsamples == 8);
  }
}

TEST_CASE("calib: bad inputs") {
  const std::string dir = test::scratch("calib_bad");
  std::mt19937 rng(10);
  const std::string p = dir + "/c.h5";
  SUBCASE("wrong dtype") {
    hid_t f = tl::h5::create_file(p, p).release();  // HDF5 1.10 format: readers require it
    std::vector<double> H(16, 1.0);
    h5::write_dataset(f, "H", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {4, 4}, H.data(), p);
    hid_t root = H5Gopen2(f, "/", H5P_DEFAULT);
    h5::write_attr(root, "nsamples", 8, p);
    H5Gclose(root);
    H5Fclose(f);
    CHECK(test::error_message([&] { CalibReader(p).read("H"); }) == p + ": /H: expected dtype float32");
  }
  SUBCASE("not square") {
    hid_t f = tl::h5::create_file(p, p).release();  // HDF5 1.10 format: readers require it
    std::vector<float> H(12, 1.f);
    h5::write_dataset(f, "H", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {3, 4}, H.data(), p);
    hid_t root = H5Gopen2(f, "/", H5P_DEFAULT);
    h5::write_attr(root, "nsamples", 8, p);
    H5Gclose(root);
    H5Fclose(f);
    CHECK(test::error_message([&] { CalibReader(p).read("H"); }).find("square shape [K, K], found [3, 4]") != std::string::npos);
  }
  SUBCASE("some other HDF5 file") {
    hid_t f = tl::h5::create_file(p, p).release();  // HDF5 1.10 format: readers require it
    H5Fclose(f);
    CHECK(test::error_message([&] { CalibReader r(p); }).find("not a calibration file") != std::string::npos);
  }
  SUBCASE("NaN refused on write, nothing left behind") {
    Hessian h = random_h("w", 4, rng);
    h.H[5] = NAN;
    {
      CalibWriter w(p);
      CHECK(test::error_message([&] { w.write(h); }).find("w: non-finite value at flat index 5") != std::string::npos);
    }
    CHECK(test::count_entries(dir) == 0);
  }
  SUBCASE("directory / empty file") {
    CHECK(test::error_message([&] { CalibReader r(dir); }).find("is a directory") != std::string::npos);
    test::spit(p, std::string());
    CHECK(test::error_message([&] { CalibReader r(p); }).find("empty file") != std::string::npos);
  }
}
