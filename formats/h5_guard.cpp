#include "formats/h5_guard.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <set>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "formats/h5_util.h"

namespace tl::h5 {

uint32_t lookup3(const uint8_t* k, size_t length, uint32_t initval) {
  auto rot = [](uint32_t x, int r) { return (x << r) | (x >> (32 - r)); };
  uint32_t a, b, c;
  a = b = c = 0xdeadbeefu + uint32_t(length) + initval;
  while (length > 12) {
    a += k[0] + (uint32_t(k[1]) << 8) + (uint32_t(k[2]) << 16) + (uint32_t(k[3]) << 24);
    b += k[4] + (uint32_t(k[5]) << 8) + (uint32_t(k[6]) << 16) + (uint32_t(k[7]) << 24);
    c += k[8] + (uint32_t(k[9]) << 8) + (uint32_t(k[10]) << 16) + (uint32_t(k[11]) << 24);
    // mix(a, b, c)
    a -= c; a ^= rot(c, 4);  c += b;
    b -= a; b ^= rot(a, 6);  a += c;
    c -= b; c ^= rot(b, 8);  b += a;
    a -= c; a ^= rot(c, 16); c += b;
    b -= a; b ^= rot(a, 19); a += c;
    c -= b; c ^= rot(b, 4);  b += a;
    length -= 12;
    k += 12;
  }
  switch (length) {  // the last 0..12 bytes; every case falls through
    case 12: c += uint32_t(k[11]) << 24; [[fallthrough]];
    case 11: c += uint32_t(k[10]) << 16; [[fallthrough]];
    case 10: c += uint32_t(k[9]) << 8; [[fallthrough]];
    case 9: c += k[8]; [[fallthrough]];
    case 8: b += uint32_t(k[7]) << 24; [[fallthrough]];
    case 7: b += uint32_t(k[6]) << 16; [[fallthrough]];
    case 6: b += uint32_t(k[5]) << 8; [[fallthrough]];
    case 5: b += k[4]; [[fallthrough]];
    case 4: a += uint32_t(k[3]) << 24; [[fallthrough]];
    case 3: a += uint32_t(k[2]) << 16; [[fallthrough]];
    case 2: a += uint32_t(k[1]) << 8; [[fallthrough]];
    case 1: a += k[0]; break;
    case 0: return c;
  }
  // final(a, b, c)
  c ^= b; c -= rot(b, 14);
  a ^= c; a -= rot(c, 11);
  b ^= a; b -= rot(a, 25);
  c ^= b; c -= rot(b, 16);
  a ^= c; a -= rot(c, 4);
  b ^= a; b -= rot(a, 14);
  c ^= b; c -= rot(b, 24);
  return c;
}

namespace {

constexpr unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
constexpr size_t kSuperblockV2Bytes = 48;  // with 8-byte offsets and lengths
constexpr uint64_t kUndefined = ~uint64_t(0);

uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

const char* kRewrite =
    "rewrite it with checksummed metadata: h5repack --low=2 --high=2 OLD NEW (docs/format.md, "
    "\"Reading untrusted files\")";

}  // namespace

Superblock parse_superblock(const uint8_t* head, size_t n, uint64_t file_size, const std::string& file) {
  if (n < 9 || std::memcmp(head, kSignature, 8) != 0)
    throw Error("not an HDF5 file: expected the HDF5 signature at byte 0", file);
  Superblock sb;
  sb.version = head[8];
  if (sb.version < 2)
    throw Error("HDF5 superblock version " + std::to_string(sb.version) +
                    " has no metadata checksums (written by an older tinyloop-tools, or by h5py without "
                    "libver='v110'); " + kRewrite,
                file);
  if (sb.version > 3)
    throw Error("HDF5 superblock version " + std::to_string(sb.version) + ": this build reads versions 2 and 3", file);
  if (n < kSuperblockV2Bytes) throw Error("truncated: the HDF5 superblock is cut off", file);
  if (head[9] != 8 || head[10] != 8)
    throw Error("HDF5 offsets of " + std::to_string(head[9]) + " and lengths of " + std::to_string(head[10]) +
                    " bytes: expected 8 and 8", file);
  const uint32_t stored = uint32_t(head[44]) | uint32_t(head[45]) << 8 | uint32_t(head[46]) << 16 |
                          uint32_t(head[47]) << 24;
  if (lookup3(head, 44) != stored) throw Error("HDF5 superblock checksum mismatch: the file is corrupt", file);
  if (head[11] != 0)
    throw Error("the file is marked as still open for writing (flags " + std::to_string(head[11]) +
                    "): the program that wrote it did not finish", file);
  const uint64_t base = le64(head + 12);
  sb.extension = le64(head + 20);
  sb.eof = le64(head + 28);
  sb.root = le64(head + 36);
  if (base != 0) throw Error("HDF5 base address " + std::to_string(base) + ": expected 0 (no user block)", file);
  if (sb.eof > file_size)
    throw Error("truncated: the HDF5 superblock says " + std::to_string(sb.eof) + " bytes, the file has " +
                    std::to_string(file_size), file);
  if (sb.root < kSuperblockV2Bytes || sb.root >= sb.eof)
    throw Error("HDF5 root object address " + std::to_string(sb.root) + " is outside the file", file);
  if (sb.extension != kUndefined && (sb.extension < kSuperblockV2Bytes || sb.extension >= sb.eof))
    throw Error("HDF5 superblock extension address " + std::to_string(sb.extension) + " is outside the file", file);
  return sb;
}

Superblock validate_hdf5_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw Error(std::strerror(errno), path);
  if (S_ISDIR(st.st_mode)) throw Error("is a directory; expected an HDF5 file", path);
  if (!S_ISREG(st.st_mode)) throw Error("is not a regular file (a FIFO or device?); expected an HDF5 file", path);
  if (st.st_size == 0) throw Error("empty file; expected an HDF5 file", path);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(std::string("cannot open: ") + std::strerror(errno), path);
  uint8_t head[64] = {};
  const ssize_t got = ::read(fd, head, sizeof head);
  close(fd);
  if (got < 0) throw Error(std::string("cannot read: ") + std::strerror(errno), path);
  return parse_superblock(head, size_t(got), uint64_t(st.st_size), path);
}

