# gguf_dump: writes tensors of a GGUF file dequantised to raw f32 for the pytest suites.
add_executable(gguf_dump ${CMAKE_CURRENT_SOURCE_DIR}/gguf_dump.cc)
target_link_libraries(gguf_dump PRIVATE tpserve_gguf nlohmann_json::nlohmann_json)
tpserve_warnings(gguf_dump)
