#include "formats/atomic_output.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <limits.h>
#include <mutex>
#include <sstream>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

namespace tl {

namespace {

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string errno_text(int e) { return std::strerror(e); }

// ---- temporaries that a signal must remove ----
//
// Fixed storage, so the handler only reads memory and calls unlink(2) (both async-signal-safe).
constexpr int kSlots = 32;
constexpr int kFree = 0, kClaimed = 1, kLive = 2;  // slot states
char g_tmp[kSlots][PATH_MAX];
std::atomic<int> g_state[kSlots];
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler reads these states");

constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};

extern "C" void remove_temporaries_and_die(int sig) {
  remove_live_temporaries();
  // Die of the same signal, so the parent (a shell loop, xargs, CI) sees what happened.
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : kCleanupSignals) {
      struct sigaction old {};
      sigaction(sig, nullptr, &old);
      if (old.sa_handler == SIG_IGN) continue;  // e.g. nohup: keep what the parent asked for
      struct sigaction sa {};
      sa.sa_handler = remove_temporaries_and_die;
      sigemptyset(&sa.sa_mask);
      sigaction(sig, &sa, nullptr);
    }
    // A file-size limit (ulimit -f) then fails the write with EFBIG, like a full disk fails it
    // with ENOSPC, instead of killing the process with a core dump and the temporary left.
    signal(SIGXFSZ, SIG_IGN);
  });
}

// Claims a free slot, writes the path into it, then publishes it to the handler.
int register_temporary(const std::string& path) {
  if (path.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expect = kFree;
    if (!g_state[i].compare_exchange_strong(expect, kClaimed)) continue;
    std::memcpy(g_tmp[i], path.c_str(), path.size() + 1);
    g_state[i].store(kLive, std::memory_order_release);
    return i;
  }
  return -1;  // more than kSlots outputs at once: still removed by the destructor
}

void release_slot(int slot) {
  if (slot >= 0) g_state[slot].store(kFree, std::memory_order_release);
}

// A token of this boot and pid namespace: two processes with the same token and pid are the
// same process, so a temporary whose token matches ours and whose pid is gone is stale.
const std::string& host_token() {
  static const std::string token = [] {
    std::string id;
    if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
      char buf[64] = {};
      if (std::fgets(buf, sizeof buf, f)) id = buf;
      std::fclose(f);
    }
    char ns[128] = {};
    const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    if (n > 0) id += std::string(ns, size_t(n));
    uint32_t h = 2166136261u;  // FNV-1a
    for (unsigned char c : id) h = (h ^ c) * 16777619u;
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", h);
    return std::string(hex);
  }();
  return token;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// Looks for temporaries of interrupted runs in `dir` (".<name>.tmp-<token>-<pid>-<n>", or the
// older ".<name>.tmp-<pid>-<n>"): removes the provably stale ones, reports the others.
void sweep_stale_temporaries(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() > 1 && n[0] == '.' && n.find(".tmp-") != std::string::npos) names.push_back(n);
  }
  closedir(d);
  for (const std::string& n : names) {
    std::vector<std::string> f;  // the fields after ".tmp-", split at '-'
    std::stringstream ss(n.substr(n.rfind(".tmp-") + 5));
    for (std::string part; std::getline(ss, part, '-');) f.push_back(part);
    const std::string path = dir + "/" + n;
    if (f.size() == 3 && f[0].size() == 8 && all_digits(f[1]) && all_digits(f[2])) {
      const long pid = std::atol(f[1].c_str());
      if (f[0] == host_token()) {
        if (pid == long(getpid())) continue;
        if (kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // that run is still going
        if (unlink(path.c_str()) == 0)
          notice("removed " + path + ", the temporary file of an interrupted run (pid " + f[1] + " is gone)");
      } else {
        notice("note: " + path + " looks like the temporary file of an interrupted run on another host "
               "or container (pid " + f[1] + "); remove it if no tool is writing it");
      }
    } else if (f.size() == 2 && all_digits(f[0]) && all_digits(f[1])) {
      notice("note: " + path + " looks like the temporary file of an interrupted run of an older "
             "tinyloop-tools (pid " + f[0] + "); remove it if no tool is writing it");
    }
  }
}

// Follows symbolic links from `path` to the final target (which may not exist yet).
std::string resolve_links(const std::string& path) {
  std::string p = path;
  for (int depth = 0; depth < 40; ++depth) {
    struct stat st {};
    if (lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::vector<char> buf(size_t(st.st_size > 0 ? st.st_size : PATH_MAX) + 1);
    const ssize_t n = readlink(p.c_str(), buf.data(), buf.size() - 1);
    if (n < 0) throw Error("cannot read the symbolic link: " + errno_text(errno), path);
    const std::string link(buf.data(), size_t(n));
    p = (!link.empty() && link[0] == '/') ? link : dir_of(p) + "/" + link;
  }
  throw Error("too many levels of symbolic links", path);
}

std::string kind_of(mode_t m) {
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

std::mutex g_notice_mu;
std::string g_notice_prefix;
char g_tool_name[64];  // a copy for signal handlers (tool_name_for_signals)

}  // namespace

void remove_live_temporaries() {
  for (int i = 0; i < kSlots; ++i)
    if (g_state[i].load(std::memory_order_acquire) == kLive) unlink(g_tmp[i]);
}

const char* tool_name_for_signals() { return g_tool_name; }

void set_notice_prefix(const std::string& tool) {
  std::lock_guard<std::mutex> lock(g_notice_mu);
  g_notice_prefix = tool;
  const size_t n = std::min(tool.size(), sizeof g_tool_name - 1);
  std::memcpy(g_tool_name, tool.data(), n);
  g_tool_name[n] = '\0';
}

void notice(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_notice_mu);
  if (g_notice_prefix.empty()) std::fprintf(stderr, "%s\n", message.c_str());
  else std::fprintf(stderr, "%s: %s\n", g_notice_prefix.c_str(), message.c_str());
}

