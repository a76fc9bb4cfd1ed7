#include "server/cli/inspect_command.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/common/status_macros.h"
#include "server/model/chat/chat_template.h"
#include "server/model/tokenizer/tokenizer.h"
#include "server/model/weights/weight_source.h"

namespace tpserve::cli {
namespace {

// Control characters shown as escapes so the token table stays on one line.
std::string Printable(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\x%02x", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out;
}

void PrintConfig(const model::ModelConfig& c, std::string_view format, std::ostream& out) {
  out << "== model\n"
      << "name            " << c.name << "\n"
      << "format          " << format << "\n"
      << "architecture    " << c.architecture << "\n"
      << "layers          " << c.n_layers << "\n"
      << "d_model         " << c.d_model << "\n"
      << "heads (q / kv)  " << c.n_heads << " / " << c.n_kv_heads << " of dim " << c.head_dim
      << "\n"
      << "ffn             " << c.ffn_dim << "\n"
      << "vocab           " << c.vocab_size << "\n"
      << "context         " << c.context_length << "\n"
      << "rope            theta " << c.rope_theta << ", scaling "
      << model::RopeScalingTypeName(c.rope_scaling.type) << ", "
      << (c.rope_style == model::RopeStyle::kNeox ? "neox" : "interleaved") << " pairs\n"
      << "norm eps        " << c.norm_eps << "\n"
      << "tied embeddings " << (c.tied_embeddings ? "yes" : "no") << "\n";
}

absl::Status PrintWeights(const model::WeightSource& weights, std::ostream& out) {
  int64_t params = 0;
  const std::vector<std::string> names = weights.Names();
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(model::WeightShape shape, weights.Shape(name));
    params += shape.rows * shape.cols;
  }
  out << "weights         " << names.size() << " tensors, "
      << absl::StrFormat("%.1fM", static_cast<double>(params) / 1e6) << " parameters\n";
  return absl::OkStatus();
}

}  // namespace

absl::Status RunInspect(const InspectOptions& options, std::ostream& out) {
  ASSIGN_OR_RETURN(auto weights, model::OpenWeightSource(options.model_path));
  PrintConfig(weights->config(), weights->format(), out);
  RETURN_IF_ERROR(PrintWeights(*weights, out));

  ASSIGN_OR_RETURN(auto tokenizer, model::Tokenizer::Load(options.model_path));
  out << "\n== tokenizer\n"
      << "vocab           " << tokenizer->vocab_size() << "\n"
      << "bos / eos       " << tokenizer->bos_id() << " / " << tokenizer->eos_id() << "\n"
      << "add bos         " << (tokenizer->add_bos() ? "yes" : "no") << "\n";
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer->Encode(options.prompt, true));
  out << "prompt          \"" << Printable(options.prompt) << "\" -> " << ids.size() << " tokens\n";
  for (int32_t id : ids) {
    out << absl::StrFormat("  %6d  %s\n", id, Printable(tokenizer->TokenBytes(id)));
  }
  ASSIGN_OR_RETURN(std::string round_trip, tokenizer->Decode(ids, false));
  out << "decoded         \"" << Printable(round_trip) << "\"\n";

  out << "\n== chat template\n";
  if (tokenizer->chat_template().empty()) {
    out << "(the model has none)\n";
    return absl::OkStatus();
  }
  auto piece = [&](int32_t id) {
    return tokenizer->IsValidId(id) ? std::string(tokenizer->TokenPiece(id)) : std::string();
  };
  ASSIGN_OR_RETURN(auto chat_template, model::ChatTemplate::FromText(tokenizer->chat_template(),
                                                                     piece(tokenizer->bos_id()),
                                                                     piece(tokenizer->eos_id())));
  const model::ChatMessage message{"user", options.prompt};
  ASSIGN_OR_RETURN(model::ChatText rendered, chat_template->Render({&message, 1}, true));
  ASSIGN_OR_RETURN(std::vector<int32_t> chat_ids,
                   tokenizer->Encode(rendered.text(), false, rendered.content()));
  out << "family          " << chat_template->name() << "\n"
      << "rendered (" << chat_ids.size() << " tokens):\n"
      << rendered.text() << "\n";
  return absl::OkStatus();
}

}  // namespace tpserve::cli
