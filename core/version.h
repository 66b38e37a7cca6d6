// The project's version: CMakeLists.txt's project(VERSION), which the build passes to every
// target as TL_VERSION. Written into every file and report the tools make (producer_version, the
// reports' "version", --version); a build without it is a build error, not a silent "0".
#pragma once

#ifndef TL_VERSION
#error "TL_VERSION comes from the build (CMakeLists.txt: add_compile_definitions(TL_VERSION=...))"
#endif

namespace tl {
inline constexpr const char* kVersion = TL_VERSION;
}  // namespace tl
