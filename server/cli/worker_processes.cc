#include "server/cli/worker_processes.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace tpserve::cli {

absl::StatusOr<std::unique_ptr<WorkerProcesses>> WorkerProcesses::Start(
    const std::string& binary, int count, int metrics_port_base, absl::Duration timeout,
    std::vector<int> devices, std::vector<std::string> worker_args) {
  if (count < 1) return absl::InvalidArgumentError(absl::StrCat("--tp must be >= 1, got ", count));
  if (!devices.empty() && static_cast<int>(devices.size()) != count) {
    return absl::InvalidArgumentError(
        absl::StrCat("--devices lists ", devices.size(), " GPUs for --tp ", count, " workers"));
  }
  // The temporary directory comes from the environment (TMPDIR, TMP, TEMP or TEMPDIR); one
  // that does not exist is the user's to fix, said as such (the throwing overload aborted).
  std::error_code error;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path(error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("the temporary directory for the workers' files (from TMPDIR, TMP, TEMP or "
                     "TEMPDIR, else /tmp) is unusable: ",
                     error.message()));
  }
  std::string pattern = (tmp / "tpserve-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", pattern, ": ", strerror(errno)));
  }
  std::unique_ptr<WorkerProcesses> w(new WorkerProcesses(
      binary, pattern, metrics_port_base, std::move(devices), std::move(worker_args)));
  for (int rank = 0; rank < count; ++rank) {
    absl::StatusOr<pid_t> pid = w->Spawn(rank, 0);
    if (!pid.ok()) return pid.status();  // the destructor stops the others
    absl::MutexLock lock(&w->mu_);
    w->children_.push_back({*pid, 0, 0});
  }
  // Each worker writes its port once it listens.
  const absl::Time deadline = absl::Now() + timeout;
  for (int rank = 0; rank < count; ++rank) {
    while (true) {
      std::ifstream in(w->PortFile(rank));
      std::string text;
      int port = 0;
      if (in >> text && absl::SimpleAtoi(text, &port) && port > 0) {
        absl::MutexLock lock(&w->mu_);
        w->children_[rank].port = port;
        break;
      }
      pid_t pid = 0;
      {
        absl::MutexLock lock(&w->mu_);
        pid = w->children_[rank].pid;
      }
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        absl::MutexLock lock(&w->mu_);
        w->children_[rank].pid = -1;
        return absl::InternalError(
            absl::StrCat("worker rank ", rank, " exited during start-up (status ", status, ")"));
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "worker rank ", rank, " did not listen within ", absl::FormatDuration(timeout)));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  w->monitor_ = std::thread([p = w.get()] { p->Monitor(); });
  return w;
}

WorkerProcesses::~WorkerProcesses() {
  Stop();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string WorkerProcesses::PortFile(int rank) const {
  return absl::StrCat(dir_, "/rank", rank, ".port");
}

absl::StatusOr<pid_t> WorkerProcesses::Spawn(int rank, int port) const {
  std::error_code ignored;
  std::filesystem::remove(PortFile(rank), ignored);
  // Everything the child needs is built before fork: after it only async-signal-safe calls.
  std::vector<std::string> args = {binary_, "worker", absl::StrCat("--listen=127.0.0.1:", port),
                                   absl::StrCat("--port_file=", PortFile(rank))};
  if (metrics_port_base_ > 0) {
    args.push_back(absl::StrCat("--metrics_port=", metrics_port_base_ + 1 + rank));
  }
  if (!devices_.empty()) {
    args.push_back(absl::StrCat("--device=", devices_[rank]));
  }
  args.insert(args.end(), worker_args_.begin(), worker_args_.end());
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);  // the parent died before prctl
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  LOG(INFO) << "worker rank " << rank << ": pid " << pid;
  return pid;
}

void WorkerProcesses::Monitor() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(200))) return;
    }
    absl::MutexLock lock(&mu_);
    for (size_t rank = 0; rank < children_.size(); ++rank) {
      Child& c = children_[rank];
      int status = 0;
      if (c.pid <= 0 || waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      LOG(ERROR) << "worker rank " << rank << " (pid " << c.pid << ") died, status " << status
                 << "; restarting it on port " << c.port;
      c.pid = -1;
      absl::StatusOr<pid_t> pid = Spawn(static_cast<int>(rank), c.port);
      if (pid.ok()) {
        c.pid = *pid;
        ++c.restarts;
      } else {
        LOG(ERROR) << "restarting worker rank " << rank << ": " << pid.status();
      }
    }
  }
}

void WorkerProcesses::Kill(int rank) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || rank < 0 || static_cast<size_t>(rank) >= children_.size()) return;
  const pid_t pid = children_[static_cast<size_t>(rank)].pid;
  if (pid <= 0) return;
  LOG(WARNING) << "killing worker rank " << rank << " (pid " << pid << "): found hung";
  kill(pid, SIGKILL);
}

std::vector<std::string> WorkerProcesses::addresses() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  out.reserve(children_.size());
  for (const Child& c : children_) out.push_back(absl::StrCat("127.0.0.1:", c.port));
  return out;
}

void WorkerProcesses::Stop(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (monitor_.joinable()) monitor_.join();
  absl::MutexLock lock(&mu_);
  for (const Child& c : children_) {
    if (c.pid > 0) kill(c.pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + grace;
  for (Child& c : children_) {
    if (c.pid <= 0) continue;
    int status = 0;
    while (waitpid(c.pid, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        LOG(WARNING) << "worker pid " << c.pid << " ignored SIGTERM; killing it";
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    c.pid = -1;
  }
}

}  // namespace tpserve::cli