namespace {

// What the constructor checks before it creates anything: tl::Error for a target it refuses;
// true when the target is written directly (standard output, a special file of a byte stream).
bool plan_target(const std::string& target, OutputSink sink, std::string* resolved) {
  if (target.empty()) throw Error("empty output path");
  if (target == "-") {
    if (sink == OutputSink::kFile)
      throw Error("an HDF5 file cannot be written to standard output (it needs a seekable file); give a file path", target);
    return true;
  }
  const std::string base = base_of(target);
  if (base.empty() || base == "." || base == "..")
    throw Error("output path names a folder; expected a file path", target);
  *resolved = resolve_links(target);

  struct stat st {};
  if (stat(resolved->c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw Error("output path is a directory; expected a file path", target);
    if (!S_ISREG(st.st_mode)) {
      if (sink == OutputSink::kFile)
        throw Error("is " + kind_of(st.st_mode) + "; an HDF5 file must be written to a regular file "
                    "(it is never replaced by one); give a file path", target);
      return true;  // a sink such as /dev/null or a pipe: written in place, never replaced
    }
  }

  // Check the folder up front so a long conversion does not fail at the very end.
  const std::string dir = dir_of(*resolved);
  if (stat(dir.c_str(), &st) != 0)
    throw Error("cannot write output: folder '" + dir + "' does not exist", target);
  if (!S_ISDIR(st.st_mode)) throw Error("cannot write output: '" + dir + "' is not a folder", target);
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error("cannot write output: folder '" + dir + "' is not writable", target);
  return false;
}

}  // namespace

void AtomicOutput::check_target(const std::string& target, OutputSink sink) {
  std::string resolved;
  (void)plan_target(target, sink, &resolved);
}

AtomicOutput::AtomicOutput(const std::string& target, OutputSink sink) : target_(target) {
  direct_ = plan_target(target, sink, &resolved_);
  if (direct_) return;
  const std::string dir = dir_of(resolved_);
  install_handlers();
  sweep_stale_temporaries(dir);
  // Reserve the temporary name with O_EXCL: this also proves the folder accepts new files
  // (access() says yes to root even on a read-only mount).
  static std::atomic<unsigned> counter{0};
  tmp_ = dir + "/." + base_of(resolved_) + ".tmp-" + host_token() + "-" + std::to_string(getpid()) + "-" +
         std::to_string(counter++);
  slot_ = register_temporary(tmp_);  // before the file exists: a signal now finds nothing to remove
  const int fd = open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    release_slot(slot_);
    slot_ = -1;
    tmp_.clear();
    throw Error("cannot create a temporary file in '" + dir + "': " + errno_text(e), target);
  }
  close(fd);
}

AtomicOutput::~AtomicOutput() {
  if (!committed_ && !tmp_.empty()) unlink(tmp_.c_str());
  release_slot(slot_);
}

void AtomicOutput::write(const std::function<void(std::FILE*)>& body) {
  if (committed_) throw Error("output written twice", target_);
  const bool to_stdout = target_ == "-";
  std::FILE* f = to_stdout ? stdout : std::fopen(direct_ ? resolved_.c_str() : tmp_.c_str(), "wb");
  if (!f) throw Error("cannot open for writing: " + errno_text(errno), target_);
  if (to_stdout) std::fflush(stdout);
  errno = 0;
  body(f);
  int err = std::ferror(f) ? (errno ? errno : EIO) : 0;
  if (std::fflush(f) != 0 && !err) err = errno;
  if (!to_stdout && std::fclose(f) != 0 && !err) err = errno;
  if (err) throw Error("write failed: " + errno_text(err), target_);
  commit();
}

void AtomicOutput::write_text(const std::function<void(std::ostream&)>& body) {
  std::ostringstream s;
  body(s);
  const std::string text = s.str();
  write([&](std::FILE* f) { std::fwrite(text.data(), 1, text.size(), f); });
}

void AtomicOutput::commit() {
  if (committed_) return;
  if (!direct_ && std::rename(tmp_.c_str(), resolved_.c_str()) != 0)
    throw Error("cannot rename the temporary file into place: " + errno_text(errno), target_);
  committed_ = true;
  release_slot(slot_);
  slot_ = -1;
}

}  // namespace tl