// ---- the guarded child ----

namespace {

uint64_t current_address_space() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  if (f) {
    if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  return uint64_t(pages) * uint64_t(sysconf(_SC_PAGESIZE));
}

std::string signal_text(int sig) {
  const char* name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGABRT ? "SIGABRT" :
                     sig == SIGFPE ? "SIGFPE" : sig == SIGILL ? "SIGILL" : sig == SIGKILL ? "SIGKILL" : nullptr;
  return name ? name : "signal " + std::to_string(sig);
}

}  // namespace

void run_guarded(const std::function<void()>& work, const GuardLimits& limits, uint64_t file_size,
                 const std::string& file, const std::string& what) {
#ifdef TL_GUARD_IN_PROCESS
  // The fuzz tree (docs/fuzzing.md): the walk runs here, instrumented, and whatever it provokes
  // in libhdf5 is a finding instead of a refused file. A fork of an ASan process costs ~8 ms.
  (void)limits, (void)file_size, (void)file, (void)what;
  work();
#else
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("cannot create a pipe: ") + std::strerror(errno), file);
  std::fflush(nullptr);  // the child must not flush the parent's buffered output again
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw Error(std::string("cannot fork the guarded check: ") + std::strerror(errno), file);
  }
  if (pid == 0) {
    close(fds[0]);
    struct rlimit no_core {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    const uint64_t as = current_address_space() + limits.address_space;
    struct rlimit lim {as, as};
    setrlimit(RLIMIT_AS, &lim);
    // The child's crash must be a crash the parent sees, not a test framework's or a
    // sanitizer's report from inside the child: default dispositions for the fatal signals.
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGPIPE}) signal(sig, SIG_DFL);
    std::string msg;
    int status = 0;
    try {
      work();
    } catch (const Error& e) {
      msg = e.what();
      status = 1;
    } catch (const std::bad_alloc&) {
      msg = "the HDF5 library ran out of memory (limit " + std::to_string(limits.address_space >> 20) + " MiB)";
      status = 1;
    } catch (const std::exception& e) {
      msg = e.what();
      status = 1;
    }
    if (!msg.empty()) {
      const ssize_t w = ::write(fds[1], msg.data(), msg.size());
      (void)w;
    }
    _exit(status);  // no atexit handlers, no flushing of the parent's streams
  }
  close(fds[1]);
  const double budget = limits.seconds + limits.seconds_per_gib * double(file_size) / double(uint64_t(1) << 30);
  std::string msg;
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(budget);
  for (;;) {
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    struct pollfd p {fds[0], POLLIN, 0};
    const int r = poll(&p, 1, int(left * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;  // timeout is rechecked above
    char buf[4096];
    const ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // the child closed its end: it has exited
    if (msg.size() < 8192) msg.append(buf, size_t(got));
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    throw Error(what + " did not finish within " + std::to_string(int(budget + 0.5)) +
                    " s (the HDF5 library loops on corrupt metadata): the file is corrupt", file);
  if (WIFSIGNALED(wstatus))
    throw Error(what + ": the HDF5 library crashed (" + signal_text(WTERMSIG(wstatus)) +
                    ") reading the file in a guarded child process: the file is corrupt", file);
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return;
  // The child's own message is already "file: item: what".
  throw Error(msg.empty() ? what + ": failed (exit " + std::to_string(WEXITSTATUS(wstatus)) + ")" : msg);
#endif
}

// ---- the metadata walk ----

namespace {

struct Walk {
  const std::string& file;
  std::set<std::pair<unsigned long, haddr_t>> seen;  // (fileno, address): hard-link cycles
  size_t objects = 0;

  void fail(const std::string& path, const std::string& what) {
    throw Error("corrupt HDF5 metadata: " + what + " (the file is damaged; copy it again from its source)", file, path);
  }

  void attributes(hid_t obj, const std::string& path) {
    H5O_info_t info;
    if (H5Oget_info2(obj, &info, H5O_INFO_NUM_ATTRS) < 0) fail(path, "object header");
    for (hsize_t i = 0; i < info.num_attrs; ++i) {
      Handle a(H5Aopen_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, i, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      if (!a.valid()) fail(path, "attribute " + std::to_string(i));
      Handle type(H5Aget_type(a), H5Tclose), space(H5Aget_space(a), H5Sclose);
      if (!type.valid() || !space.valid()) fail(path, "attribute " + std::to_string(i) + " type or shape");
      const hssize_t npoints = H5Sget_simple_extent_npoints(space);
      const size_t size = H5Tget_size(type);
      if (npoints < 0 || size == 0) fail(path, "attribute " + std::to_string(i) + " shape");
      if (uint64_t(npoints) * size > (uint64_t(64) << 20)) fail(path, "attribute larger than 64 MiB");
      const bool vlen = H5Tdetect_class(type, H5T_VLEN) > 0 ||
                        (H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0);
      std::vector<unsigned char> buf(size_t(npoints) * size + 16);
      if (H5Aread(a, type, buf.data()) < 0) fail(path, "attribute " + std::to_string(i) + " value");
      if (vlen) H5Dvlen_reclaim(type, space, H5P_DEFAULT, buf.data());
    }
  }

  void dataset(hid_t d, const std::string& path) {
    Handle type(H5Dget_type(d), H5Tclose), space(H5Dget_space(d), H5Sclose), dcpl(H5Dget_create_plist(d), H5Pclose);
    if (!type.valid() || !space.valid() || !dcpl.valid()) fail(path, "dataset type, shape or layout");
    if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
      hsize_t chunks = 0;
      if (H5Dget_num_chunks(d, space, &chunks) < 0) fail(path, "chunk index");
      std::vector<hsize_t> offset(size_t(std::max(1, H5Sget_simple_extent_ndims(space))));
      for (hsize_t i = 0; i < chunks; ++i) {
        unsigned mask = 0;
        haddr_t addr = 0;
        hsize_t size = 0;
        if (H5Dget_chunk_info(d, space, i, offset.data(), &mask, &addr, &size) < 0) fail(path, "chunk index entry");
      }
    }
    (void)H5Dget_storage_size(d);
  }

  void object(hid_t loc, const std::string& name, const std::string& path, int depth) {
    if (depth > 64) fail(path, "groups nested more than 64 deep");
    if (++objects > 1000000) fail(path, "more than a million objects");
    Handle obj(H5Oopen(loc, name.c_str(), H5P_DEFAULT), H5Oclose);
    if (!obj.valid()) fail(path, "object header");
    H5O_info_t info;
    if (H5Oget_info2(obj, &info, H5O_INFO_BASIC) < 0) fail(path, "object header");
    if (!seen.insert({info.fileno, info.addr}).second) return;  // a second hard link
    attributes(obj, path);
    if (info.type == H5O_TYPE_DATASET) dataset(obj, path);
    if (info.type != H5O_TYPE_GROUP) return;
    std::vector<std::string> links;
    hsize_t idx = 0;
    auto collect = [](hid_t, const char* n, const H5L_info_t* li, void* out) -> herr_t {
      if (li->type == H5L_TYPE_HARD) static_cast<std::vector<std::string>*>(out)->push_back(n);
      return 0;
    };
    if (H5Literate(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, collect, &links) < 0) fail(path, "group links");
    for (const std::string& l : links) object(obj, l, path == "/" ? "/" + l : path + "/" + l, depth + 1);
  }
};

}  // namespace

void walk_hdf5_metadata(const std::string& path) {
  quiet_errors();
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw Error("cannot open HDF5 file (corrupt superblock or root group)", path);
  Handle file(f, H5Fclose);
  Walk w{path, {}, 0};
  w.object(file, "/", "/", 0);
}

void check_untrusted_hdf5(const std::string& path) {
  validate_hdf5_file(path);
  struct stat st {};
  stat(path.c_str(), &st);
  run_guarded([&] { walk_hdf5_metadata(path); }, GuardLimits{}, uint64_t(st.st_size), path, "reading the HDF5 metadata");
}

}  // namespace tl::h5
