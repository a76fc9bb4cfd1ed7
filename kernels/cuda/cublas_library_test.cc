// Runs without a GPU: opening cuBLAS and asking its version needs no device.
#include "kernels/cuda/cublas_library.h"

#include <link.h>
#include <pthread.h>

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace tpserve::cuda {
namespace {

// Whether a library whose path contains `name` is mapped into this process.
bool Loaded(const char* name) {
  struct Query {
    const char* name;
    bool found;
  } q{name, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* q = static_cast<Query*>(data);
        if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, q->name) != nullptr) {
          q->found = true;
        }
        return 0;
      },
      &q);
  return q.found;
}

TEST(CublasLibraryTest, OpenedOnFirstUseNotAtStartUp) {
  EXPECT_FALSE(Loaded("libcublas")) << "cuBLAS is linked: its TLS is reserved in every thread";
  absl::StatusOr<const CublasLibrary*> lib = CublasLibrary::Get();
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_TRUE(Loaded("libcublas"));
  EXPECT_TRUE(Loaded("libcublasLt"));
  absl::StatusOr<const CublasLibrary*> again = CublasLibrary::Get();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *lib);
}

TEST(CublasLibraryTest, EveryEntryPointResolvesAndAnswers) {
  absl::StatusOr<const CublasLibrary*> lib = CublasLibrary::Get();
  ASSERT_TRUE(lib.ok()) << lib.status();
  const CublasLibrary& c = **lib;
  EXPECT_NE(c.create, nullptr);
  EXPECT_NE(c.destroy, nullptr);
  EXPECT_NE(c.set_stream, nullptr);
  EXPECT_NE(c.get_stream, nullptr);
  EXPECT_NE(c.set_workspace, nullptr);
  EXPECT_NE(c.set_pointer_mode, nullptr);
  EXPECT_NE(c.gemm_ex, nullptr);
  int major = -1;
  ASSERT_EQ(c.get_property(MAJOR_VERSION, &major), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(major, CUBLAS_VER_MAJOR);
  EXPECT_STREQ(c.status_name(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_EQ(CublasLibrary::FileName(), "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
}

// The reason for opening late: with cuBLAS open, a thread with CivetWeb's 100 KiB stack (the
// /metrics server) still starts. Linked at start-up, cuBLAS's TLS alone would not fit.
TEST(CublasLibraryTest, SmallStackThreadsStillStart) {
  ASSERT_TRUE(CublasLibrary::Get().ok());
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 100 * 1024), 0);
  pthread_t thread;
  const int err = pthread_create(
      &thread, &attr, [](void*) -> void* { return nullptr; }, nullptr);
  ASSERT_EQ(err, 0) << std::strerror(err);
  EXPECT_EQ(pthread_join(thread, nullptr), 0);
  pthread_attr_destroy(&attr);
}

}  // namespace
}  // namespace tpserve::cuda
