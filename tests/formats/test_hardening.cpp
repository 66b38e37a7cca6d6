// Readers against damaged and hostile files (issue 15): every input is either read back exactly
// or refused with tl::Error -- never a crash, a hang, undefined behaviour or an allocation the
// file does not justify.
//  - the superblock checks (signature, version, checksum, addresses, flags) on our own files;
//  - every single-byte corruption of a file we wrote is detected or harmless: read back, the
//    content equals the original, else the read threw (the checksummed metadata claim);
//  - the guard: a child that crashes, loops or over-allocates is an error, not our death;
//  - declared sizes, attribute values and config numbers from a file are range-checked.
#include <doctest/doctest.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <functional>
#include <random>

#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "fixtures.h"
#include "formats/h5_guard.h"
#include "formats/h5_util.h"
#include "formats/h5_write.h"
#include "formats/model_config.h"
#include "formats/tinyloop_file.h"

using namespace tl;
using tl::test::scratch;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string write_model(const std::string& path, std::mt19937& rng) {
  TinyloopWriter w(path, "test");
  w.write_config(test::small_config());
  Tensor t;
  t.name = "norm";
  t.dtype = DType::F32;
  t.shape = {64};
  t.data.resize(256);
  for (int i = 0; i < 64; ++i) t.as<float>()[i] = 1.0f + 0.01f * float(i);
  w.write_dense(t);
  w.write_quant(test::random_quant("blk0.mlp_up", 64, 48, 16, rng));
  w.commit();
  return path;
}

// Everything a tool would read from the file, as one comparable blob.
std::string read_everything(const std::string& path) {
  TinyloopReader r(path);
  std::string blob = r.root_attributes().dump() + r.config().architecture;
  for (const std::string& n : r.dense_names()) {
    const Tensor t = r.read_dense(n);
    blob += n + std::string(t.data.begin(), t.data.end());
  }
  for (const std::string& n : r.quant_names()) {
    const QuantWeight q = r.read_quant(n);
    blob += n + std::string(q.q.begin(), q.q.end()) + q.provenance.dump();
    blob += std::string(reinterpret_cast<const char*>(q.scale.data()), q.scale.size() * 2);
    blob += std::string(reinterpret_cast<const char*>(q.zero.data()), q.zero.size() * 2);
  }
  return blob;
}

}  // namespace

TEST_CASE("hardening: our files carry a superblock v3 whose lookup3 checksum we verify") {
  const std::string dir = scratch("hard_sb");
  std::mt19937 rng(1);
  const std::string p = write_model(dir + "/m.tinyloop", rng);
  std::vector<uint8_t> b = test::slurp(p);
  REQUIRE(b.size() > 48);
  CHECK(b[8] == 3);  // superblock version 3: HDF5 1.10 format
  const uint32_t stored = uint32_t(b[44]) | uint32_t(b[45]) << 8 | uint32_t(b[46]) << 16 | uint32_t(b[47]) << 24;
  CHECK(h5::lookup3(b.data(), 44) == stored);
  const h5::Superblock sb = h5::parse_superblock(b.data(), b.size(), b.size(), p);
  CHECK(sb.eof == b.size());

  auto refused = [&](std::vector<uint8_t> bytes, uint64_t size, const std::string& what) {
    const std::string m = error_of([&] { h5::parse_superblock(bytes.data(), bytes.size(), size, p); });
    INFO(m);
    CHECK(m.find(what) != std::string::npos);
  };
  std::vector<uint8_t> v0 = b;
  v0[8] = 0;
  refused(v0, b.size(), "superblock version 0 has no metadata checksums");
  refused(v0, b.size(), "h5repack --low=2 --high=2");
  std::vector<uint8_t> flip = b;
  flip[30] ^= 0x10;  // the end-of-file address
  refused(flip, b.size(), "superblock checksum mismatch");
  refused(b, b.size() - 1, "truncated: the HDF5 superblock says");
  std::vector<uint8_t> sig = b;
  sig[1] = 'X';
  refused(sig, b.size(), "expected the HDF5 signature");
  // A writer that never finished leaves the "open for writing" flag (with a valid checksum).
  std::vector<uint8_t> open = b;
  open[11] = 1;
  const uint32_t c = h5::lookup3(open.data(), 44);
  for (int i = 0; i < 4; ++i) open[size_t(44 + i)] = uint8_t(c >> (8 * i));
  refused(open, b.size(), "marked as still open for writing");
}

