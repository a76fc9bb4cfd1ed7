#include "server/http/openai_request.h"

#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve::http {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kModel[] = "smol";

absl::StatusOr<OpenAiRequest> Completion(const std::string& body) {
  return DecodeOpenAiRequest(Endpoint::kCompletions, body, kModel);
}

absl::StatusOr<OpenAiRequest> Chat(const std::string& body) {
  return DecodeOpenAiRequest(Endpoint::kChatCompletions, body, kModel);
}

TEST(OpenAiRequestTest, CompletionFieldsBecomeTheGenerateRequest) {
  absl::StatusOr<OpenAiRequest> r = Completion(R"({
      "model": "smol", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
      "top_k": 40, "min_p": 0.05, "frequency_penalty": 0.1, "presence_penalty": -0.2,
      "repetition_penalty": 1.1, "seed": 42, "stop": ["a", "b"], "stop_token_ids": [2],
      "ignore_eos": true, "logprobs": 3, "n": 2, "stream": true,
      "stream_options": {"include_usage": true}, "user": "u", "unknown_field": {"x": 1}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const tpserve::v1::GenerateRequest& g = r->generate;
  EXPECT_EQ(g.prompt(), "Hello");
  EXPECT_EQ(g.max_tokens(), 7u);
  EXPECT_FLOAT_EQ(g.temperature(), 0.5f);
  EXPECT_FLOAT_EQ(g.top_p(), 0.9f);
  EXPECT_EQ(g.top_k(), 40);
  EXPECT_FLOAT_EQ(g.min_p(), 0.05f);
  EXPECT_FLOAT_EQ(g.frequency_penalty(), 0.1f);
  EXPECT_FLOAT_EQ(g.presence_penalty(), -0.2f);
  EXPECT_FLOAT_EQ(g.repetition_penalty(), 1.1f);
  EXPECT_EQ(g.seed(), 42u);
  EXPECT_THAT(g.stop(), ElementsAre("a", "b"));
  EXPECT_THAT(g.stop_token_ids(), ElementsAre(2));
  EXPECT_TRUE(g.ignore_eos());
  EXPECT_EQ(g.logprobs(), 3u);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 3u);
  EXPECT_EQ(r->n, 2u);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
}

TEST(OpenAiRequestTest, UnsetAndNullFieldsStayUnset) {
  absl::StatusOr<OpenAiRequest> r =
      Completion(R"({"prompt": "Hi", "temperature": null, "seed": null, "stop": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, kModel);  // no model: the served one
  EXPECT_FALSE(r->generate.has_temperature());
  EXPECT_FALSE(r->generate.has_seed());
  EXPECT_EQ(r->generate.max_tokens(), 16u);  // OpenAI's default for completions
  absl::StatusOr<OpenAiRequest> chat = Chat(R"({"messages": [{"role": "user", "content": "Hi"}]})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->generate.max_tokens(), 0u);  // chat: the rest of the context
  EXPECT_FALSE(r->logprobs);
  EXPECT_EQ(r->generate.logprobs(), 0u);
  EXPECT_EQ(r->n, 1u);
}

TEST(OpenAiRequestTest, AnyIntegerSeedAndTheDeveloperRole) {
  EXPECT_EQ(Completion(R"({"prompt": "x", "seed": -1})")->generate.seed(), UINT64_MAX);
  EXPECT_EQ(Completion(R"({"prompt": "x", "seed": 18446744073709551615})")->generate.seed(),
            UINT64_MAX);
  EXPECT_EQ(Completion(R"({"prompt": "x", "seed": -9223372036854775808})")->generate.seed(),
            uint64_t{1} << 63);
  absl::StatusOr<OpenAiRequest> chat =
      Chat(R"({"messages": [{"role": "developer", "content": "Be brief."},
                            {"role": "user", "content": "Hi"}]})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->generate.messages(0).role(), "system");
}

