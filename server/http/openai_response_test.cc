#include "server/http/openai_response.h"

#include <vector>

#include "gtest/gtest.h"

namespace tpserve::http {
namespace {

using nlohmann::json;
using tpserve::v1::GenerateResponse;

// One token's message; its raw bytes are `bytes`, or its text when not given.
GenerateResponse Message(const std::string& text, int32_t id, float logprob,
                         const std::string* bytes = nullptr) {
  GenerateResponse m;
  m.set_text(text);
  m.add_token_ids(id);
  tpserve::v1::TokenLogprobs* lp = m.add_logprobs();
  lp->mutable_chosen()->set_token_id(id);
  lp->mutable_chosen()->set_text(text);
  lp->mutable_chosen()->set_bytes(bytes != nullptr ? *bytes : text);
  lp->mutable_chosen()->set_logprob(logprob);
  for (int i = 0; i < 3; ++i) {
    tpserve::v1::TokenLogprob* top = lp->add_top();
    top->set_token_id(i);
    top->set_text(std::string(1, static_cast<char>('a' + i)));
    top->set_bytes(top->text());
    top->set_logprob(-1.0f * static_cast<float>(i));
  }
  return m;
}

OpenAiRequest Request(Endpoint endpoint, bool logprobs = false, uint32_t top = 0) {
  OpenAiRequest r;
  r.endpoint = endpoint;
  r.logprobs = logprobs;
  r.top_logprobs = top;
  return r;
}

const ResponseHeader kHeader{"cmpl-x", 1700000000, "smol"};

TEST(OpenAiResponseTest, WholeCompletionAccumulatesItsMessages) {
  GenerateResponse total;
  Accumulate(Message("Hel", 1, -0.5f), &total);
  GenerateResponse last = Message("lo", 2, -0.25f);
  last.set_finish_reason(tpserve::v1::FINISH_REASON_EOS);
  last.mutable_usage()->set_prompt_tokens(4);
  last.mutable_usage()->set_completion_tokens(2);
  Accumulate(last, &total);
  const json j = WholeResponse(Request(Endpoint::kCompletions, true, 2), kHeader, {total});
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"], "cmpl-x");
  EXPECT_EQ(j["choices"][0]["text"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], json::array({"Hel", "lo"}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][1].size(), 2u);  // top 2 of 3
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], json::array({0, 3}));
  EXPECT_EQ(j["usage"],
            json({{"prompt_tokens", 4}, {"completion_tokens", 2}, {"total_tokens", 6}}));
}

TEST(OpenAiResponseTest, WholeChatSumsTheUsageOfItsChoices) {
  std::vector<GenerateResponse> choices(2);
  for (GenerateResponse& c : choices) {
    c.set_text("hi");
    c.set_finish_reason(tpserve::v1::FINISH_REASON_LENGTH);
    c.mutable_usage()->set_prompt_tokens(5);
    c.mutable_usage()->set_completion_tokens(3);
  }
  const json j = WholeResponse(Request(Endpoint::kChatCompletions), kHeader, choices);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["message"], json({{"role", "assistant"}, {"content", "hi"}}));
  EXPECT_EQ(j["choices"][1]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
}

TEST(OpenAiResponseTest, ChatChunksCarryTheRoleFirstAndLogprobsWithBytes) {
  OpenAiRequest r = Request(Endpoint::kChatCompletions, true, 1);
  r.include_usage = true;
  ChunkPosition position;
  const json first = StreamChunk(r, kHeader, 0, Message("é", 7, -0.1f), &position);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", "é"}}));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(first["usage"].is_null());
  const json& token = first["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(token["bytes"], json::array({0xc3, 0xa9}));
  EXPECT_EQ(token["top_logprobs"].size(), 1u);
  const json next = StreamChunk(r, kHeader, 0, Message("x", 8, -0.1f), &position);
  EXPECT_FALSE(next["choices"][0]["delta"].contains("role"));
  tpserve::v1::Usage usage;
  usage.set_prompt_tokens(2);
  usage.set_completion_tokens(1);
  const json last = UsageChunk(r, kHeader, usage);
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["total_tokens"], 3);
}

