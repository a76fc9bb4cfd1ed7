#include "server/grammar/token_mask.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/grammar/gbnf.h"
#include "server/model/tokenizer/tokenizer.h"

namespace tpserve::grammar {
namespace {

const std::string kModel = TPSERVE_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// The reference: token t is allowed iff the matcher takes all of its bytes.
TokenBitmask BruteForce(const Matcher& m, const std::vector<std::string>& vocab,
                        const std::vector<bool>& never, int32_t eos) {
  TokenBitmask mask((vocab.size() + 63) / 64, 0);
  for (size_t id = 0; id < vocab.size(); ++id) {
    bool ok = false;
    if (static_cast<int32_t>(id) == eos) {
      ok = m.CanEnd();
    } else if (!never[id] && !vocab[id].empty()) {
      Matcher copy = m;
      ok = copy.AcceptBytes(vocab[id]);
    }
    if (ok) mask[id >> 6] |= uint64_t{1} << (id & 63);
  }
  return mask;
}

// A random grammar over a small alphabet: rules 0..n-1, rule i referring only to later rules
// at its left edge (so never left-recursive) and to any rule after a literal.
std::string RandomGrammar(std::mt19937& rng) {
  const std::vector<std::string> atoms = {"\"a\"", "\"b\"", "\"ab\"", "\"{\"", "\"}\"", "\",\"",
                                          "[a-c]", "[^a]",  "\"é\"",  ".",     "[0-9]"};
  const int rules = 2 + static_cast<int>(rng() % 4);
  std::string text;
  for (int r = 0; r < rules; ++r) {
    text += r == 0 ? "root ::= " : absl::StrCat("r", r, " ::= ");
    const int alts = 1 + static_cast<int>(rng() % 3);
    for (int a = 0; a < alts; ++a) {
      if (a > 0) text += " | ";
      const int items = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < items; ++i) {
        std::string item;
        if (i > 0 && rng() % 4 == 0) {
          item = absl::StrCat("r", 1 + rng() % (rules - 1));  // after a byte: any rule
        } else if (r + 1 < rules && rng() % 4 == 0) {
          item = absl::StrCat("r", r + 1 + rng() % (rules - r - 1));
        } else {
          item = atoms[rng() % atoms.size()];
        }
        const char* post[] = {"", "", "*", "+", "?", "{1,3}"};
        text += " " + item + post[rng() % 6];
      }
    }
    text += "\n";
  }
  return text;
}

std::vector<std::string> RandomVocab(std::mt19937& rng, int n) {
  const std::vector<std::string> pieces = {"a", "b", "c",    "{",    "}", ",", "0",
                                           "7", "é", "\xC3", "\xA9", "x", " ", "ab"};
  std::vector<std::string> vocab;
  for (int i = 0; i < n; ++i) {
    std::string s;
    const int len = static_cast<int>(rng() % 5);
    for (int k = 0; k < len; ++k) s += pieces[rng() % pieces.size()];
    vocab.push_back(s);
  }
  return vocab;
}

// Walks `m` forward by up to `steps` random allowed bytes.
void RandomWalk(std::mt19937& rng, Matcher* m, int steps) {
  for (int s = 0; s < steps && !m->Done(); ++s) {
    std::vector<uint8_t> ok;
    for (int b = 0; b < 256; ++b) {
      Matcher copy = *m;
      if (copy.Accept(static_cast<uint8_t>(b))) ok.push_back(static_cast<uint8_t>(b));
    }
    if (ok.empty()) return;
    m->Accept(ok[rng() % ok.size()]);
  }
}

TEST(TokenMaskTest, EqualsTheBruteForceReferenceOnRandomStatesOfRandomGrammars) {
  std::mt19937 rng(20261206);
  int checked = 0;
  int mixed = 0;  // states with some tokens allowed and some not
  for (int g = 0; g < 40; ++g) {
    const std::string text = RandomGrammar(rng);
    absl::StatusOr<std::shared_ptr<const Grammar>> grammar = CompileGbnf(text);
    if (!grammar.ok()) continue;  // a random rule left undefined or unreachable: skip it
    const std::vector<std::string> vocab = RandomVocab(rng, 300);
    std::vector<bool> never(vocab.size(), false);
    never[5] = true;  // a "special" token
    const int32_t eos = 7;
    const TokenTrie trie(vocab, never, eos);
    for (int state = 0; state < 8; ++state) {
      Matcher m(*grammar);
      RandomWalk(rng, &m, static_cast<int>(rng() % 12));
      TokenBitmask mask;
      trie.Mask(m, &mask);
      ASSERT_EQ(mask, BruteForce(m, vocab, never, eos)) << text;
      int allowed = 0;
      for (uint64_t word : mask) allowed += __builtin_popcountll(word);
      ++checked;
      mixed += allowed > 0 && allowed < static_cast<int>(vocab.size()) ? 1 : 0;
    }
  }
  EXPECT_GT(checked, 150);
  EXPECT_GT(mixed, 100);
}

TEST(TokenMaskTest, EqualsTheReferenceOnTheSmolLmVocabulary) {
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer = model::Tokenizer::Load(kModel);
  if (!tokenizer.ok()) GTEST_SKIP() << tokenizer.status();
  std::vector<std::string> vocab;
  std::vector<bool> never;
  for (int32_t id = 0; id < (*tokenizer)->vocab_size(); ++id) {
    vocab.emplace_back((*tokenizer)->TokenBytes(id));
    never.push_back((*tokenizer)->IsSpecial(id));
  }
  const int32_t eos = (*tokenizer)->eos_id();
  const TokenTrie trie(vocab, never, eos);
  absl::StatusOr<std::shared_ptr<const Grammar>> grammar = CompileGbnf(R"(
root ::= "{" ws "\"name\":" ws string ws "," ws "\"age\":" ws [0-9]{1,3} ws "}"
string ::= "\"" ([^"\\] | "\\" ["\\nt])* "\""
ws ::= [ \n]?
)");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  Matcher m(*grammar);
  for (absl::string_view prefix : {"", "{", "{\"name\": \"Jo", "{\"name\": \"Jo\", \"age\": 4",
                                   "{\"name\": \"Jo\", \"age\": 42 }"}) {
    Matcher at = m;
    ASSERT_TRUE(at.AcceptBytes(prefix)) << prefix;
    TokenBitmask mask;
    trie.Mask(at, &mask);
    EXPECT_EQ(mask, BruteForce(at, vocab, never, eos)) << prefix;
  }
}

}  // namespace
}  // namespace tpserve::grammar
