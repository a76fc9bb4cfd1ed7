#include "server/worker/model_root.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tpserve::worker {
namespace {

namespace fs = std::filesystem;

// root/model.gguf, root/sub/inside -> root/model.gguf, root/escape -> outside/secret.gguf,
// outside/secret.gguf, root2/m.gguf (a sibling whose name starts with the root's).
class ModelRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::path(::testing::TempDir()) / absl::StrCat("model_root_test.", getpid());
    fs::remove_all(base_);
    fs::create_directories(base_ / "root" / "sub");
    fs::create_directories(base_ / "outside");
    fs::create_directories(base_ / "root2");
    std::ofstream(base_ / "root2" / "m.gguf") << "GGUF";
    std::ofstream(base_ / "root" / "model.gguf") << "GGUF";
    std::ofstream(base_ / "outside" / "secret.gguf") << "GGUF";
    fs::create_symlink(base_ / "outside" / "secret.gguf", base_ / "root" / "escape");
    fs::create_symlink(base_ / "root" / "model.gguf", base_ / "root" / "sub" / "inside");
    auto root = ModelRoot::Open((base_ / "root").string());
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = *std::move(root);
  }
  void TearDown() override { fs::remove_all(base_); }

  std::string Refusal(const std::string& path) {
    absl::StatusOr<std::string> resolved = root_.Resolve(path);
    EXPECT_EQ(resolved.status().code(), absl::StatusCode::kFailedPrecondition) << path;
    // The message repeats the path as given and nothing else that differs.
    std::string message(resolved.status().message());
    const size_t at = message.find(absl::StrCat("'", path, "'"));
    if (at != std::string::npos) message.replace(at + 1, path.size(), "PATH");
    return message;
  }

  fs::path base_;
  ModelRoot root_;
};

TEST_F(ModelRootTest, LoadsPathsUnderTheRoot) {
  const std::string model = fs::canonical(base_ / "root" / "model.gguf").string();
  EXPECT_EQ(*root_.Resolve((base_ / "root" / "model.gguf").string()), model);
  EXPECT_EQ(*root_.Resolve((base_ / "root" / "sub" / ".." / "model.gguf").string()), model);
  EXPECT_EQ(*root_.Resolve((base_ / "root" / "sub" / "inside").string()), model);
  EXPECT_TRUE(root_.Resolve((base_ / "root").string()).ok());  // a directory model
}

TEST_F(ModelRootTest, OutsideAndMissingGetOneMessage) {
  const std::string missing = Refusal((base_ / "root" / "nope.gguf").string());
  EXPECT_EQ(missing,
            "Init: model path 'PATH' is not a readable model under this worker's "
            "--model_root");
  EXPECT_EQ(Refusal((base_ / "root" / ".." / "outside" / "secret.gguf").string()), missing);
  EXPECT_EQ(Refusal((base_ / "outside" / "secret.gguf").string()), missing);
  EXPECT_EQ(Refusal((base_ / "root" / "escape").string()), missing);  // symlink out
  EXPECT_EQ(Refusal((base_ / "outside" / "nope.gguf").string()), missing);
  EXPECT_EQ(Refusal("/etc/passwd"), missing);
  EXPECT_EQ(Refusal("/no/such/dir"), missing);
  EXPECT_EQ(Refusal((base_ / "root2" / "m.gguf").string()), missing);  // a prefix is not a parent
  EXPECT_EQ(Refusal(""), missing);
}

TEST_F(ModelRootTest, NoRootRefusesEverything) {
  ModelRoot none;
  EXPECT_EQ(none.Resolve((base_ / "root" / "model.gguf").string()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(ModelRoot::Open((base_ / "root" / "model.gguf").string()).ok());
  EXPECT_FALSE(ModelRoot::Open((base_ / "nope").string()).ok());
  EXPECT_FALSE(ModelRoot::Open("").ok());
}

TEST_F(ModelRootTest, DefaultIsTheModelsDirectory) {
  const std::string root = fs::canonical(base_ / "root").string();
  EXPECT_EQ(ModelRoot::DefaultFor((base_ / "root" / "model.gguf").string()), root);
  EXPECT_EQ(ModelRoot::DefaultFor((base_ / "root").string()), root);
  // A symlinked model: the directory of the file it points to.
  EXPECT_EQ(ModelRoot::DefaultFor((base_ / "root" / "escape").string()),
            fs::canonical(base_ / "outside").string());
  EXPECT_EQ(ModelRoot::DefaultFor("model.gguf"), ".");
}

}  // namespace
}  // namespace tpserve::worker
