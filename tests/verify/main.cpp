// doctest runner of libverify (CPU only: the GPU tiers run on a CPU emulation of the kernels).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
