#include "server/coordinator/step_codec.h"

#include <algorithm>

namespace tpserve::coordinator {

void AddStepSequence(const StepSequenceSpec& spec, const engine::SamplingParams& params,
                     const engine::TokenHistory& history, tpserve::v1::Step* step) {
  tpserve::v1::StepSequence* seq = step->add_sequences();
  seq->set_seq_id(spec.seq_id);
  seq->mutable_token_ids()->Add(spec.tokens.begin(), spec.tokens.end());
  seq->set_start_pos(static_cast<uint32_t>(spec.start_pos));
  for (int32_t block : spec.block_table) seq->add_block_table(static_cast<uint32_t>(block));
  seq->set_sample(spec.sample);
  seq->set_sample_index(static_cast<uint32_t>(spec.sample_index));
  if (!spec.sample) return;
  tpserve::v1::SamplingParams* p = seq->mutable_sampling();
  p->set_temperature(params.temperature);
  p->set_top_k(params.top_k);
  p->set_top_p(params.top_p);
  p->set_min_p(params.min_p);
  p->set_repetition_penalty(params.repetition_penalty);
  p->set_frequency_penalty(params.frequency_penalty);
  p->set_presence_penalty(params.presence_penalty);
  p->set_seed(params.seed);
  p->set_logprobs(params.logprobs);
  if (params.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f ||
      params.presence_penalty != 0.0f) {
    seq->mutable_penalty_token_ids()->Add(history.prompt.begin(), history.prompt.end());
    seq->mutable_penalty_token_ids()->Add(history.generated.begin(), history.generated.end());
  }
}

engine::SampleResult FromSampledToken(const tpserve::v1::SampledToken& t,
                                      const engine::SamplingParams& params) {
  engine::SampleResult r;
  r.token_id = t.token_id();
  r.logprob = t.logprob();
  for (int i = 0; i < t.top_token_ids_size() && i < t.top_logprobs_size(); ++i) {
    r.top.push_back({t.top_token_ids(i), t.top_logprobs(i)});
  }
  r.is_stop = std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), r.token_id) !=
              params.stop_token_ids.end();
  return r;
}

}  // namespace tpserve::coordinator
