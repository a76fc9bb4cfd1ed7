# engine_probe: runs LlamaModel on token ids for the reference comparisons.
add_executable(engine_probe ${CMAKE_CURRENT_SOURCE_DIR}/engine_probe.cc)
target_link_libraries(engine_probe PRIVATE tpserve_engine tpserve_model nlohmann_json::nlohmann_json)
tpserve_warnings(engine_probe)
