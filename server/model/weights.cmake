# tpserve_weights: safetensors reader, Hugging Face config.json, ModelConfig, weight sources.
file(GLOB WEIGHTS_SRCS CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/safetensors*.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/model_config*.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/weight_source*.cc)
list(FILTER WEIGHTS_SRCS EXCLUDE REGEX "_test\\.cc$")
tpserve_library(tpserve_weights ${WEIGHTS_SRCS})
tpserve_link(tpserve_weights tpserve_gguf nlohmann_json::nlohmann_json)

tpserve_tests(GLOB safetensors*_test.cc model_config*_test.cc weight_source*_test.cc
              LIBS tpserve_weights)
