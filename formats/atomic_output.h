// Write-to-temporary-then-rename, so an interrupted or failed run never leaves a half-written
// target and never touches its input.
#pragma once

#include <string>

namespace tl {

class AtomicOutput {
 public:
  // Checks that the target's folder exists and is writable and that the target is not a
  // folder (tl::Error otherwise); picks "<dir>/.<name>.tmp-<pid>-<n>".
  explicit AtomicOutput(const std::string& target);
  ~AtomicOutput();  // removes the temporary file unless committed
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  const std::string& tmp_path() const { return tmp_; }
  const std::string& target() const { return target_; }
  void commit();  // fsync-free rename(2) onto the target

 private:
  std::string target_, tmp_;
  bool committed_ = false;
};

}  // namespace tl
