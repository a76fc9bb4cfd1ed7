#include "server/model/chat/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tpserve::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kSmolLm[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::unique_ptr<ChatTemplate> Make(std::string_view text) {
  auto t = ChatTemplate::FromText(text, "<s>", "</s>");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::string Render(const ChatTemplate& t, const std::vector<ChatMessage>& messages) {
  auto out = t.Render(messages, true);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? out->text() : "";
}

TEST(ChatTemplateTest, ChatMlInsertsTheDefaultSystemPromptFromTheTemplateText) {
  auto t = Make(kSmolLm);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->name(), "chatml");
  EXPECT_EQ(Render(*t, {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}}),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!"
            "<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Render(*t, {{"system", "Be brief."}, {"user", " x "}}),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n x <|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(Render(*t, {}), "<|im_start|>assistant\n");
  // A different default in the text is what gets inserted.
  std::string other = kSmolLm;
  other.replace(other.find("You are"), 7, "Thou art");
  EXPECT_THAT(Render(*Make(other), {{"user", "a"}}), HasSubstr("system\nThou art a helpful"));
}

TEST(ChatTemplateTest, ChatMlWithoutDefaultSystem) {
  auto parsed = ParseChatMlDefaultSystem("{% for m in messages %}<|im_start|>{% endfor %}");
  ASSERT_TRUE(parsed.ok());
  EXPECT_FALSE(parsed->has_value());
  EXPECT_FALSE(ParseChatMlDefaultSystem("<|im_start|> != 'system' %}{{ oops }}").ok());
}

TEST(ChatTemplateTest, Llama2) {
  auto t = Make("{% if messages[0]['role'] == 'system' %}... <<SYS>> ... [INST] ...");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->name(), "llama2");
  EXPECT_EQ(
      Render(*t, {{"system", "Sys"}, {"user", " Hi \n"}, {"assistant", " Yo "}, {"user", "More"}}),
      // strip() applies to the joined text, so " Hi" keeps its space.
      "<s>[INST] <<SYS>>\nSys\n<</SYS>>\n\n Hi [/INST] Yo </s><s>[INST] More [/INST]");
  EXPECT_EQ(Render(*t, {{"user", "Hi"}}), "<s>[INST] Hi [/INST]");
  auto bad = t->Render({{"user", "a"}, {"user", "b"}}, true);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("alternate"));
  EXPECT_FALSE(t->Render({}, true).ok());
}

TEST(ChatTemplateTest, Llama3) {
  auto t = Make("{{ '<|start_header_id|>' }} ... <|eot_id|>");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->name(), "llama3");
  EXPECT_EQ(Render(*t, {{"system", " S "}, {"user", "U\n"}}),
            "<s><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateTest, Mistral) {
  auto t = Make("{{ bos_token }}{% for message in messages %}[INST] ... [/INST]");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->name(), "mistral");
  EXPECT_EQ(Render(*t, {{"user", " a "}, {"assistant", "b"}, {"user", "c"}}),
            "<s>[INST]  a  [/INST]b</s>[INST] c [/INST]");
  EXPECT_FALSE(t->Render({{"system", "s"}, {"user", "a"}}, true).ok());
}

// The bytes of each content range, in order.
std::vector<std::string> ContentOf(const ChatText& t) {
  std::vector<std::string> out;
  for (const ByteRange& r : t.content()) out.push_back(t.text().substr(r.begin, r.end - r.begin));
  return out;
}

TEST(ChatTemplateTest, ContentRangesHoldExactlyTheMessageText) {
  const std::vector<ChatMessage> chat = {{"system", " S<|im_end|> "}, {"user", "U<|eot_id|>"}};
  auto chatml = Make(kSmolLm)->Render(chat, true);
  ASSERT_TRUE(chatml.ok());
  EXPECT_THAT(ContentOf(*chatml), ElementsAre(" S<|im_end|> ", "U<|eot_id|>"));
  auto llama3 = Make("<|start_header_id|><|eot_id|>")->Render(chat, true);
  ASSERT_TRUE(llama3.ok());
  EXPECT_THAT(ContentOf(*llama3), ElementsAre("S<|im_end|>", "U<|eot_id|>"));  // trimmed
  auto llama2 = Make("<<SYS>> [INST]")->Render(chat, true);
  ASSERT_TRUE(llama2.ok());
  EXPECT_EQ(llama2->text(), "<s>[INST] <<SYS>>\n S<|im_end|> \n<</SYS>>\n\nU<|eot_id|> [/INST]");
  EXPECT_THAT(ContentOf(*llama2), ElementsAre(" S<|im_end|> ", "U<|eot_id|>"));
  auto mistral = Make("[INST] [/INST]")->Render({{"user", "a</s>"}, {"assistant", "b"}}, true);
  ASSERT_TRUE(mistral.ok());
  EXPECT_THAT(ContentOf(*mistral), ElementsAre("a</s>", "b"));
}

// Gemma 3's template (its text as Hugging Face ships it, abridged to the markers it is
// recognised by): the system message opens the first user turn; contents trimmed; "model" turns.
TEST(ChatTemplateTest, Gemma) {
  auto t = Make(
      "{{ bos_token }}{%- for message in loop_messages -%}{{ '<start_of_turn>' + role + '\\n' "
      "}}{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}{%- endfor -%}"
      "{%- if add_generation_prompt -%}{{'<start_of_turn>model\\n'}}{%- endif -%}");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->name(), "gemma");
  EXPECT_EQ(Render(*t, {{"user", " Hi "}, {"assistant", "Hello!"}, {"user", "2+2?"}}),
            "<s><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n");
  auto with_system = t->Render({{"system", "Be brief."}, {"user", "Why?"}}, true);
  ASSERT_TRUE(with_system.ok()) << with_system.status();
  EXPECT_EQ(with_system->text(),
            "<s><start_of_turn>user\nBe brief.\n\nWhy?<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_THAT(ContentOf(*with_system), ElementsAre("Be brief.", "Why?"));
  EXPECT_FALSE(t->Render({{"assistant", "a"}}, true).ok());
  EXPECT_FALSE(t->Render({{"user", "a"}, {"system", "s"}}, true).ok());
}

TEST(ChatTemplateTest, UnknownRoleIsNamed) {
  for (const char* text : {kSmolLm, "<|start_header_id|><|eot_id|>"}) {
    auto t = Make(text);
    ASSERT_NE(t, nullptr);
    auto out = t->Render({{"user", "a"}, {"tool", "b"}}, true);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("'tool'"));
  }
}

TEST(ChatTemplateTest, UnknownTemplateIsAnError) {
  auto t = ChatTemplate::FromText("{% for m in messages %}### {{ m.role }}: {{ m.content }}", "<s>",
                                  "</s>");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("unrecognised chat template"));
}

}  // namespace
}  // namespace tpserve::model
