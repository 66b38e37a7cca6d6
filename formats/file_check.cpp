#include "formats/file_check.h"

#include <cerrno>
#include <cstring>

#include <sys/stat.h>

#include "formats/error.h"

namespace tl {

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    throw Error(std::string(std::strerror(errno)) + "; expected " + what, path);
  if (S_ISDIR(st.st_mode)) throw Error("is a directory; expected " + what, path);
  if (!S_ISREG(st.st_mode)) throw Error("is not a regular file; expected " + what, path);
  if (st.st_size == 0) throw Error("empty file; expected " + what, path);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
}

}  // namespace tl