TEST(OpenAiRequestTest, RefusalsNameTheRequestsOwnFields) {
  const absl::Status ids = absl::InvalidArgumentError("prompt_token_ids[3]: 99999 is outside");
  const absl::Status lp = absl::InvalidArgumentError("logprobs: 99 exceeds the limit 20");
  const absl::Status max = absl::InvalidArgumentError("max_tokens: 5000 exceeds max_new_tokens");
  const OpenAiRequest completion = *Completion(R"({"prompt": "x", "max_tokens": 5})");
  const OpenAiRequest chat =
      *Chat(R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 5})");
  EXPECT_EQ(InRequestTerms(ids, completion).message(), "prompt[3]: 99999 is outside");
  EXPECT_EQ(InRequestTerms(lp, completion).message(), "logprobs: 99 exceeds the limit 20");
  EXPECT_EQ(InRequestTerms(lp, chat).message(), "top_logprobs: 99 exceeds the limit 20");
  EXPECT_EQ(InRequestTerms(max, completion).message(), "max_tokens: 5000 exceeds max_new_tokens");
  EXPECT_EQ(InRequestTerms(max, chat).message(),
            "max_completion_tokens: 5000 exceeds max_new_tokens");
  EXPECT_EQ(InRequestTerms(max, chat).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Completion(R"({"prompt": "x", "max_tokens": 10000000000000})").status().message(),
            "max_tokens: 10000000000000 exceeds 4294967295");
}

TEST(OpenAiRequestTest, PromptShapes) {
  EXPECT_EQ(Completion(R"({"prompt": ["one"]})")->generate.prompt(), "one");
  EXPECT_THAT(Completion(R"({"prompt": [1, 2, 3]})")->generate.prompt_token_ids(),
              ElementsAre(1, 2, 3));
  EXPECT_THAT(Completion(R"({"prompt": [[4, 5]]})")->generate.prompt_token_ids(),
              ElementsAre(4, 5));
  EXPECT_THAT(Completion(R"({"prompt": ["a", "b"]})").status().message(),
              HasSubstr("the limit is 1"));
}

TEST(OpenAiRequestTest, NewerMaxCompletionTokensWins) {
  EXPECT_EQ(Completion(R"({"prompt": "x", "max_tokens": 5, "max_completion_tokens": 9})")
                ->generate.max_tokens(),
            9u);
}

TEST(OpenAiRequestTest, VllmTopKOffIsZero) {
  EXPECT_EQ(Completion(R"({"prompt": "x", "top_k": -1})")->generate.top_k(), 0);
}

TEST(OpenAiRequestTest, ChatMessagesAndContentParts) {
  absl::StatusOr<OpenAiRequest> r = Chat(R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello, "},
                                   {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null}],
      "logprobs": true, "top_logprobs": 0})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->generate.messages_size(), 3);
  EXPECT_EQ(r->generate.messages(1).role(), "user");
  EXPECT_EQ(r->generate.messages(1).content(), "Hello, there");
  EXPECT_EQ(r->generate.messages(2).content(), "");
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 0u);
  EXPECT_EQ(r->generate.logprobs(), 1u);  // the chosen token's needs at least 1
}

TEST(OpenAiRequestTest, AnotherModelIsNotFound) {
  absl::Status s = Completion(R"({"model": "gpt-4", "prompt": "x"})").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("model: 'gpt-4'"));
}

// Each refusal is InvalidArgument and names its field first.
TEST(OpenAiRequestTest, RefusalsNameTheField) {
  const struct {
    Endpoint endpoint;
    const char* body;
    const char* field;
  } cases[] = {
      {Endpoint::kCompletions, "not json", "body: "},
      {Endpoint::kCompletions, "[1]", "body: "},
      {Endpoint::kCompletions, "{}", "prompt: "},
      {Endpoint::kCompletions, R"({"prompt": {}})", "prompt: "},
      {Endpoint::kCompletions, R"({"prompt": [1, 2.5]})", "prompt[1]: "},
      {Endpoint::kCompletions, R"({"prompt": [4294967296]})", "prompt[0]: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "max_tokens": 0})", "max_tokens: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "temperature": "1"})", "temperature: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "top_k": -2})", "top_k: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "seed": 1.5})", "seed: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "stop": [1]})", "stop[0]: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "stop_token_ids": 3})", "stop_token_ids: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "ignore_eos": 1})", "ignore_eos: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "n": 9})", "n: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "stream": "true"})", "stream: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "stream_options": {}})", "stream_options: "},
      {Endpoint::kCompletions,
       R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "echo": true})", "echo: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "best_of": 3})", "best_of: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "suffix": "z"})", "suffix: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "model": 3})", "model: "},
      {Endpoint::kChatCompletions, R"({"messages": []})", "messages: "},
      {Endpoint::kChatCompletions, R"({"messages": [3]})", "messages[0]: "},
      {Endpoint::kChatCompletions, R"({"messages": [{"role": 1}]})", "messages[0].role: "},
      {Endpoint::kChatCompletions, R"({"messages": [{"role": "user", "content": [{"type":
          "image_url"}]}]})",
       "messages[0].content[0].type: "},
      {Endpoint::kChatCompletions,
       R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs: "},
      {Endpoint::kChatCompletions,
       R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})", "tools[0].type: "},
      {Endpoint::kChatCompletions,
       R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name":
          "g"}}})",
       "tool_choice.function.name: "},
      {Endpoint::kChatCompletions,
       R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "f", "parameters": {"type": "object", "properties": {"a":
          {"type": "number", "multipleOf": 3}}}}}]})",
       "tools[0].function.parameters: "},
      {Endpoint::kChatCompletions,
       R"({"messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]})",
       "messages[0].tool_call_id: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "tools": [{}]})", "tools: "},
      {Endpoint::kChatCompletions,
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type":
          "xml"}})",
       "response_format.type: "},
      {Endpoint::kChatCompletions,
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type":
          "json_schema"}})",
       "response_format.json_schema: "},
      {Endpoint::kChatCompletions,
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type":
          "json_schema", "json_schema": {"name": "a", "schema": 3}}})",
       "response_format.json_schema.schema: "},
      {Endpoint::kCompletions,
       R"({"prompt": "x", "response_format": {"type": "json_object"}, "guided_regex": "a"})",
       "response_format: "},
      {Endpoint::kCompletions, R"({"prompt": "x", "guided_json": 3})", "guided_json: "},
  };
  for (const auto& c : cases) {
    absl::Status s = DecodeOpenAiRequest(c.endpoint, c.body, kModel).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_TRUE(absl::StartsWith(s.message(), c.field)) << c.body << ": " << s.message();
  }
}

