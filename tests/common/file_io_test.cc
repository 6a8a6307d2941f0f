#include "tessera/file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tessera {
namespace {

namespace fs = std::filesystem;

class FileIo : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tessera-file-io-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  static void write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // Names in the folder other than `except`.
  std::vector<std::string> others(const std::string& except) const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_))
      if (entry.path().filename() != except) names.push_back(entry.path().filename().string());
    return names;
  }
  std::string dir_;
};

// The exit status of `child` (a forked process), or -1 if it was killed.
int wait_exit(pid_t child) {
  int status = 0;
  if (waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(FileIo, ReadsASmallFileWholeAndNulTerminated) {
  write(path("pid"), "4242\n");
  char buffer[32];
  std::memset(buffer, 'x', sizeof buffer);
  const ReadResult got = read_small_file(path("pid").c_str(), buffer, sizeof buffer);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.length, 5u);
  EXPECT_FALSE(got.truncated);
  EXPECT_STREQ(buffer, "4242\n");
}

TEST_F(FileIo, ReadIsBoundedAndSaysWhenItTruncated) {
  write(path("big"), std::string(100, 'a'));
  char buffer[11];
  const ReadResult got = read_small_file(path("big").c_str(), buffer, sizeof buffer);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.length, 10u);
  EXPECT_TRUE(got.truncated);
  EXPECT_STREQ(buffer, "aaaaaaaaaa");
  // Exactly full is not truncated.
  write(path("ten"), std::string(10, 'b'));
  const ReadResult exact = read_small_file(path("ten").c_str(), buffer, sizeof buffer);
  EXPECT_EQ(exact.length, 10u);
  EXPECT_FALSE(exact.truncated);
}

TEST_F(FileIo, ReadsProcFiles) {
  char buffer[1024];
  const ReadResult got = read_small_file("/proc/self/stat", buffer, sizeof buffer);
  ASSERT_TRUE(got.ok()) << std::strerror(got.error);
  EXPECT_GT(got.length, 0u);
  EXPECT_EQ(std::atoi(buffer), getpid());
}

TEST_F(FileIo, MissingFileIsEnoent) {
  char buffer[8];
  EXPECT_EQ(read_small_file(path("absent").c_str(), buffer, sizeof buffer).error, ENOENT);
  EXPECT_STREQ(buffer, "");
  EXPECT_EQ(read_small_file(path("absent").c_str(), buffer, 0).error, EINVAL);
}

TEST_F(FileIo, UntrustedReadRefusesASymlinkTrustedFollowsIt) {
  write(path("host-secret"), "secret");
  fs::create_symlink(path("host-secret"), path("pid"));
  char buffer[32];
  const ReadResult untrusted =
      read_small_file(path("pid").c_str(), buffer, sizeof buffer, FileSource::kUntrusted);
  EXPECT_EQ(untrusted.error, ELOOP);
  EXPECT_STREQ(buffer, "");
  const ReadResult trusted =
      read_small_file(path("pid").c_str(), buffer, sizeof buffer, FileSource::kTrusted);
  ASSERT_TRUE(trusted.ok());
  EXPECT_STREQ(buffer, "secret");
}

TEST_F(FileIo, AFifoDoesNotBlockTheReader) {
  ASSERT_EQ(mkfifo(path("pid").c_str(), 0666), 0);
  // In a child with an alarm: a reader that blocked on the FIFO (no writer ever comes) is killed.
  const pid_t child = fork();
  if (child == 0) {
    alarm(5);
    char buffer[32];
    const ReadResult got = read_small_file(path("pid").c_str(), buffer, sizeof buffer);
    UniqueFd fd;
    const int opened = open_file(path("pid").c_str(), O_RDWR, FileSource::kUntrusted, fd);
    _exit(got.error == EINVAL && opened == EINVAL && !fd ? 0 : 1);
  }
  EXPECT_EQ(wait_exit(child), 0);
}

