# The Hopper kernel's generated code: its main loops stay on the uniform datapath (no R2UR) and
# within a bound of instructions per stage (tests/sass/hopper_loops.py). Skipped (77) without
# nvdisasm. The decode kernel's register budget: no spills but the SwiGLU pair's known ones
# (tests/sass/decode_registers.py, ptxas's report). Included from tests/CMakeLists.txt.
if(TL_HAVE_CUDA)
  # What the build compiles tl_cuda_hopper / tl_cuda with (cuda/CMakeLists.txt), less warnings
  # and line info (the decode kernel's test adds sm_90 itself).
  string(TOUPPER "${CMAKE_BUILD_TYPE}" tl_sass_config)
  set(tl_sass_common ${CMAKE_CUDA_FLAGS} ${CMAKE_CUDA_FLAGS_${tl_sass_config}} -std=c++${CMAKE_CUDA_STANDARD})
  string(REPLACE ";" " " tl_sass_flags "${tl_sass_common};${TL_HOPPER_CUDA_OPTIONS}")
  string(REPLACE ";" " " tl_decode_flags "${tl_sass_common};${TL_CUDA_CODE_OPTIONS}")
  add_test(NAME sass_hopper_main_loops COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_hopper_loops.sh)
  set_tests_properties(sass_hopper_main_loops PROPERTIES SKIP_RETURN_CODE 77
    ENVIRONMENT "TL_NVCC=${CMAKE_CUDA_COMPILER};TL_NVCC_FLAGS=${tl_sass_flags};TL_SRC=${PROJECT_SOURCE_DIR};TL_TMP=${CMAKE_CURRENT_BINARY_DIR}/tmp/sass")
  add_test(NAME sass_decode_registers COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_decode_registers.sh)
  set_tests_properties(sass_decode_registers PROPERTIES
    ENVIRONMENT "TL_NVCC=${CMAKE_CUDA_COMPILER};TL_NVCC_FLAGS=${tl_decode_flags};TL_SRC=${PROJECT_SOURCE_DIR};TL_TMP=${CMAKE_CURRENT_BINARY_DIR}/tmp/sass_decode")
endif()
