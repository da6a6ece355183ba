# Packaging and ABI tests of libmptrain.so (scripts in tests/). Included from bindings/CMakeLists.txt;
# the guard makes a second include (e.g. from tests/CMakeLists.txt) harmless.
include_guard(GLOBAL)

# abi: exported symbols are all mpt_*, match the header, and keep what abi.txt recorded.
add_test(NAME abi
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/test_abi.sh $<TARGET_FILE:mptrain>
          ${PROJECT_SOURCE_DIR}/include/mptrain/mptrain.h ${PROJECT_SOURCE_DIR}/abi.txt)
set_tests_properties(abi PROPERTIES ENVIRONMENT "CC=${CMAKE_C_COMPILER}" LABELS packaging)

# packaging: cmake --install into a temporary prefix, then samples/embed_c (pkg-config) and
# samples/embed_cpp (find_package) built out of tree against it and run.
add_test(NAME packaging
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/test_packaging.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(packaging PROPERTIES
  ENVIRONMENT "CC=${CMAKE_C_COMPILER};CXX=${CMAKE_CXX_COMPILER};CMAKE=${CMAKE_COMMAND}"
  LABELS packaging
  TIMEOUT 300)
