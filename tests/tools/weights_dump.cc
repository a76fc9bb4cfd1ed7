// weights_dump: inspects a model through WeightSource (either format).
//   weights_dump config PATH        the ModelConfig as JSON
//   weights_dump list PATH          {"format": ..., "tensors": {name: [rows, cols]}}
//   weights_dump read PATH NAME OUT [ROW_BEGIN ROW_END [COL_BEGIN COL_END]]
//                                   raw little-endian f32 of the (sub-)matrix, row-major
//   weights_dump dump PATH DIR      DIR/<name>.f32 for every tensor
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/common/status_macros.h"
#include "server/model/weights/weight_source.h"

namespace {

using tpserve::model::WeightShape;
using tpserve::model::WeightSource;

absl::Status WriteSlice(const WeightSource& src, const std::string& name, int64_t rb, int64_t re,
                        int64_t cb, int64_t ce, const std::string& out_path) {
  if (rb < 0 || rb > re || cb < 0 || cb > ce) {
    return absl::InvalidArgumentError("bad slice bounds");
  }
  std::vector<float> buf(static_cast<size_t>((re - rb) * (ce - cb)));  // [re-rb, ce-cb]
  RETURN_IF_ERROR(src.ReadSlice(name, rb, re, cb, ce, buf.data()));
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(buf.data()),
            static_cast<std::streamsize>(buf.size() * sizeof(float)));
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", out_path));
  return absl::OkStatus();
}

absl::Status Run(const std::vector<std::string>& args) {
  if (args.size() < 2) return absl::InvalidArgumentError("usage: weights_dump CMD PATH ...");
  const std::string& cmd = args[0];
  ASSIGN_OR_RETURN(std::unique_ptr<WeightSource> src, tpserve::model::OpenWeightSource(args[1]));
  using json = nlohmann::json;
  if (cmd == "config") {
    std::cout << src->config().ToJson().dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return absl::OkStatus();
  }
  if (cmd == "list") {
    json j;
    j["format"] = std::string(src->format());
    j["tensors"] = json::object();
    for (const std::string& name : src->Names()) {
      ASSIGN_OR_RETURN(const WeightShape s, src->Shape(name));
      j["tensors"][name] = {s.rows, s.cols};
    }
    std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return absl::OkStatus();
  }
  if (cmd == "read") {
    if (args.size() != 4 && args.size() != 6 && args.size() != 8) {
      return absl::InvalidArgumentError(
          "usage: weights_dump read PATH NAME OUT [ROW_BEGIN ROW_END [COL_BEGIN COL_END]]");
    }
    ASSIGN_OR_RETURN(const WeightShape s, src->Shape(args[2]));
    int64_t b[4] = {0, s.rows, 0, s.cols};
    for (size_t i = 4; i < args.size(); ++i) {
      if (!absl::SimpleAtoi(args[i], &b[i - 4])) {
        return absl::InvalidArgumentError(absl::StrCat("not an integer: ", args[i]));
      }
    }
    return WriteSlice(*src, args[2], b[0], b[1], b[2], b[3], args[3]);
  }
  if (cmd == "dump" && args.size() == 3) {
    for (const std::string& name : src->Names()) {
      ASSIGN_OR_RETURN(const WeightShape s, src->Shape(name));
      RETURN_IF_ERROR(
          WriteSlice(*src, name, 0, s.rows, 0, s.cols, absl::StrCat(args[2], "/", name, ".f32")));
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown command or arguments: ", cmd));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const absl::Status s = Run(std::vector<std::string>(argv + 1, argv + argc));
    if (!s.ok()) {
      std::cerr << "weights_dump: " << s << "\n";
      return 1;
    }
  } catch (const std::exception& e) {  // bad_alloc and the like: report, never escape
    std::cerr << "weights_dump: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
