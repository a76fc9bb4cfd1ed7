#include "server/cli/stream_printer.h"

#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace tpserve::cli {
namespace {

// FINISH_REASON_LENGTH → "length".
std::string FinishReasonName(tpserve::v1::FinishReason reason) {
  absl::string_view name = tpserve::v1::FinishReason_Name(reason);
  absl::ConsumePrefix(&name, "FINISH_REASON_");
  return absl::AsciiStrToLower(name);
}

std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

void StreamPrinter::Send(tpserve::v1::GenerateResponse message) {
  absl::MutexLock lock(&mu_);
  token_ids_.insert(token_ids_.end(), message.token_ids().begin(), message.token_ids().end());
  if (json_) {
    PrintTokensLocked(message);
  } else {
    out_ << message.text();
  }
  out_.flush();
  last_ = std::move(message);
}

void StreamPrinter::PrintTokensLocked(const tpserve::v1::GenerateResponse& message) {
  // A message carries one token today; were it several, its text goes with the last.
  for (int i = 0; i < message.token_ids_size(); ++i) {
    nlohmann::json j = {{"id", message.token_ids(i)},
                        {"text", i + 1 == message.token_ids_size() ? message.text() : ""}};
    if (i < message.logprobs_size()) {
      const tpserve::v1::TokenLogprobs& lp = message.logprobs(i);
      j["logprob"] = lp.chosen().logprob();
      if (top_logprobs_ > 0) {
        nlohmann::json top = nlohmann::json::array();
        for (const tpserve::v1::TokenLogprob& t : lp.top()) {
          if (top.size() == top_logprobs_) break;
          top.push_back({{"id", t.token_id()}, {"logprob", t.logprob()}});
        }
        j["top"] = std::move(top);
      }
    }
    out_ << Dump(j) << "\n";
  }
}

void StreamPrinter::PrintSummaryLocked() {
  const nlohmann::json summary = {{"finish_reason", FinishReasonName(last_.finish_reason())},
                                  {"token_ids", token_ids_},
                                  {"prompt_tokens", last_.usage().prompt_tokens()},
                                  {"completion_tokens", last_.usage().completion_tokens()}};
  out_ << Dump(summary) << "\n";
}

void StreamPrinter::Close(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (status.ok()) {
    if (json_) {
      PrintSummaryLocked();
    } else {
      out_ << "\n";
    }
    out_.flush();
  }
  closed_ = status;
}

absl::Status StreamPrinter::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::optional<absl::Status>* closed) { return closed->has_value(); }, &closed_));
  return *closed_;
}

}  // namespace tpserve::cli
