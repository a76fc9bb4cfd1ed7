// WorkerProcesses: the local worker children of `tpserve serve`. Spawns `tpserve worker`
// once per rank on a free loopback port, ties each child's life to this process
// (PR_SET_PDEATHSIG), restarts a child that dies on the same port (the coordinator's world
// then recovers), kills one found hung so that it is restarted, and stops them all, bounded.
// Thread-safe.
#ifndef TPSERVE_SERVER_CLI_WORKER_PROCESSES_H_
#define TPSERVE_SERVER_CLI_WORKER_PROCESSES_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tpserve::cli {

class WorkerProcesses {
 public:
  // Starts `count` children of `binary` (this program) and waits, bounded by `timeout`, for
  // each to report its port. Call with SIGINT/SIGTERM blocked (children unblock them).
  // With `metrics_port_base` > 0, rank r serves its metrics on metrics_port_base + 1 + r.
  // `devices` empty: CPU workers; otherwise rank r computes on GPU devices[r] (count entries).
  // `worker_args` are given to every worker (cluster credentials, --model_root).
  static absl::StatusOr<std::unique_ptr<WorkerProcesses>> Start(
      const std::string& binary, int count, int metrics_port_base, absl::Duration timeout,
      std::vector<int> devices = {}, std::vector<std::string> worker_args = {});
  ~WorkerProcesses();  // Stop()

  // "127.0.0.1:port" of each rank.
  std::vector<std::string> addresses() const;
  // SIGKILLs rank `rank`'s child (one found hung); the monitor restarts it.
  void Kill(int rank) ABSL_LOCKS_EXCLUDED(mu_);
  // SIGTERM, then SIGKILL past `grace`; reaps every child. Idempotent.
  void Stop(absl::Duration grace = absl::Seconds(10)) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Child {
    pid_t pid = -1;
    int port = 0;
    int restarts = 0;
  };
  WorkerProcesses(std::string binary, std::string dir, int metrics_port_base,
                  std::vector<int> devices, std::vector<std::string> worker_args)
      : binary_(std::move(binary)),
        dir_(std::move(dir)),
        metrics_port_base_(metrics_port_base),
        devices_(std::move(devices)),
        worker_args_(std::move(worker_args)) {}

  // Forks and execs rank `rank`'s worker on `port` (0: any; reported in its port file).
  absl::StatusOr<pid_t> Spawn(int rank, int port) const;
  std::string PortFile(int rank) const;
  void Monitor() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string binary_;
  const std::string dir_;  // private temporary directory for the port files
  const int metrics_port_base_;
  const std::vector<int> devices_;              // [count] GPU of each rank, or empty: CPU workers
  const std::vector<std::string> worker_args_;  // flags every worker gets
  mutable absl::Mutex mu_;
  std::vector<Child> children_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread monitor_;
};

}  // namespace tpserve::cli

#endif  // TPSERVE_SERVER_CLI_WORKER_PROCESSES_H_
