# tl_make_fixtures: writes the small files the CLI tests inspect (a .tinyloop with dense,
# quantized and Marlin entries, safetensors single/sharded, a calibration file, and broken
# .tinyloop variants). CLI tests find it at $TL_BIN/../tests/tl_make_fixtures.
add_executable(tl_make_fixtures ${CMAKE_CURRENT_LIST_DIR}/fixture_gen/make_fixtures.cpp)
target_link_libraries(tl_make_fixtures PRIVATE tl_formats)
tl_cxx_target(tl_make_fixtures)
target_compile_definitions(tl_make_fixtures PRIVATE ${TL_TEST_DEFS})  # tests/formats/fixtures.h
