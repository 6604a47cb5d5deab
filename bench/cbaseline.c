/* cbaseline: the floor for running many small processes.
 *
 * Runs PROGRAM with ARGS COUNT times, one after another, the way a
 * synchronous caller must: posix_spawn with standard output on a pipe,
 * read the pipe to end of file, waitpid.  Nothing else happens, so the
 * elapsed time is what the kernel and the C library charge for a
 * spawn, a read loop and a reap.  fastrevert's process benchmarks
 * divide by it.
 *
 * Usage: cbaseline COUNT PROGRAM [ARGS...]
 * PROGRAM is searched in PATH.  Prints one line:
 *   ELAPSED-SECONDS TOTAL-BYTES-READ RUNS-WITHOUT-OUTPUT
 *
 * Build: cc -O2 -Wall -Wextra -o cbaseline bench/cbaseline.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s COUNT PROGRAM [ARGS...]\n", argv[0]);
    return 2;
  }
  long count = strtol(argv[1], NULL, 10);
  char buffer[65536];
  long long total = 0;
  long empty_runs = 0;
  double start = now_seconds();
  for (long i = 0; i < count; i++) {
    int ends[2];
    if (pipe2(ends, O_CLOEXEC) < 0) {
      perror("pipe2");
      return 1;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, ends[1], 1);
    pid_t pid;
    int error = posix_spawnp(&pid, argv[2], &actions, NULL, argv + 2, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(ends[1]);
    if (error) {
      fprintf(stderr, "posix_spawnp %s: %s\n", argv[2], strerror(error));
      return 1;
    }
    long long run_bytes = 0;
    for (;;) {
      ssize_t got = read(ends[0], buffer, sizeof buffer);
      if (got > 0) {
        run_bytes += got;
      } else if (got == 0 || errno != EINTR) {
        break;
      }
    }
    close(ends[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    total += run_bytes;
    if (run_bytes == 0) empty_runs++;
  }
  printf("%.6f %lld %ld\n", now_seconds() - start, total, empty_runs);
  return 0;
}
