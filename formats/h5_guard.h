// Opening HDF5 files that may be damaged or hostile (issue 15). libhdf5's metadata decoders
// crash, loop or allocate without bound on corrupt input, so no tool hands an input file to
// them unchecked:
//
//  1. Pre-open validation, here, in our code (validate_hdf5_file): a regular, non-empty file;
//     the HDF5 signature at byte 0; superblock version 2 or 3 (versions 0 and 1 carry no
//     metadata checksums: "written by an older build", with the h5repack command that rewrites
//     it); 8-byte offsets and lengths; base address 0; the superblock's own Jenkins lookup3
//     checksum; the end-of-file address at most the file's size (a truncated file fails here);
//     the root object header and the superblock extension inside the file; the "open for
//     writing" flags clear (a writer that never finished).
//  2. A guarded metadata walk (walk_hdf5_metadata in a child process, run_guarded): every
//     link, object header, attribute (decoded) and chunk index of the file is visited by the
//     HDF5 library in a forked child with a time limit and an address-space limit. The files
//     tinyloop-tools writes have checksummed metadata (superblock v3, object headers v2,
//     fractal heaps, v2 B-trees, fixed / extensible array chunk indexes; fixed-length strings, so
//     no unchecksummed global heap), so a flipped bit fails a checksum here. What still crashes,
//     hangs or explodes the library takes down only the child; the parent reports one line
//     naming the file, exit 2.
//  3. Only then does the tool open the file itself. Dataset bytes are protected by each chunk's
//     Fletcher32 checksum when they are read.
//
// Cost: one fork and a metadata-only walk per input file (docs/format.md, "Reading untrusted
// files", has the measurement). Open input files before starting threads that use HDF5: a fork
// while another thread holds the library's lock would stall the child until the time limit.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace tl::h5 {

// HDF5's metadata checksum: Bob Jenkins' lookup3 hashlittle, byte by byte.
uint32_t lookup3(const uint8_t* data, size_t n, uint32_t initval = 0);

struct Superblock {
  int version = 0;
  uint64_t eof = 0, root = 0, extension = 0;
};

// Step 1 on the first bytes of a file (at least 48 or the whole file): throws tl::Error naming
// `file` and what is wrong. `file_size` is the size on disk.
Superblock parse_superblock(const uint8_t* head, size_t n, uint64_t file_size, const std::string& file);
// Step 1 on a path (stat, then the first 64 bytes).
Superblock validate_hdf5_file(const std::string& path);

struct GuardLimits {
  double seconds = 10;                       // plus seconds_per_gib of file size
  double seconds_per_gib = 1;
  uint64_t address_space = uint64_t(4) << 30;  // bytes the child may map beyond what it inherited
};

// Runs `work` in a forked child under `limits`. Returns when the child ran it to the end; throws
// tl::Error(file, "<what>: ...") with the child's own error text if work threw tl::Error, or
// with what happened (a signal such as SIGSEGV, the time limit, the memory limit).
void run_guarded(const std::function<void()>& work, const GuardLimits& limits, uint64_t file_size,
                 const std::string& file, const std::string& what);

// Step 2's walk itself (runs in the child): opens `path` and visits every object, attribute and
// chunk index; throws tl::Error at the first thing the library cannot decode.
void walk_hdf5_metadata(const std::string& path);

// Steps 1 and 2 for one input file.
void check_untrusted_hdf5(const std::string& path);

}  // namespace tl::h5