TEST(OpenAiResponseTest, LogprobsCarryATokensRawBytesNotItsLossyText) {
  const std::string half_e = "\xc3";  // the first byte of "é": its text is U+FFFD
  const GenerateResponse m = Message("\xef\xbf\xbd", 9, -0.3f, &half_e);
  ChunkPosition position;
  const json chat =
      StreamChunk(Request(Endpoint::kChatCompletions, true, 0), kHeader, 0, m, &position);
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][0]["bytes"], json::array({0xc3}));
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][0]["token"], "\xef\xbf\xbd");
}

TEST(OpenAiResponseTest, StreamedTextOffsetsGoOnAcrossChunksAsInTheWholeResponse) {
  const OpenAiRequest r = Request(Endpoint::kCompletions, true, 1);
  const GenerateResponse parts[] = {Message("é", 1, -0.1f), Message(" ab", 2, -0.2f),
                                    Message("c", 3, -0.3f)};
  ChunkPosition position;
  GenerateResponse total;
  json streamed = json::array();
  for (const GenerateResponse& part : parts) {
    Accumulate(part, &total);
    const json chunk = StreamChunk(r, kHeader, 0, part, &position);
    for (const json& offset : chunk["choices"][0]["logprobs"]["text_offset"]) {
      streamed.push_back(offset);
    }
  }
  // In characters, as Python counts them: "é" is one.
  EXPECT_EQ(streamed, json::array({0, 1, 4}));
  EXPECT_EQ(WholeResponse(r, kHeader, {total})["choices"][0]["logprobs"]["text_offset"], streamed);
  EXPECT_EQ(position.text_offset, 5);
  EXPECT_FALSE(position.first);
}

TEST(OpenAiResponseTest, SseFraming) {
  EXPECT_EQ(SseEvent(json({{"a", 1}})), "data: {\"a\":1}\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
}

TEST(OpenAiResponseTest, ErrorsMapToHttpStatusesAndNameTheField) {
  const struct {
    absl::Status status;
    int http;
    const char* type;
    json param;
    json code;
  } cases[] = {
      {absl::InvalidArgumentError("max_tokens: 5000 exceeds the limit 1024"), 400,
       "invalid_request_error", "max_tokens", nullptr},
      {absl::InvalidArgumentError("temperature must be a finite number >= 0, got -1"), 400,
       "invalid_request_error", "temperature", nullptr},
      {absl::InvalidArgumentError("the prompt and the output do not fit"), 400,
       "invalid_request_error", nullptr, nullptr},
      {absl::UnauthenticatedError("missing Bearer key"), 401, "authentication_error", nullptr,
       "invalid_api_key"},
      {absl::NotFoundError("model: 'x' is not served here"), 404, "invalid_request_error", "model",
       "model_not_found"},
      {absl::ResourceExhaustedError("the queue is full"), 429, "rate_limit_error", nullptr,
       "queue_full"},
      {absl::UnavailableError("the server is draining"), 503, "service_unavailable_error", nullptr,
       nullptr},
      {absl::DeadlineExceededError("late"), 504, "timeout_error", nullptr, nullptr},
      {absl::InternalError("bug"), 500, "server_error", nullptr, nullptr},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(HttpStatus(c.status), c.http) << c.status;
    const json body = ErrorBody(c.status);
    EXPECT_EQ(body["error"]["message"], std::string(c.status.message()));
    EXPECT_EQ(body["error"]["type"], c.type) << c.status;
    EXPECT_EQ(body["error"]["param"], c.param) << c.status;
    EXPECT_EQ(body["error"]["code"], c.code) << c.status;
  }
}

}  // namespace
}  // namespace tpserve::http
