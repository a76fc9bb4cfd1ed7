# tpserve_tokenizer: byte-level and SentencePiece-style BPE, loaders, chat templates.
file(GLOB TOKENIZER_SRCS CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer*.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/bpe*.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/pretokenizer*.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/utf8*.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/incremental_decoder*.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/chat_template*.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/chat_text*.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/chat_prompt*.cc)
list(FILTER TOKENIZER_SRCS EXCLUDE REGEX "_test\\.cc$")
tpserve_library(tpserve_tokenizer ${TOKENIZER_SRCS})
tpserve_link(tpserve_tokenizer tpserve_gguf nlohmann_json::nlohmann_json
                                               PkgConfig::PCRE2)

tpserve_tests(GLOB tokenizer*_test.cc bpe*_test.cc pretokenizer*_test.cc utf8*_test.cc
                   incremental_decoder*_test.cc chat_template*_test.cc chat_text*_test.cc
                   chat_prompt*_test.cc
              LIBS tpserve_tokenizer)
