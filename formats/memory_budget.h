// Memory admission: a tool that is about to load a model estimates its peak and refuses up front
// (exit 2, the numbers and what to do instead) when the estimate does not fit, instead of
// growing until the OOM killer ends it with nothing said.
#pragma once

#include <cstdint>
#include <string>

#include "core/bytes.h"  // format_bytes

namespace tl {

// Bytes this process can still take: MemAvailable (/proc/meminfo), lowered by the cgroup's
// limit minus its usage when one is set (cgroup v2 memory.max, v1 memory.limit_in_bytes).
// UINT64_MAX when nothing can be read.
uint64_t available_memory_bytes();

// "24G", "512M", "1.5GiB", "3000000000" (bytes); K/M/G/T are powers of 1024. Throws tl::Error.
uint64_t parse_memory_size(const std::string& text, const std::string& flag);

// Throws tl::Error("<what> needs about X, but only Y is available (<source>); <advice>") when
// `estimate` exceeds `max_memory` (when non-zero: --max-memory) or the available memory.
void admit_memory(uint64_t estimate, uint64_t max_memory, const std::string& what, const std::string& advice);

}  // namespace tl