TEST_F(FileIo, UntrustedOpenChecksTheSize) {
  write(path("page"), std::string(100, '\0'));
  UniqueFd fd;
  EXPECT_EQ(open_file(path("page").c_str(), O_RDONLY, FileSource::kUntrusted, fd, 101), ENODATA);
  EXPECT_FALSE(fd);
  ASSERT_EQ(open_file(path("page").c_str(), O_RDWR, FileSource::kUntrusted, fd, 100), 0);
  ASSERT_TRUE(fd);
  EXPECT_EQ(fcntl(fd.get(), F_GETFL) & O_NONBLOCK, 0);
  EXPECT_NE(fcntl(fd.get(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_EQ(open_file(dir_.c_str(), O_RDONLY, FileSource::kUntrusted, fd), EINVAL);  // a folder
}

void count_signal(int) {}

TEST_F(FileIo, ReadRetriesWhenASignalInterruptsIt) {
  // A handler without SA_RESTART makes a blocked read fail with EINTR.
  struct sigaction action {};
  struct sigaction previous {};
  action.sa_handler = count_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  ASSERT_EQ(sigaction(SIGUSR1, &action, &previous), 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(pipe_fds[1]);
  const pthread_t reader_thread = pthread_self();
  std::thread writer([&] {
    ASSERT_EQ(::write(write_end.get(), "abc", 3), 3);
    for (int i = 0; i < 5; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      pthread_kill(reader_thread, SIGUSR1);  // while the reader waits for the rest
    }
    ASSERT_EQ(::write(write_end.get(), "def", 3), 3);
    write_end.reset();
  });
  char buffer[16] = {};
  const ReadResult got = read_fd(read_end.get(), buffer, sizeof buffer);
  writer.join();
  sigaction(SIGUSR1, &previous, nullptr);
  ASSERT_TRUE(got.ok()) << std::strerror(got.error);
  EXPECT_EQ(std::string(buffer, got.length), "abcdef");
}

TEST_F(FileIo, AtomicWriteCreatesAndReplacesWithExactlyTheMode) {
  const mode_t old_umask = umask(077);
  ASSERT_EQ(write_file_atomically(path("spec.json").c_str(), "first", 0644), 0);
  EXPECT_EQ(read(path("spec.json")), "first");
  struct stat info {};
  ASSERT_EQ(stat(path("spec.json").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0644u);  // whatever the umask
  ASSERT_EQ(write_file_atomically(path("spec.json").c_str(), "second", 0600), 0);
  umask(old_umask);
  EXPECT_EQ(read(path("spec.json")), "second");
  ASSERT_EQ(stat(path("spec.json").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0600u);
  EXPECT_TRUE(others("spec.json").empty());  // no temporary file left behind
  ASSERT_EQ(write_file_atomically(path("empty").c_str(), "", 0644), 0);
  EXPECT_EQ(fs::file_size(path("empty")), 0u);
}

TEST_F(FileIo, AtomicWriteReplacesASymlinkInsteadOfWritingThroughIt) {
  write(path("host-file"), "host data");
  fs::create_symlink(path("host-file"), path("checkpoint.json"));
  ASSERT_EQ(write_file_atomically(path("checkpoint.json").c_str(), "mine", 0600), 0);
  EXPECT_EQ(read(path("host-file")), "host data");
  EXPECT_FALSE(fs::is_symlink(path("checkpoint.json")));
  EXPECT_EQ(read(path("checkpoint.json")), "mine");
}

TEST_F(FileIo, AFailedAtomicWriteLeavesTheOldContent) {
  write(path("checkpoint.json"), "old content");
  // A file size limit makes the write itself fail (EFBIG) half way, even for root.
  const pid_t child = fork();
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(2);
    const int error =
        write_file_atomically(path("checkpoint.json").c_str(), std::string(1 << 20, 'n'), 0644);
    _exit(error == EFBIG ? 0 : 1);
  }
  EXPECT_EQ(wait_exit(child), 0);
  EXPECT_EQ(read(path("checkpoint.json")), "old content");
  EXPECT_TRUE(others("checkpoint.json").empty()) << "the temporary file is removed";
  // A folder that does not exist: nothing is written anywhere.
  EXPECT_EQ(write_file_atomically(path("missing/file").c_str(), "x", 0644), ENOENT);
  EXPECT_EQ(write_file_atomically((dir_ + "/").c_str(), "x", 0644), EISDIR);
}

TEST_F(FileIo, ConcurrentAtomicWritersLeaveOneWholeVersion) {
  std::vector<std::string> versions;
  for (int i = 0; i < 4; ++i)
    versions.push_back(std::string(64 * 1024, static_cast<char>('a' + i)));
  std::atomic<int> failures{0};
  std::vector<std::thread> writers;
  for (int i = 0; i < 4; ++i) {
    writers.emplace_back([&, i] {
      for (int round = 0; round < 20; ++round)
        if (write_file_atomically(path("spec.json").c_str(), versions[i], 0644) != 0) ++failures;
    });
  }
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    while (!done) {
      const std::string seen = read(path("spec.json"));
      if (seen.empty()) continue;  // not written yet
      if (seen.size() != versions[0].size() || seen.find_first_not_of(seen[0]) != std::string::npos)
        ++torn;
    }
  });
  for (auto& writer : writers) writer.join();
  done = true;
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(torn.load(), 0);
  const std::string final_text = read(path("spec.json"));
  EXPECT_NE(std::find(versions.begin(), versions.end(), final_text), versions.end());
  EXPECT_TRUE(others("spec.json").empty());
}

}  // namespace
}  // namespace tessera
