// A whole mpirun job run from a test, for tests of how jobs end: started in the background
// with its output in files, its ranks' process ids found by rank (so a test can stop, kill or
// crash one), and waited for with a limit, after which it is killed and reported as such.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace dpt::testing {

struct JobResult {
  bool finished = false;  // false: still running at the limit, then killed
  int exit_code = -1;     // the exit status, or 128 + the signal that ended it
  double seconds = 0;     // from the start, or from the fault a test caused (MpiJob::mark)
  std::string out, err;
  // The first line of stderr ("" if none).
  std::string first_err_line() const { return err.substr(0, err.find('\n')); }
};

// For failure messages: how the job ended and what it printed.
inline std::ostream& operator<<(std::ostream& os, const JobResult& r) {
  return os << "job " << (r.finished ? "exited with " + std::to_string(r.exit_code) : std::string("killed"))
            << "; stdout:\n"
            << r.out << "\nstderr:\n"
            << r.err;
}

class MpiJob {
 public:
  // Runs `command` with /bin/sh in a process group of its own, stdout and stderr into
  // `dir`/out and `dir`/err, and DPT_TEST_JOB set so that its ranks can be told from others.
  MpiJob(const std::string& command, const std::filesystem::path& dir)
      : out_(dir / "job_out"),
        err_(dir / "job_err"),
        id_(std::to_string(::getpid()) + "_" + std::to_string(next_id()++)) {
    mark_ = std::chrono::steady_clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      const std::string line =
          "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 DPT_TEST_JOB=" + id_ + "; exec " +
          command + " >" + out_.string() + " 2>" + err_.string();
      ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~MpiJob() { stop(); }
  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;

  // The process id of MPI_COMM_WORLD rank `rank` of this job, once it runs; -1 after `limit`.
  pid_t rank_pid(int rank, std::chrono::milliseconds limit) const {
    const std::string job = "DPT_TEST_JOB=" + id_, rank_var = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
    const auto until = std::chrono::steady_clock::now() + limit;
    do {
      for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::ifstream in(entry.path() / "environ");
        std::string var;
        bool mine = false, ranked = false;
        while (std::getline(in, var, '\0')) {
          mine = mine || var == job;
          ranked = ranked || var == rank_var;
        }
        if (mine && ranked) return static_cast<pid_t>(std::stol(name));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (std::chrono::steady_clock::now() < until);
    return -1;
  }

  // Waits until stdout contains `text`; false after `limit` or when the job ended without it.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (exited()) return read(out_).find(text) != std::string::npos;  // all it ever wrote is there
      if (read(out_).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Sends `signal` to the job's process group (as a terminal's Ctrl-C or `timeout` does).
  void signal_group(int signal) const { ::kill(-pid_, signal); }

  // From now on JobResult::seconds counts from here (call it when causing the fault).
  void mark() { mark_ = std::chrono::steady_clock::now(); }

  // Waits for the job to end, at most `limit`; stops it after that (finished false).
  JobResult finish(std::chrono::milliseconds limit) {
    JobResult r;
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!exited() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    r.finished = reaped_;
    stop();
    r.seconds = std::chrono::duration<double>(end_ - mark_).count();
    if (!r.finished)
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - mark_).count();
    r.exit_code = WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
    r.out = read(out_);
    r.err = read(err_);
    return r;
  }

 private:
  static int& next_id() {
    static int id = 0;
    return id;
  }
  static std::string read(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Ends a job still running: SIGTERM first, so that a launcher can clean up after itself
  // (tools/cluster.sh waits up to 10 s for train's checkpoint, then removes its namespaces),
  // SIGKILL after 20 s.
  void stop() {
    if (pid_ <= 0 || reaped_) return;
    ::kill(-pid_, SIGTERM);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!exited() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (reaped_) return;
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
    reaped_ = true;
  }
  bool exited() {
    if (reaped_) return true;
    if (::waitpid(pid_, &status_, WNOHANG) != pid_) return false;
    reaped_ = true;
    end_ = std::chrono::steady_clock::now();
    return true;
  }

  std::filesystem::path out_, err_;
  std::string id_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
  std::chrono::steady_clock::time_point mark_, end_;
};

}  // namespace dpt::testing
