// See mapped_input.h.
#include "formats/mapped_input.h"

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "core/exit_codes.h"
#include "formats/atomic_output.h"

namespace tl {
namespace {

constexpr int kSlots = 64;
struct Slot {
  std::atomic<uintptr_t> base{0};  // 0: free
  size_t size = 0;
  char path[PATH_MAX] = {};
};
Slot g_slots[kSlots];
std::mutex g_mu;  // registration only; the handler reads the atomics

void write_all(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= size_t(w);
  }
}

extern "C" void on_sigbus(int sig, siginfo_t* info, void*) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr);
  for (const Slot& s : g_slots) {
    const uintptr_t b = s.base.load(std::memory_order_acquire);
    if (b == 0 || a < b || a - b >= s.size) continue;
    const char* tool = tool_name_for_signals();
    if (tool[0]) {
      write_all(tool);
      write_all(": ");
    }
    write_all(s.path);
    write_all(": the file changed while it was read (truncated or rewritten under the reader, e.g. a download or "
              "sync still running); nothing was written\n");
    remove_live_temporaries();
    _exit(exit_code::kBadInput);
  }
  // Not a mapped input: die of the signal as before (pending until the handler returns).
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, nullptr);
  });
}

}  // namespace

int register_mapped_input(const void* base, size_t size, const std::string& path) {
  if (!base || size == 0) return -1;
  install_handler();
  std::lock_guard<std::mutex> lock(g_mu);
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = g_slots[i];
    if (s.base.load(std::memory_order_relaxed) != 0) continue;
    s.size = size;
    const size_t n = std::min(path.size(), sizeof s.path - 1);
    std::memcpy(s.path, path.data(), n);
    s.path[n] = '\0';
    s.base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);  // published last
    return i;
  }
  return -1;
}

void unregister_mapped_input(int slot) {
  if (slot < 0 || slot >= kSlots) return;
  std::lock_guard<std::mutex> lock(g_mu);
  g_slots[slot].base.store(0, std::memory_order_release);
}

}  // namespace tl
