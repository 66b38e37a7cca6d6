// A safetensors shard truncated while a tool reads it (formats/mapped_input.h): in a child
// process, a reader maps a shard, the file is cut to 4 KiB under it, and the next read of a
// tensor past the cut ends the child with exit 2 and one stderr line naming the file -- not
// SIGBUS -- with the temporary of an output in progress removed and its target never written.
// A SIGBUS outside any mapped input still kills as a signal.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "fixtures.h"
#include "formats/atomic_output.h"
#include "formats/safetensors.h"

namespace {

using tl::test::scratch;

struct Child {
  int status = 0;
  std::string err;
};

// Runs body() in a forked child with stderr into a pipe; the child's exit status and stderr.
template <class Body>
Child run_child(Body&& body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    body();
    _exit(0);
  }
  close(fds[1]);
  Child c;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) c.err.append(buf, size_t(n));
  close(fds[0]);
  waitpid(pid, &c.status, 0);
  return c;
}

}  // namespace

TEST_CASE("safetensors: a shard truncated under the reader is exit 2 naming it, the output untouched") {
  const std::string dir = scratch("st_truncated");
  const std::string shard = dir + "/model.safetensors", out = dir + "/out.bin";
  std::vector<float> big(1 << 20);  // 4 MiB: far past the 4 KiB left after the cut
  for (size_t i = 0; i < big.size(); ++i) big[i] = float(i % 251);
  const tl::Tensor t = tl::Tensor::from_float("w", {int64_t(big.size())}, big.data(), tl::DType::F32);
  tl::write_safetensors(shard, {&t});
  const Child c = run_child([&] {
    tl::set_notice_prefix("tl-test");
    tl::SafetensorsReader r(shard);
    tl::AtomicOutput pending(out, tl::OutputSink::kStream);  // an output in progress: its temporary exists
    if (truncate(shard.c_str(), 4096) != 0) _exit(5);
    volatile float sum = 0;
    const float* v = reinterpret_cast<const float*>(r.data("w"));
    for (size_t i = 0; i < big.size(); i += 1024) sum = sum + v[i];  // a page past the cut: SIGBUS
    _exit(4);  // not reached
  });
  INFO(c.err);
  REQUIRE(WIFEXITED(c.status));
  CHECK(WEXITSTATUS(c.status) == 2);
  CHECK(c.err == "tl-test: " + shard +
                     ": the file changed while it was read (truncated or rewritten under the reader, e.g. a download or "
                     "sync still running); nothing was written\n");
  CHECK_FALSE(std::filesystem::exists(out));
  for (const auto& e : std::filesystem::directory_iterator(dir))
    CHECK_MESSAGE(e.path().filename().string().find(".tmp-") == std::string::npos, e.path());
}

TEST_CASE("safetensors: a SIGBUS that is not a mapped input's still kills with the signal") {
  const std::string dir = scratch("st_sigbus_other");
  const std::string shard = dir + "/m.safetensors";
  const std::vector<float> v(16, 1.0f);
  const tl::Tensor t = tl::Tensor::from_float("w", {16}, v.data(), tl::DType::F32);
  tl::write_safetensors(shard, {&t});
  const Child c = run_child([&] {
    tl::SafetensorsReader r(shard);  // the handler is installed
    raise(SIGBUS);
    _exit(4);
  });
  CHECK(WIFSIGNALED(c.status));
  if (WIFSIGNALED(c.status)) CHECK(WTERMSIG(c.status) == SIGBUS);
}
