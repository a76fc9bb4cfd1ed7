// comm_collectives: latency of one all-reduce through shared memory against Gloo over
// loopback TCP, at 2 and 3 ranks, for a decode step's hidden state (576 floats, SmolLM2's
// d_model) and a batch of 32 (576 x 32). Ranks are threads of this process, each with its own
// communicator (the shm ones each map the segment, as processes do); like the workers, a shm
// rank spins before sleeping only when the ranks fit the cores. Each as a float all-reduce and
// as the canonical path's int64 all-reduce of exact sums (AllReduceSumInt64, the same count of
// int64s). Prints a markdown table and one JSON line.
//   comm_collectives [ITERATIONS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "server/comm/gloo_communicator.h"
#include "server/comm/host_layout.h"
#include "server/comm/shm/shm_communicator.h"
#include "server/comm/store.h"

namespace {

using tpserve::comm::Communicator;

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeWorld(const std::string& kind,
                                                                     int world) {
  tpserve::comm::InMemoryStore store;
  std::vector<std::unique_ptr<Communicator>> comms(world);
  std::vector<absl::Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Communicator>> c;
      if (kind == "shm") {
        tpserve::comm::ShmOptions o;
        o.prefix = "bench/";
        if (world > tpserve::comm::UsableCpus()) o.spin = absl::ZeroDuration();
        c = tpserve::comm::CreateShmCommunicator(&store, r, world, o);
      } else {
        tpserve::comm::GlooOptions o;
        o.prefix = "bench/";
        c = tpserve::comm::CreateGlooCommunicator(&store, r, world, o);
      }
      status[r] = c.status();
      if (c.ok()) comms[r] = *std::move(c);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return comms;
}

struct Latency {
  double p50_us = 0, p99_us = 0;
};

// Every rank runs `iterations` all-reduces (of int64 exact sums when `int64`) back to back;
// rank 0 times each one.
Latency Measure(std::vector<std::unique_ptr<Communicator>>& comms, int64_t count, int iterations,
                bool int64) {
  const int world = static_cast<int>(comms.size());
  std::vector<double> times;
  times.reserve(iterations);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> data(count, 1.0f);
      std::vector<int64_t> sums(count, 1);
      for (int i = 0; i < iterations + 50; ++i) {  // 50 warm-up rounds
        const auto start = std::chrono::steady_clock::now();
        const absl::Status status = int64 ? comms[r]->AllReduceSumInt64(sums.data(), count)
                                          : comms[r]->AllReduceSum(data.data(), count);
        if (!status.ok()) return;
        if (r == 0 && i >= 50) {
          times.push_back(
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                  .count());
        }
        std::fill(data.begin(), data.end(), 1.0f);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::sort(times.begin(), times.end());
  if (times.empty()) return {};
  return {times[times.size() / 2], times[times.size() * 99 / 100]};
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  nlohmann::json results = nlohmann::json::array();
  std::printf(
      "| ranks | values | sum | shm p50 (µs) | shm p99 | gloo p50 | gloo p99 | gloo/shm p50 |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int world : {2, 3}) {
    for (auto [count, int64] :
         {std::pair<int64_t, bool>{576, false}, {576, true}, {576 * 32, false}, {576 * 32, true}}) {
      Latency by_kind[2];
      for (int k = 0; k < 2; ++k) {
        const std::string kind = k == 0 ? "shm" : "gloo";
        auto comms = MakeWorld(kind, world);
        if (!comms.ok()) {
          std::fprintf(stderr, "%s world of %d: %s\n", kind.c_str(), world,
                       comms.status().ToString().c_str());
          return 1;
        }
        by_kind[k] = Measure(*comms, count, count > 576 ? iterations / 4 : iterations, int64);
        results.push_back({{"comm", kind},
                           {"ranks", world},
                           {"values", count},
                           {"sum", int64 ? "int64" : "f32"},
                           {"p50_us", by_kind[k].p50_us},
                           {"p99_us", by_kind[k].p99_us}});
      }
      std::printf("| %d | %lld | %s | %.1f | %.1f | %.1f | %.1f | %.1fx |\n", world,
                  static_cast<long long>(count), int64 ? "int64" : "f32", by_kind[0].p50_us,
                  by_kind[0].p99_us, by_kind[1].p50_us, by_kind[1].p99_us,
                  by_kind[1].p50_us / by_kind[0].p50_us);
    }
  }
  std::printf("%s\n", results.dump().c_str());
  return 0;
}
