// The error types of the tinyloop libraries. Libraries throw tl::Error; only the entry function
// of each tool (apps/tool_main.h) catches it and maps it to exit code 2 (bad input / usage / I/O).
// A job throws tl::GateFailed when a requirement the user asked for is not met (marlin-pack
// --require-all): the same boundary maps it to exit code 1 (exit_code::kGateFailed).
#pragma once

#include <stdexcept>
#include <string>

namespace tl {

class Error : public std::runtime_error {
 public:
  // what(): "<file>: <item>: <message>" with the empty parts left out.
  explicit Error(const std::string& message, const std::string& file = "",
                 const std::string& item = "")
      : std::runtime_error(compose(message, file, item)), file_(file), item_(item) {}

  const std::string& file() const { return file_; }
  const std::string& item() const { return item_; }

 private:
  static std::string compose(const std::string& message, const std::string& file,
                             const std::string& item) {
    std::string s;
    if (!file.empty()) s += file + ": ";
    if (!item.empty()) s += item + ": ";
    return s + message;
  }
  std::string file_, item_;
};

class GateFailed : public Error {
 public:
  using Error::Error;
};

}  // namespace tl