TEST_CASE("hardening: every single-byte corruption of a file we wrote is detected or harmless") {
  const std::string dir = scratch("hard_flip");
  std::mt19937 rng(2);
  const std::string p = write_model(dir + "/m.tinyloop", rng);
  const std::string want = read_everything(p);
  const std::vector<uint8_t> orig = test::slurp(p);
  // Every metadata byte is checksummed, every data byte is under a chunk's Fletcher32; 400
  // offsets drawn uniformly over the whole file, each byte inverted.
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 pick(seed);
  int detected = 0, harmless = 0;
  const std::string q = dir + "/flipped.tinyloop";
  for (int t = 0; t < 400; ++t) {
    std::vector<uint8_t> b = orig;
    const size_t at = size_t(pick() % b.size());
    b[at] ^= 0xff;
    test::spit(q, b);
    std::string got;
    const std::string err = error_of([&] { got = read_everything(q); });
    CAPTURE(at);
    if (!err.empty()) {
      ++detected;
      CHECK(err.find(q) != std::string::npos);  // the message names the file
    } else {
      ++harmless;
      CHECK(got == want);  // read back without an error: it must be the original content
    }
  }
  MESSAGE(detected << " corruptions detected, " << harmless << " in unused bytes");
  CHECK(detected > 300);
}

TEST_CASE("hardening: the guard turns a crash, a hang or an allocation storm into an error") {
  h5::GuardLimits fast;
  fast.seconds = 0.5;
  fast.seconds_per_gib = 0;
  fast.address_space = uint64_t(256) << 20;
  CHECK_NOTHROW(h5::run_guarded([] {}, fast, 0, "f", "walk"));
  const std::string segv = error_of([&] { h5::run_guarded([] { std::raise(SIGSEGV); }, fast, 0, "f", "walk"); });
  CHECK(segv.find("crashed (SIGSEGV)") != std::string::npos);
  CHECK(segv.find("f: ") == 0);
  // The guard's own timer ends the child (the message says so); a guard that did not would hang
  // this test (CTest's timeout), so no wall-clock bound is asserted here.
  const std::string hang = error_of([&] { h5::run_guarded([] { for (;;) pause(); }, fast, 0, "f", "walk"); });
  CHECK(hang.find("did not finish within") != std::string::npos);
  const std::string oom = error_of([&] {
    h5::run_guarded([] { std::vector<char> big(size_t(1) << 33, 1); (void)big; }, fast, 0, "f", "walk");
  });
  CHECK(oom.find("ran out of memory") != std::string::npos);
  const std::string own = error_of([&] {
    h5::run_guarded([] { throw Error("what the walk saw", "f", "/x"); }, fast, 0, "f", "walk");
  });
  CHECK(own == "f: /x: what the walk saw");
}

