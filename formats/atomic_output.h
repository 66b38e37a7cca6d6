// Every file a tool writes goes through AtomicOutput. The rules (docs/format.md, "Writing"):
//
//  * a regular target (new, or an existing regular file) is written to a temporary file in its
//    folder and rename(2)d into place by commit(): an interrupted or failed run leaves the old
//    target (or nothing) and never a partial file;
//  * a symbolic link is followed (through every level) and its final target is what the
//    rename replaces; the link itself stays;
//  * a target that exists and is a character or block device, a FIFO or a socket is never
//    replaced. Byte-stream outputs (reports, safetensors, token and .npy files: OutputSink::
//    kStream) are written to it directly, so `--json /dev/stdout` and `-o /dev/null` work as
//    sinks; an HDF5 container (kFile) needs a seekable regular file and is refused (exit 2);
//  * "-" is standard output for byte-stream outputs;
//  * a directory target, a missing or unwritable folder is refused before any work.
//
// Temporaries are named "<dir>/.<name>.tmp-<host>-<pid>-<n>" (<host>: 8 hex digits of the boot
// id and pid namespace). SIGINT, SIGTERM, SIGHUP and SIGPIPE remove every live temporary and
// then end the process with that signal (the shell reports 130, 143, 129, 141); SIGXFSZ is
// ignored so that a file-size limit is a write error, like a full disk. A temporary left by
// SIGKILL is found by the next AtomicOutput in that folder: removed when provably stale (same
// host, its pid is gone), otherwise reported with one notice line.
#pragma once

#include <cstdio>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace tl {

enum class OutputSink {
  kFile,    // an HDF5 container: must become a regular file
  kStream,  // a byte stream written front to back: may go to stdout or a special file
};

class AtomicOutput {
 public:
  // Checks the target as described above (tl::Error otherwise) and, for a regular target,
  // creates the temporary file with O_EXCL.
  explicit AtomicOutput(const std::string& target, OutputSink sink = OutputSink::kFile);
  // The same checks of the target, creating nothing (a job that writes files beside its output,
  // such as gptq-quantize's resume journal, checks the output first).
  static void check_target(const std::string& target, OutputSink sink = OutputSink::kFile);
  ~AtomicOutput();  // removes the temporary file unless committed
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  const std::string& target() const { return target_; }
  bool direct() const { return direct_; }  // written straight to stdout or a special file
  // kFile: the temporary file to create the container in.
  const std::string& tmp_path() const { return tmp_; }
  // kStream: writes every byte through `body`, then commits. A failed write, flush or close is
  // tl::Error naming the target and the system's reason ("No space left on device").
  void write(const std::function<void(std::FILE*)>& body);
  void write_text(const std::function<void(std::ostream&)>& body);
  void commit();  // kFile: rename(2) the temporary onto the (resolved) target

 private:
  std::string target_;    // as given (messages)
  std::string resolved_;  // after following symbolic links: what commit() replaces
  std::string tmp_;
  bool direct_ = false, committed_ = false;
  int slot_ = -1;         // in the signal-cleanup registry
};

// A library notice (one line, e.g. a stale temporary removed). Printed on stderr as
// "<tool>: <message>"; the tool's name is set once by the tool's entry function.
void set_notice_prefix(const std::string& tool);
void notice(const std::string& message);

// For signal handlers (async-signal-safe: memory reads and unlink(2) only): removes every live
// temporary, as SIGINT / SIGTERM do; and the tool's name as set_notice_prefix last set it ("" if
// never).
void remove_live_temporaries();
const char* tool_name_for_signals();

}  // namespace tl
