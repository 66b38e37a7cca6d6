// Memory-mapped inputs that change under the reader. A safetensors shard is mapped
// (safetensors_reader.cpp); if the file is truncated while a tool reads it (a download or a sync
// still running, a file replaced in place), touching a page past the new end raises SIGBUS, which
// would kill the process with a core dump and leave its temporaries behind. Every map is
// registered here; a SIGBUS inside a registered map ends the process the way bad input does:
//
//   <tool>: <path>: the file changed while it was read (truncated or rewritten under the reader,
//   e.g. a download or sync still running); nothing was written
//
// on stderr, every live temporary removed (atomic_output.h), exit 2 (exit_code::kBadInput): the
// output is untouched. A SIGBUS anywhere else is not ours to explain and kills as before.
// The handler is installed at the first registration and uses fixed storage only.
#pragma once

#include <cstddef>
#include <string>

namespace tl {

// Returns a slot for unregister_mapped_input (-1 when every slot is taken: the map then goes
// unguarded, as before this registry existed).
int register_mapped_input(const void* base, size_t size, const std::string& path);
void unregister_mapped_input(int slot);

}  // namespace tl
