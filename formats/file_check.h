// Up-front checks on input paths, so "a directory where a file was expected", a missing file and
// an empty file get one clear message instead of a library's generic "cannot open".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tl {

// Throws tl::Error(path, "...: expected <what>") unless `path` is a non-empty regular file.
void require_regular_file(const std::string& path, const std::string& what);
// "a FIFO", "a character device", "a block device", "a socket", or "" (anything else).
std::string special_kind(const std::string& path);
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);
bool path_exists(const std::string& path);
uint64_t file_size(const std::string& path);  // 0 if missing

}  // namespace tl

namespace tl {

// One path argument of a tool: the flag it came from ("INPUT", "-o", "--json") and the path.
struct PathArg {
  std::string flag;
  std::string path;
};

// Refuses (tl::Error naming both flags) an output that is the same file as an input or as
// another output of the same run, before any work. Identity is (device, inode), so hard links
// and symbolic links are seen through; an input folder counts as itself and every file
// directly in it (a checkpoint's config.json and shards). Outputs that do not exist yet are
// compared by their resolved path; "-" is standard output. Character devices (/dev/null, a
// terminal) may be named by several outputs. Empty paths are ignored.
void check_no_aliases(const std::vector<PathArg>& inputs, const std::vector<PathArg>& outputs);

}  // namespace tl
