#include "core/named_pipes.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "core/errors.h"

namespace fastrevert {

namespace {

UniqueFd open_pipe(const std::string& path, int flags) {
  int fd;
  do {
    fd = open(path.c_str(), flags | O_NONBLOCK | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_errno("open", path);
  return UniqueFd(fd);
}

void make_pipe(const std::string& path) {
  if (mkfifo(path.c_str(), 0600) < 0) throw_errno("mkfifo", path);
}

}  // namespace

NamedPipes open_named_pipes(const std::string& directory) {
  const std::string in = directory + "/in";
  const std::string out = directory + "/out";
  make_pipe(in);
  make_pipe(out);
  NamedPipes pipes;
  // The read end first: a non-blocking open for writing fails with ENXIO
  // while the pipe has no reader.
  pipes.output = open_pipe(out, O_RDONLY);
  pipes.output_keeper = open_pipe(out, O_WRONLY);
  pipes.input = open_pipe(in, O_RDWR);
  return pipes;
}

}  // namespace fastrevert
