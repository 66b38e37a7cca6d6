// Up-front checks on input paths, so "a directory where a file was expected", a missing file and
// an empty file get one clear message instead of a library's generic "cannot open".
#pragma once

#include <cstdint>
#include <string>

namespace tl {

// Throws tl::Error(path, "...: expected <what>") unless `path` is a non-empty regular file.
void require_regular_file(const std::string& path, const std::string& what);
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);
bool path_exists(const std::string& path);
uint64_t file_size(const std::string& path);  // 0 if missing

}  // namespace tl
