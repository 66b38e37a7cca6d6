# The Hopper kernel's generated code: its main loops stay on the uniform datapath (no R2UR) and
# within a bound of instructions per stage (tests/sass/hopper_loops.py). Skipped (77) without
# nvdisasm. Included from tests/CMakeLists.txt.
if(TL_HAVE_CUDA)
  add_test(NAME sass_hopper_main_loops COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_hopper_loops.sh)
  set_tests_properties(sass_hopper_main_loops PROPERTIES SKIP_RETURN_CODE 77
    ENVIRONMENT "TL_NVCC=${CMAKE_CUDA_COMPILER};TL_SRC=${PROJECT_SOURCE_DIR};TL_TMP=${CMAKE_CURRENT_BINARY_DIR}/tmp/sass")
endif()