TEST_CASE("hardening: sizes, attributes and config numbers from a file are range-checked") {
  const std::string dir = scratch("hard_sizes");
  std::mt19937 rng(3);
  const std::string p = write_model(dir + "/m.tinyloop", rng);
  auto edited = [&](const std::string& name, const std::function<void(hid_t)>& edit) {
    const std::string q = dir + "/" + name + ".tinyloop";
    test::spit(q, test::slurp(p));
    hid_t f = H5Fopen(q.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(f >= 0);
    edit(f);
    H5Fclose(f);
    return q;
  };
  auto set_attr = [](hid_t f, const char* obj, const char* name, const nlohmann::json& v) {
    hid_t o = H5Oopen(f, obj, H5P_DEFAULT);
    h5::write_attr(o, name, v, "edit");
    H5Oclose(o);
  };
  // N = INT64_MAX: the reader's (N + 1) / 2 used to overflow.
  std::string q = edited("nmax", [&](hid_t f) { set_attr(f, "/quant/blk0.mlp_up", "N", INT64_MAX); });
  CHECK(error_of([&] { TinyloopReader(q).read_quant("blk0.mlp_up"); }).find("expected 0 < K, N <= 2^31") != std::string::npos);
  // Floats where integers belong: 1e300 and NaN are not converted (undefined behaviour before).
  q = edited("k1e300", [&](hid_t f) { set_attr(f, "/quant/blk0.mlp_up", "K", 1e300); });
  CHECK(error_of([&] { TinyloopReader(q).read_quant("blk0.mlp_up"); }).find("expected an integer") != std::string::npos);
  q = edited("knan", [&](hid_t f) { set_attr(f, "/quant/blk0.mlp_up", "group_size", std::nan("")); });
  CHECK(error_of([&] { TinyloopReader(q).read_quant("blk0.mlp_up"); }).find("expected an integer") != std::string::npos);
  q = edited("gs0", [&](hid_t f) { set_attr(f, "/quant/blk0.mlp_up", "group_size", 0); });
  CHECK(error_of([&] { TinyloopReader(q).check_quant("blk0.mlp_up"); }).find("0 < group_size <= K") != std::string::npos);
  q = edited("gsbig", [&](hid_t f) { set_attr(f, "/quant/blk0.mlp_up", "group_size", 128); });
  CHECK(error_of([&] { TinyloopReader(q).check_quant("blk0.mlp_up"); }).find("0 < group_size <= K") != std::string::npos);
  // A dataset that declares 2 GiB in a file of a few KiB: refused before anything is allocated.
  q = edited("declared", [&](hid_t f) {
    H5Ldelete(f, "/tensors/norm", H5P_DEFAULT);
    hsize_t dims[2] = {65536, 32768}, chunk[2] = {16, 32768};
    hid_t sp = H5Screate_simple(2, dims, nullptr), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, chunk);
    hid_t d = H5Dcreate2(f, "/tensors/norm", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
  });
  // Refused from the declared size before anything is allocated or read (the message).
  const std::string declared = error_of([&] { TinyloopReader(q).read_dense("norm"); });
  INFO(declared);
  CHECK(declared.find("declares [65536, 32768] (8.00 GiB) but the file holds only") != std::string::npos);
}

TEST_CASE("hardening: config numbers that would overflow are errors") {
  ModelConfig c = test::small_config();
  c.n_pre = INT64_MAX;  // n_pre + n_loop used to overflow
  c.n_loop = 1;
  c.loops = 1;
  CHECK(error_of([&] { c.validate("f"); }).find("n_pre <= 65536") != std::string::npos);
  nlohmann::json j;
  to_json(j, test::small_config());
  j["d_model"] = 1e300;  // int64_t(1e300) used to be undefined behaviour
  CHECK(error_of([&] { ModelConfig d; from_json(j, d); }).find("expected an integer") != std::string::npos);
  j["d_model"] = 18446744073709551615ull;
  CHECK(error_of([&] { ModelConfig d; from_json(j, d); }).find("out of range") != std::string::npos);
}

TEST_CASE("hardening: a FIFO is refused up front, never opened") {
  const std::string dir = scratch("hard_fifo");
  const std::string f = dir + "/pipe.tinyloop";
  REQUIRE(mkfifo(f.c_str(), 0644) == 0);
  // Opening a FIFO for reading blocks until a writer appears: these must refuse it by its kind
  // (the messages) without opening it; one that opened it would hang here, not pass.
  CHECK(error_of([&] { TinyloopReader r(f); }).find("is a FIFO") != std::string::npos);
  CHECK(!is_hdf5_file(f));
  CHECK(error_of([&] { h5::validate_hdf5_file(f); }).find("not a regular file") != std::string::npos);
}
