// Prints a seeded stream (seeded_stream.h) at a pace the caller chooses, for
// the tests of what a quit keeps of a child's output.
//
//   fastrevert-test-writer dump SEED LENGTH
//       prints the stream of SEED and exits.
//   fastrevert-test-writer chunks SEED LENGTH SIZE PAUSE_US
//       prints it in writes of SIZE bytes, PAUSE_US microseconds apart, as
//       a build log or a search streams, and exits.
//   fastrevert-test-writer write SEED LENGTH PACE QUIT_AT MARKER [close]
//       prints it at PACE (flood, trickle, stall or mixed, seeded too),
//       creates the file MARKER, holding its pid, once QUIT_AT bytes are
//       written (a test quits then), closes its output with `close' (past
//       the end, QUIT_AT then marks after the close), and then lingers
//       until it is killed, or two minutes have passed.
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "seeded_stream.h"

namespace {

using fastrevert::test::SeededRandom;

enum class Pace { flood, trickle, stall };

void sleep_us(std::uint64_t microseconds) {
  timespec wait = {static_cast<time_t>(microseconds / 1000000),
                   static_cast<long>(microseconds % 1000000) * 1000};
  while (nanosleep(&wait, &wait) != 0 && errno == EINTR) {
  }
}

bool write_all(const char* bytes, std::size_t size) {
  while (size > 0) {
    ssize_t written = write(STDOUT_FILENO, bytes, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes += written;
    size -= static_cast<std::size_t>(written);
  }
  return true;
}

int usage() {
  std::fprintf(stderr,
               "usage: fastrevert-test-writer dump SEED LENGTH\n"
               "       fastrevert-test-writer chunks SEED LENGTH SIZE PAUSE_US\n"
               "       fastrevert-test-writer write SEED LENGTH PACE QUIT_AT MARKER [close]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return usage();
  std::string command = argv[1];
  std::uint64_t seed = std::strtoull(argv[2], nullptr, 10);
  std::size_t length = std::strtoull(argv[3], nullptr, 10);
  std::string bytes = fastrevert::test::seeded_stream(seed, length).bytes;
  if (command == "dump") return write_all(bytes.data(), bytes.size()) ? 0 : 1;
  if (command == "chunks") {
    if (argc < 6) return usage();
    std::size_t size = std::max<std::size_t>(1, std::strtoull(argv[4], nullptr, 10));
    std::uint64_t pause_us = std::strtoull(argv[5], nullptr, 10);
    for (std::size_t offset = 0; offset < bytes.size(); offset += size) {
      if (!write_all(bytes.data() + offset, std::min(size, bytes.size() - offset))) return 1;
      if (pause_us > 0) sleep_us(pause_us);
    }
    return 0;
  }
  if (command != "write" || argc < 7) return usage();
  std::string pace_name = argv[4];
  std::uint64_t quit_at = std::strtoull(argv[5], nullptr, 10);
  const char* marker = argv[6];
  bool close_output = argc > 7 && std::strcmp(argv[7], "close") == 0;
  bool mixed = pace_name == "mixed";
  Pace pace = pace_name == "trickle" ? Pace::trickle
              : pace_name == "stall" ? Pace::stall
                                     : Pace::flood;

  SeededRandom random(seed * 31 + 7);
  bool marked = false;
  // The marker holds this process's pid, and appears whole: it is written
  // under another name first.
  auto mark = [&] {
    std::string temporary = std::string(marker) + ".new";
    std::string pid = std::to_string(getpid());
    int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ssize_t written = write(fd, pid.data(), pid.size());
      close(fd);
      if (written == static_cast<ssize_t>(pid.size())) rename(temporary.c_str(), marker);
    }
    marked = true;
  };
  std::size_t offset = 0;
  std::size_t segment_end = 0;
  if (quit_at == 0) mark();
  while (offset < bytes.size()) {
    if (mixed && offset >= segment_end) {
      pace = static_cast<Pace>(random.between(0, 2));
      segment_end = offset + random.sized(4096, 512 * 1024);
    }
    std::size_t piece = 65536;
    std::uint64_t pause_us = 0;
    switch (pace) {
      case Pace::flood:
        break;
      case Pace::trickle:
        piece = random.between(1, 4096);
        pause_us = random.between(0, 200);
        break;
      case Pace::stall:
        piece = random.between(1, 32768);
        if (random.between(0, 7) == 0) pause_us = random.between(2000, 20000);
        break;
    }
    piece = std::min(piece, bytes.size() - offset);
    // The marker comes right after the byte it names is written.
    if (!marked && offset + piece > quit_at) piece = quit_at - offset;
    if (!write_all(bytes.data() + offset, piece)) return 1;
    offset += piece;
    if (!marked && offset >= quit_at) mark();
    if (pause_us > 0) sleep_us(pause_us);
  }
  if (close_output) close(STDOUT_FILENO);
  if (!marked) mark();
  sleep_us(120 * 1000000ull);
  return 0;
}
