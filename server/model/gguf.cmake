# tpserve_gguf: GGUF reader and dequantisation of its weight types.
file(GLOB GGUF_SRCS CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/ggml_type.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/gguf_*.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/dequantize*.cc)
list(FILTER GGUF_SRCS EXCLUDE REGEX "_test\\.cc$")
tpserve_library(tpserve_gguf ${GGUF_SRCS})
if(GGUF_SRCS)
  target_compile_options(tpserve_gguf PRIVATE ${TPSERVE_CPU_FLAGS})
endif()
tpserve_link(tpserve_gguf tpserve_common tpserve_cpu_kernels absl::status absl::statusor absl::strings
                                          absl::span absl::flat_hash_map)

tpserve_tests(GLOB ggml_type_test.cc gguf_*_test.cc dequantize*_test.cc LIBS tpserve_gguf)
