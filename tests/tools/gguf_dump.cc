// gguf_dump MODEL.gguf OUTDIR [--rows A:B] [--tensor NAME]...
// Writes each selected tensor (all when no --tensor is given) dequantised to f32 as raw
// little-endian bytes to OUTDIR/<name>.f32, and OUTDIR/index.json listing for each tensor
// its name, file, dims (ggml order, dims[0] fastest), type and the rows written. --rows A:B
// keeps rows [A, B) of each tensor's 2-D view [n_values / dims[0], dims[0]], clamped to the
// tensor's row count. Exit status 0 on success, 1 on a failure (message on stderr), 2 on
// bad usage.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/common/status_macros.h"
#include "server/model/gguf/dequantize.h"
#include "server/model/gguf/gguf_file.h"

namespace {

using tpserve::model::GgufFile;
using tpserve::model::GgufTensorInfo;

struct Options {
  std::string model;
  std::string out_dir;
  int64_t row_begin = 0;
  int64_t row_end = -1;  // -1: all rows
  std::vector<std::string> tensors;
};

constexpr int64_t kRowsPerChunk = 4096;  // bounds the f32 buffer held at once

bool ParseInt(std::string_view s, int64_t* v) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && end == s.data() + s.size() && *v >= 0;
}

bool ParseArgs(int argc, char** argv, Options* o) {
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--rows" || a == "--tensor") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--tensor") {
        o->tensors.push_back(v);
        continue;
      }
      const size_t colon = v.find(':');
      if (colon == std::string::npos ||
          !ParseInt(std::string_view{v}.substr(0, colon), &o->row_begin) ||
          !ParseInt(std::string_view{v}.substr(colon + 1), &o->row_end) ||
          o->row_end < o->row_begin) {
        std::cerr << "bad --rows " << v << " (want A:B with 0 <= A <= B)\n";
        return false;
      }
    } else if (a.rfind("--", 0) == 0) {
      std::cerr << "unknown or incomplete option " << a << "\n";
      return false;
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2) return false;
  o->model = positional[0];
  o->out_dir = positional[1];
  return true;
}

// Tensor names may hold '/', which cannot appear in a file name.
std::string FileNameFor(const std::string& name) {
  std::string f = name;
  std::replace(f.begin(), f.end(), '/', '_');
  return f + ".f32";
}

absl::Status DumpTensor(const GgufFile& file, const GgufTensorInfo& t, const Options& o,
                        nlohmann::json& index) {
  const int64_t n_rows = tpserve::model::TensorRowCount(t);
  const int64_t begin = std::min(o.row_begin, n_rows);
  const int64_t end = o.row_end < 0 ? n_rows : std::clamp(o.row_end, begin, n_rows);
  const std::string file_name = FileNameFor(t.name);
  const std::string path = o.out_dir + "/" + file_name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  for (int64_t r = begin; r < end; r += kRowsPerChunk) {
    // chunk: [min(kRowsPerChunk, end - r), dims[0]]
    ASSIGN_OR_RETURN(
        const std::vector<float> chunk,
        tpserve::model::DequantizeTensorRows(file, t, r, std::min(end, r + kRowsPerChunk)));
    out.write(reinterpret_cast<const char*>(chunk.data()),
              static_cast<std::streamsize>(chunk.size() * sizeof(float)));
  }
  if (!out.flush()) return absl::DataLossError(absl::StrCat("short write to ", path));
  index.push_back({{"name", t.name},
                   {"file", file_name},
                   {"dims", t.dims},
                   {"type", std::string(t.type.name)},
                   {"rows", {begin, end}},
                   {"row_len", t.dims[0]}});
  return absl::OkStatus();
}

absl::Status Run(const Options& o) {
  ASSIGN_OR_RETURN(const std::unique_ptr<GgufFile> file, GgufFile::Open(o.model));
  std::vector<const GgufTensorInfo*> selected;
  if (o.tensors.empty()) {
    for (const GgufTensorInfo& t : file->tensors()) selected.push_back(&t);
  }
  for (const std::string& name : o.tensors) {
    const GgufTensorInfo* t = file->FindTensor(name);
    if (t == nullptr) return absl::NotFoundError(absl::StrCat("no tensor named '", name, "'"));
    selected.push_back(t);
  }
  nlohmann::json index = nlohmann::json::array();
  for (const GgufTensorInfo* t : selected) RETURN_IF_ERROR(DumpTensor(*file, *t, o, index));
  const std::string index_path = o.out_dir + "/index.json";
  std::ofstream idx(index_path, std::ios::trunc);
  idx << index.dump(1) << "\n";
  if (!idx.flush()) return absl::DataLossError(absl::StrCat("cannot write ", index_path));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) {
    std::cerr << "usage: gguf_dump MODEL.gguf OUTDIR [--rows A:B] [--tensor NAME]...\n";
    return 2;
  }
  try {
    if (const absl::Status s = Run(o); !s.ok()) {
      std::cerr << "gguf_dump: " << s << "\n";
      return 1;
    }
  } catch (const std::exception& e) {  // bad_alloc, invalid UTF-8 in a name: report, never escape
    std::cerr << "gguf_dump: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
