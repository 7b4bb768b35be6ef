// POSIX calls rather than streams: iostreams hide errno, and the message for a failed
// checkpoint must say why (disk full, file too large) and which step failed.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.h"

namespace dpt::io {
namespace {

std::string reason(int error) {
  return std::string(std::strerror(error)) + " (errno " + std::to_string(error) + ")";
}

// Closes the descriptor on every path out of a function.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Writes all of `data`, retrying short writes and interrupted calls; returns 0 or errno.
int write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

void fsync_directory(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  DPT_CHECK(fd.get() >= 0) << dir << ": cannot open the directory to sync the rename of " << path << ": "
                           << reason(errno);
  DPT_CHECK(::fsync(fd.get()) == 0) << dir << ": cannot sync the directory after renaming " << path << ": "
                                    << reason(errno);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  const std::string tmp = path + ".tmp";
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  DPT_CHECK(fd.get() >= 0) << tmp << ": cannot create: " << reason(errno);
  auto fail = [&](const char* what, int error) {
    ::close(fd.release());
    ::unlink(tmp.c_str());
    DPT_FAIL() << tmp << ": cannot " << what << ": " << reason(error) << "; " << path << " is unchanged";
  };
  for (std::string_view piece : pieces)
    if (int error = write_all(fd.get(), piece)) fail("write", error);
  if (::fsync(fd.get()) != 0) fail("sync to disk", errno);
  // close() can report a deferred write error (NFS): it counts as a failed write.
  if (::close(fd.get()) != 0) fail("close", errno);
  fd.release();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int error = errno;
    ::unlink(tmp.c_str());
    DPT_FAIL() << path << ": cannot rename " << tmp << " into place: " << reason(error);
  }
  fsync_directory(path);
}

void append_line(const std::string& path, const std::string& line) {
  std::string text;
  if (::access(path.c_str(), F_OK) == 0) text = read_file(path);
  write_file_atomic(path, {text, line, "\n"});
}

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    DPT_FAIL() << path << ": cannot remove: " << reason(errno);
}

std::string read_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  DPT_CHECK(fd.get() >= 0) << path << ": cannot open: " << reason(errno);
  struct stat st {};
  DPT_CHECK(::fstat(fd.get(), &st) == 0) << path << ": cannot stat: " << reason(errno);
  DPT_CHECK(S_ISREG(st.st_mode)) << path << ": not a regular file";
  // The size comes from the file system, not from the file's content.
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    DPT_CHECK(n >= 0) << path << ": cannot read: " << reason(errno);
    if (n == 0) break;  // shrank while reading
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

}  // namespace dpt::io
