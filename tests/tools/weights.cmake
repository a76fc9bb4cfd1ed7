# weights_dump: prints a model's ModelConfig and tensor list, dumps tensors as raw f32
# (tests/integration/test_tiny_model.py compares the GGUF and safetensors sources with it).
add_executable(weights_dump ${CMAKE_CURRENT_SOURCE_DIR}/weights_dump.cc)
target_link_libraries(weights_dump PRIVATE tpserve_weights)
tpserve_warnings(weights_dump)