TEST(OpenAiRequestTest, ResponseFormatsBecomeStructuredOutput) {
  const auto decoded = [](absl::string_view body) {
    absl::StatusOr<OpenAiRequest> r = DecodeOpenAiRequest(Endpoint::kChatCompletions, body, kModel);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->generate.structured_output() : tpserve::v1::StructuredOutput();
  };
  const std::string head = R"({"messages": [{"role": "user", "content": "x"}], )";
  EXPECT_TRUE(decoded(head + R"("response_format": {"type": "json_object"}})").json_object());
  EXPECT_EQ(decoded(head + R"("response_format": {"type": "json_schema", "json_schema": {"name":
      "p", "strict": true, "schema": {"type": "integer"}}}})")
                .json_schema(),
            R"({"type":"integer"})");
  EXPECT_EQ(decoded(head + R"("guided_regex": "[0-9]+"})").regex(), "[0-9]+");
  EXPECT_EQ(decoded(head + R"x("guided_grammar": "root ::= \"a\""})x").grammar(), "root ::= \"a\"");
  EXPECT_EQ(decoded(head + R"("response_format": {"type": "text"}})").kind_case(),
            tpserve::v1::StructuredOutput::KIND_NOT_SET);
}

TEST(OpenAiRequestTest, SchemasKeepTheClientsKeyOrder) {
  const std::string schema =
      R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}},)"
      R"("required":["zeta","alpha"]})";
  const std::string head = R"({"messages": [{"role": "user", "content": "x"}], )";
  absl::StatusOr<OpenAiRequest> whole =
      Chat(head +
           R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": )" +
           schema + "}}}");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->generate.structured_output().json_schema(), schema);
  absl::StatusOr<OpenAiRequest> guided = Chat(head + R"("guided_json": )" + schema + "}");
  ASSERT_TRUE(guided.ok()) << guided.status();
  EXPECT_EQ(guided->generate.structured_output().json_schema(), schema);
  absl::StatusOr<OpenAiRequest> tools =
      Chat(head + R"("tools": [{"type": "function", "function": {"name": "f", "parameters": )" +
           schema + "}}]}");
  ASSERT_TRUE(tools.ok()) << tools.status();
  ASSERT_EQ(tools->tools.tools.size(), 1u);
  EXPECT_EQ(tools->tools.tools[0].parameters, schema);
}

TEST(OpenAiRequestTest, StructuredOutputErrorsNameTheRequestsField) {
  OpenAiRequest request;
  request.schema_field = "response_format.json_schema.schema";
  EXPECT_EQ(InRequestTerms(absl::InvalidArgumentError(
                               "structured_output.json_schema: /properties/a/multipleOf: not "
                               "supported"),
                           request)
                .message(),
            "response_format.json_schema.schema: /properties/a/multipleOf: not supported");
  EXPECT_EQ(
      InRequestTerms(absl::InvalidArgumentError("structured_output.regex: bad"), request).message(),
      "guided_regex: bad");
}

}  // namespace
}  // namespace tpserve::http
