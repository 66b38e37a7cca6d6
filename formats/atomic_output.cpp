#include "formats/atomic_output.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/error.h"

namespace tl {

static std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

static std::string base_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

AtomicOutput::AtomicOutput(const std::string& target) : target_(target) {
  if (target.empty()) throw Error("empty output path");
  const std::string base = base_of(target);
  if (base.empty() || base == "." || base == "..")
    throw Error("output path names a folder; expected a file path", target);
  struct stat st {};
  if (stat(target.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw Error("output path is a directory; expected a file path", target);

  // Check the folder up front so a long conversion does not fail at the very end.
  const std::string dir = dir_of(target);
  if (stat(dir.c_str(), &st) != 0)
    throw Error("cannot write output: folder '" + dir + "' does not exist", target);
  if (!S_ISDIR(st.st_mode))
    throw Error("cannot write output: '" + dir + "' is not a folder", target);
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error("cannot write output: folder '" + dir + "' is not writable", target);

  // Reserve the temporary name with O_EXCL: this also proves the folder accepts new files
  // (access() says yes to root even on a read-only mount).
  static std::atomic<unsigned> counter{0};
  tmp_ = dir + "/." + base + ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  const int fd = open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(std::string("cannot create a temporary file in '") + dir + "': " + std::strerror(errno),
                target);
  close(fd);
}

AtomicOutput::~AtomicOutput() {
  if (!committed_ && !tmp_.empty()) unlink(tmp_.c_str());
}

void AtomicOutput::commit() {
  if (committed_) return;
  if (std::rename(tmp_.c_str(), target_.c_str()) != 0)
    throw Error(std::string("cannot rename the temporary file into place: ") + std::strerror(errno),
                target_);
  committed_ = true;
}

}  // namespace tl
