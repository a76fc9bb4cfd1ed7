#include "server/protocol/step_codec.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/engine/draft_verifier.h"

namespace tpserve::protocol {
namespace {

constexpr uint32_t kInt32Max = std::numeric_limits<int32_t>::max();

bool PenaltiesOn(const engine::SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
}

absl::Status SequenceError(int s, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("Step: sequences[", s, "]: ", what));
}

bool InVocabulary(int32_t id, int32_t vocab_size) { return id >= 0 && id < vocab_size; }

// Checks one SampledToken against the sequence that asked for it.
absl::Status CheckToken(int i, const tpserve::v1::SampledToken& t,
                        const tpserve::v1::StepSequence& asked, int32_t vocab_size) {
  const auto error = [i](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("StepResult: tokens[", i, "]: ", what));
  };
  if (t.seq_id() != asked.seq_id()) {
    return error(absl::StrCat("seq_id ", t.seq_id(), " where the Step's sampled sequence ", i,
                              " is ", asked.seq_id()));
  }
  if (!InVocabulary(t.token_id(), vocab_size)) {
    return error(absl::StrCat("token_id ", t.token_id(), " is outside the vocabulary [0, ",
                              vocab_size, ")"));
  }
  if (t.top_token_ids_size() != t.top_logprobs_size()) {
    return error(absl::StrCat(t.top_token_ids_size(), " top_token_ids but ", t.top_logprobs_size(),
                              " top_logprobs"));
  }
  if (static_cast<uint32_t>(t.top_token_ids_size()) > asked.sampling().logprobs()) {
    return error(absl::StrCat(t.top_token_ids_size(), " top alternatives where ",
                              asked.sampling().logprobs(), " were asked for"));
  }
  for (int32_t id : t.top_token_ids()) {
    if (!InVocabulary(id, vocab_size)) {
      return error(absl::StrCat("top_token_ids holds ", id, ", outside the vocabulary [0, ",
                                vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void SamplingToProto(const engine::SamplingParams& params, tpserve::v1::SamplingParams* p) {
  p->set_temperature(params.temperature);
  p->set_top_k(params.top_k);
  p->set_top_p(params.top_p);
  p->set_min_p(params.min_p);
  p->set_typical_p(params.typical_p);
  p->set_repetition_penalty(params.repetition_penalty);
  p->set_frequency_penalty(params.frequency_penalty);
  p->set_presence_penalty(params.presence_penalty);
  p->set_seed(params.seed);
  p->set_logprobs(params.logprobs);
}

engine::SamplingParams SamplingFromProto(const tpserve::v1::SamplingParams& p) {
  engine::SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p();
  s.min_p = p.min_p();
  s.typical_p = p.typical_p() == 0.0f ? 1.0f : p.typical_p();  // 0: a sender without the field
  s.repetition_penalty = p.repetition_penalty();
  s.frequency_penalty = p.frequency_penalty();
  s.presence_penalty = p.presence_penalty();
  s.seed = p.seed();
  s.logprobs = p.logprobs();
  return s;
}

void AddStepSequence(const StepSequenceSpec& spec, const engine::SamplingParams& params,
                     const engine::TokenHistory& history, tpserve::v1::Step* step) {
  tpserve::v1::StepSequence* seq = step->add_sequences();
  seq->set_seq_id(spec.seq_id);
  seq->mutable_token_ids()->Add(spec.tokens.begin(), spec.tokens.end());
  seq->set_start_pos(static_cast<uint32_t>(spec.start_pos));
  for (int32_t block : spec.block_table) seq->add_block_table(static_cast<uint32_t>(block));
  seq->set_sample(spec.sample);
  seq->set_draft_tokens(static_cast<uint32_t>(spec.draft_tokens));
  seq->set_sample_index(static_cast<uint32_t>(spec.sample_index));
  if (!spec.sample) return;
  SamplingToProto(params, seq->mutable_sampling());
  if (PenaltiesOn(params)) {
    seq->mutable_penalty_token_ids()->Add(history.prompt.begin(), history.prompt.end());
    seq->mutable_penalty_token_ids()->Add(history.generated.begin(), history.generated.end());
  }
}

absl::StatusOr<DecodedStep> DecodeStep(const tpserve::v1::Step& step, int32_t vocab_size) {
  DecodedStep out;
  out.batch.sequences.reserve(step.sequences_size());
  absl::flat_hash_set<uint64_t> seen;
  for (int s = 0; s < step.sequences_size(); ++s) {
    const tpserve::v1::StepSequence& in = step.sequences(s);
    if (!seen.insert(in.seq_id()).second) {
      return SequenceError(s, absl::StrCat("seq_id ", in.seq_id(), " appears twice"));
    }
    if (in.start_pos() > kInt32Max) {
      return SequenceError(s, absl::StrCat("start_pos ", in.start_pos(), " is above ", kInt32Max));
    }
    engine::StepSequence seq;
    seq.tokens.assign(in.token_ids().begin(), in.token_ids().end());
    seq.start_pos = static_cast<int32_t>(in.start_pos());
    seq.block_table.reserve(in.block_table_size());
    for (uint32_t block : in.block_table()) {
      if (block > kInt32Max) {
        return SequenceError(s, absl::StrCat("block_table holds ", block, ", above ", kInt32Max));
      }
      seq.block_table.push_back(static_cast<int32_t>(block));
    }
    seq.want_logits = in.sample();
    const uint32_t draft = in.draft_tokens();
    if (draft > 0) {
      if (!in.sample()) return SequenceError(s, "draft_tokens without sample");
      if (draft > kMaxDraftTokens) {
        return SequenceError(
            s, absl::StrCat("draft_tokens ", draft, " is above the limit of ", kMaxDraftTokens));
      }
      if (static_cast<uint32_t>(in.token_ids_size()) != draft + 1) {
        return SequenceError(
            s, absl::StrCat("draft_tokens ", draft, " with ", in.token_ids_size(),
                            " token_ids: want the last token and the proposals, ", draft + 1));
      }
      seq.all_logits = true;  // a row after the last token and after each proposal
    }
    out.batch.sequences.push_back(std::move(seq));
    if (!in.sample()) continue;
    SampleSpec sample;
    sample.seq_id = in.seq_id();
    sample.params = SamplingFromProto(in.sampling());
    if (absl::Status valid = engine::ValidateSamplingParams(sample.params, vocab_size);
        !valid.ok()) {
      return SequenceError(s, absl::StrCat("sampling: ", valid.message()));
    }
    const uint32_t most = std::min<uint32_t>(kMaxLogprobs, static_cast<uint32_t>(vocab_size));
    if (sample.params.logprobs > most) {
      return SequenceError(s, absl::StrCat("sampling: logprobs ", sample.params.logprobs,
                                           " is above the limit of ", most));
    }
    // penalty_token_ids is prompt + generated; its last sample_index are the generated ones.
    const absl::Span<const int32_t> history(in.penalty_token_ids().data(),
                                            in.penalty_token_ids().size());
    const size_t generated = std::min<size_t>(in.sample_index(), history.size());
    sample.history = {history.first(history.size() - generated), history.last(generated)};
    sample.sample_index = in.sample_index();
    sample.draft = absl::MakeConstSpan(in.token_ids().data(), in.token_ids_size()).last(draft);
    out.samples.push_back(std::move(sample));
  }
  return out;
}

void AddSequenceMask(uint64_t seq_id, absl::string_view allowed_tokens,
                     tpserve::v1::StepMasks* masks, uint32_t position) {
  tpserve::v1::SequenceMask* mask = masks->add_masks();
  mask->set_seq_id(seq_id);
  mask->set_allowed_tokens(allowed_tokens.data(), allowed_tokens.size());
  mask->set_position(position);
}

absl::Status ApplyStepMasks(const tpserve::v1::StepMasks& masks, uint64_t step_id,
                            int32_t vocab_size, DecodedStep* decoded) {
  if (masks.step_id() != step_id) {
    return absl::InvalidArgumentError(
        absl::StrCat("StepMasks: step_id ", masks.step_id(), " is not the step's, ", step_id));
  }
  absl::flat_hash_map<uint64_t, SampleSpec*> samples;
  for (SampleSpec& sample : decoded->samples) samples[sample.seq_id] = &sample;
  const size_t want = (static_cast<size_t>(vocab_size) + 7) / 8;
  for (int m = 0; m < masks.masks_size(); ++m) {
    const tpserve::v1::SequenceMask& in = masks.masks(m);
    auto refuse = [m](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("StepMasks: masks[", m, "]: ", why));
    };
    auto it = samples.find(in.seq_id());
    if (it == samples.end()) {
      return refuse(
          absl::StrCat("seq_id ", in.seq_id(), " is not a sampling sequence of step ", step_id));
    }
    SampleSpec& sample = *it->second;
    const size_t positions = 1 + sample.draft.size();
    if (in.position() >= positions) {
      return refuse(absl::StrCat("seq_id ", in.seq_id(), ": position ", in.position(),
                                 " is past its ", sample.draft.size(), " proposals"));
    }
    sample.allowed.resize(positions);
    if (!sample.allowed[in.position()].empty()) {
      return refuse(absl::StrCat("seq_id ", in.seq_id(), " has a mask at position ", in.position(),
                                 " already"));
    }
    const auto* bits = reinterpret_cast<const uint8_t*>(in.allowed_tokens().data());
    if (in.allowed_tokens().size() != want) {
      return refuse(absl::StrCat("allowed_tokens holds ", in.allowed_tokens().size(),
                                 " bytes, want ", want, " (one bit per token)"));
    }
    if (std::all_of(bits, bits + want, [](uint8_t b) { return b == 0; })) {
      return refuse("allowed_tokens allows no token");
    }
    sample.allowed[in.position()] = absl::MakeConstSpan(bits, want);
  }
  for (const SampleSpec& sample : decoded->samples) {
    for (size_t p = 0; p < sample.allowed.size(); ++p) {
      if (sample.allowed[p].empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("StepMasks: seq_id ", sample.seq_id, " has no mask at position ", p,
                         " of its ", sample.allowed.size(), ": each is bound or none"));
      }
    }
  }
  return absl::OkStatus();
}

void AddSampledToken(uint64_t seq_id, const engine::SampleResult& sampled,
                     tpserve::v1::StepResult* result) {
  tpserve::v1::SampledToken* t = result->add_tokens();
  t->set_seq_id(seq_id);
  t->set_token_id(sampled.token_id);
  t->set_logprob(sampled.logprob);
  for (const engine::TokenLogprob& top : sampled.top) {
    t->add_top_token_ids(top.token_id);
    t->add_top_logprobs(top.logprob);
  }
}

absl::Status SampleDecodedStep(const DecodedStep& decoded, absl::Span<const float> logits,
                               int32_t vocab_size, engine::Sampler* sampler,
                               tpserve::v1::StepResult* result) {
  const size_t vocab = static_cast<size_t>(vocab_size);
  size_t rows = 0;
  for (const SampleSpec& spec : decoded.samples) rows += 1 + spec.draft.size();
  if (logits.size() != rows * vocab) {
    return absl::InternalError(
        absl::StrCat("logits hold ", logits.size(), " values, want ", rows, " x ", vocab));
  }
  std::vector<int32_t> scratch;
  std::vector<engine::SampleResult> drawn;
  size_t row = 0;
  for (const SampleSpec& spec : decoded.samples) {
    const size_t n = 1 + spec.draft.size();
    if (spec.draft.empty()) {
      AddSampledToken(
          spec.seq_id,
          sampler->Sample(logits.subspan(row * vocab, vocab), spec.params, spec.history,
                          spec.sample_index,
                          spec.allowed.empty() ? absl::Span<const uint8_t>() : spec.allowed[0]),
          result);
    } else {
      drawn.clear();
      engine::VerifyDraft(sampler, logits.subspan(row * vocab, n * vocab), vocab_size, spec.params,
                          spec.history, spec.sample_index, spec.draft, spec.allowed, &scratch,
                          &drawn);
      for (const engine::SampleResult& d : drawn) AddSampledToken(spec.seq_id, d, result);
    }
    row += n;
  }
  return absl::OkStatus();
}

absl::Status CheckStepResult(const tpserve::v1::Step& step, const tpserve::v1::StepResult& result,
                             int rank, int32_t vocab_size) {
  if (rank != 0) {
    if (result.tokens_size() == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("StepResult: rank ", rank, " returned ",
                                                   result.tokens_size(),
                                                   " tokens; only rank 0 samples"));
  }
  int i = 0;
  for (const tpserve::v1::StepSequence& asked : step.sequences()) {
    if (!asked.sample()) continue;
    if (i >= result.tokens_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("StepResult: no token for sampled sequence ", asked.seq_id()));
    }
    // The sequence's tokens: one; or, verifying a draft, the accepted proposals and one draw.
    const int draft = static_cast<int>(asked.draft_tokens());
    const int first = i;
    do {
      if (absl::Status s = CheckToken(i, result.tokens(i), asked, vocab_size); !s.ok()) return s;
      ++i;
    } while (i - first <= draft && i < result.tokens_size() &&
             result.tokens(i).seq_id() == asked.seq_id());
    for (int j = first; j < i; ++j) {
      if (j - first >= draft) break;
      const int32_t proposed = asked.token_ids(1 + j - first);
      const bool accepted = result.tokens(j).token_id() == proposed;
      if (j + 1 < i && !accepted) {
        return absl::InvalidArgumentError(
            absl::StrCat("StepResult: tokens[", j, "]: ", result.tokens(j).token_id(),
                         " is followed by more tokens but is not proposal ", proposed));
      }
      if (j + 1 == i && accepted) {
        return absl::InvalidArgumentError(
            absl::StrCat("StepResult: tokens[", j, "]: the last draw, ", proposed,
                         ", is the proposal, which verification would have accepted"));
      }
    }
  }
  if (i != result.tokens_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("StepResult: ", result.tokens_size(), " tokens, ", result.tokens_size() - i,
                     " more than the step's sampled sequences and their drafts take"));
  }
  return absl::OkStatus();
}

engine::SampleResult FromSampledToken(const tpserve::v1::SampledToken& t) {
  engine::SampleResult r;
  r.token_id = t.token_id();
  r.logprob = t.logprob();
  for (int i = 0; i < t.top_token_ids_size() && i < t.top_logprobs_size(); ++i) {
    r.top.push_back({t.top_token_ids(i), t.top_logprobs(i)});
  }
  return r;
}

}  // namespace tpserve::protocol
