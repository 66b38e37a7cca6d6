# tl-verify: the fixture tool used by the CLI tests, and the tier targets named as the TinyLoop
# runtime's own test chain. Each target runs tl-verify and reports SKIP (exit 77) where it
# cannot run (no GPU, below sm_80, built without CUDA, tier not in this build), so a CPU-only
# CI stays green and a GPU CI runs them all. Included from tests/CMakeLists.txt.
set(TL_VERIFY_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})

add_executable(make_verify_fixture ${TL_VERIFY_TEST_DIR}/tools/make_verify_fixture.cpp
                                   ${TL_VERIFY_TEST_DIR}/fixture_file.cpp)
target_link_libraries(make_verify_fixture PRIVATE tl_verify)
target_include_directories(make_verify_fixture PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
tl_cxx_target(make_verify_fixture)

if(TARGET tl-verify)
  set(TL_VERIFY_TMP ${CMAKE_CURRENT_BINARY_DIR}/tmp/verify_targets)
  file(MAKE_DIRECTORY ${TL_VERIFY_TMP})
  set(TL_VERIFY_ENV "TL_VERIFY=$<TARGET_FILE:tl-verify>;TL_FIXTURE=$<TARGET_FILE:make_verify_fixture>;TL_TMP=${TL_VERIFY_TMP}")
  if(TARGET marlin-pack)
    list(APPEND TL_VERIFY_ENV "TL_MARLIN_PACK=$<TARGET_FILE:marlin-pack>")
  endif()

  # Synthetic tiers on random data (the seed is printed; the JSON report is kept for CI).
  foreach(pair "verify_symmetric_parity:symmetric" "verify_asymmetric_parity:wrapper"
               "verify_correction_kernel:correction" "verify_swiglu_pair:swiglu" "verify_native_int4:native"
               "verify_e2e:e2e")
    string(REPLACE ":" ";" pair ${pair})
    list(GET pair 0 name)
    list(GET pair 1 tier)
    add_test(NAME ${name} COMMAND tl-verify --tiers ${tier} --json ${TL_VERIFY_TMP}/${name}.json
                                  --md ${TL_VERIFY_TMP}/${name}.md)
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)
  endforeach()

  # File tiers on a packed file made by the test: the wrapper on every packed weight at
  # M = 1, 16, 33, 80 (GPU), and the pack tier (CPU, runs everywhere).
  add_test(NAME verify_mm_asymmetric
           COMMAND bash ${TL_VERIFY_TEST_DIR}/run_file_tier.sh verify_mm_asymmetric wrapper)
  add_test(NAME verify_pack COMMAND bash ${TL_VERIFY_TEST_DIR}/run_file_tier.sh verify_pack pack)
  add_test(NAME verify_swiglu_file COMMAND bash ${TL_VERIFY_TEST_DIR}/run_file_tier.sh verify_swiglu_file swiglu)
  # The planted packing faults against the GPU tiers alone (the pack tier is excluded, so
  # this proves the kernels' tiers catch them); exits 77 without a GPU.
  add_test(NAME verify_planted_faults_gpu COMMAND bash ${TL_VERIFY_TEST_DIR}/planted_faults_gpu.sh)
  set_tests_properties(verify_mm_asymmetric verify_pack verify_swiglu_file verify_planted_faults_gpu PROPERTIES
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${TL_VERIFY_ENV}")
endif()
