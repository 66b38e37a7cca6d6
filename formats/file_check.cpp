#include "formats/file_check.h"

#include <cerrno>
#include <cstring>

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

namespace tl {

std::string special_kind(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "";
}

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    throw Error(std::string(std::strerror(errno)) + "; expected " + what, path);
  if (S_ISDIR(st.st_mode)) throw Error("is a directory; expected " + what, path);
  if (!S_ISREG(st.st_mode)) {
    const std::string kind = special_kind(path);
    throw Error((kind.empty() ? "is not a regular file" : "is " + kind) + "; expected " + what, path);
  }
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

namespace tl {

namespace {

struct Identity {
  bool exists = false, chardev = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string key;  // resolved path, for outputs that do not exist yet
};

std::string resolved_path(const std::string& path) {
  if (path == "-") return "<stdout>";
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf)) return buf;
  // Not there yet: the resolved folder plus the name (a dangling link's target included).
  std::string p = path;
  char link[PATH_MAX];
  for (int depth = 0; depth < 40; ++depth) {
    const ssize_t n = readlink(p.c_str(), link, sizeof link - 1);
    if (n < 0) break;
    const std::string l(link, size_t(n));
    const size_t slash = p.find_last_of('/');
    p = (l[0] == '/' || slash == std::string::npos) ? l : p.substr(0, slash + 1) + l;
  }
  const size_t slash = p.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : p.substr(0, slash));
  const std::string base = slash == std::string::npos ? p : p.substr(slash + 1);
  return (realpath(dir.c_str(), buf) ? std::string(buf) : dir) + "/" + base;
}

Identity identity(const std::string& path) {
  Identity id;
  struct stat st {};
  if (path != "-" && stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.chardev = S_ISCHR(st.st_mode);
    id.dev = st.st_dev;
    id.ino = st.st_ino;
  }
  id.key = resolved_path(path);
  return id;
}

bool same(const Identity& a, const Identity& b) {
  if (a.exists && b.exists) return a.dev == b.dev && a.ino == b.ino;
  return !a.exists && !b.exists && a.key == b.key;
}

}  // namespace

void check_no_aliases(const std::vector<PathArg>& inputs, const std::vector<PathArg>& outputs) {
  struct In {
    const PathArg* arg;
    Identity id;
    std::string what;  // the file inside an input folder, or empty
  };
  std::vector<In> ins;
  for (const PathArg& a : inputs) {
    if (a.path.empty()) continue;
    ins.push_back({&a, identity(a.path), ""});
    if (!is_directory(a.path)) continue;
    if (DIR* d = opendir(a.path.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string f = a.path + "/" + e->d_name;
        if (e->d_name[0] != '.' && is_regular_file(f)) ins.push_back({&a, identity(f), e->d_name});
      }
      closedir(d);
    }
  }
  std::vector<std::pair<const PathArg*, Identity>> outs;
  for (const PathArg& o : outputs) {
    if (o.path.empty()) continue;
    const Identity id = identity(o.path);
    for (const In& in : ins)
      if (id.exists && in.id.exists && same(id, in.id))
        throw Error("is the same file as the input " +
                        (in.what.empty() ? in.arg->flag + " " + in.arg->path : in.what + " in " + in.arg->path) +
                        "; writing it would destroy that input. Choose another path",
                    o.path, o.flag);
    for (const auto& [prev, pid] : outs)
      if (same(id, pid) && !(id.chardev && pid.chardev))
        throw Error("is also the output of " + prev->flag + "; give each output its own path", o.path, o.flag);
    outs.emplace_back(&o, id);
  }
}

}  // namespace tl
