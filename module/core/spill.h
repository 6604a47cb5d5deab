// Where output too long for a string waits for Emacs: a file the engine or
// the synchronous runner writes and Emacs reads by byte ranges
// (`insert-file-contents' through a name of the descriptor, and pread).
//
// Linux has memfds for this, anonymous files in memory
// (os/spill_memfd.cpp).  Elsewhere, and in a portable build, the file is an
// ordinary one in $TMPDIR (or /tmp), removed as soon as it is open
// (os/spill_file.cpp): it lives as long as its descriptors do, even when
// Emacs dies, and no name of it is left behind.  Either way the descriptor
// is close-on-exec, read-write, and its offset stays 0 for the module,
// which reads and writes it with pread and pwrite only.
//
// The memory of bytes Emacs has taken is given back by punching a hole in
// the file where the kernel can (fallocate, Linux); elsewhere it is given
// back when the file's last descriptor is closed.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include "core/platform.h"

namespace fastrevert {

enum class SpillMechanism { memfd, file };

// The mechanism open_spill() uses: a memfd where the system has them, else a
// file.  A test on Linux asks for the file with FASTREVERT_TEST_SPILL=file
// in the environment, read once.
SpillMechanism spill_mechanism() noexcept;

// A new empty file for output, read-write and close-on-exec, with NAME
// telling what it holds ("fastrevert-process"); -1 with errno set when it
// cannot be made.  Any thread.
int open_spill(const char* name) noexcept;

// The call whose failure open_spill() reports, for error messages.
const char* spill_call() noexcept;

// The mechanisms themselves.  open_memfd_spill exists where memfd_create
// does; open_file_spill everywhere.
#if FASTREVERT_HAVE_MEMFD_CREATE
int open_memfd_spill(const char* name) noexcept;
#endif
int open_file_spill(const char* name) noexcept;

// Whether give_back_spilled() gives memory back before the file is closed.
inline constexpr bool kSpillGivesBackMemory = FASTREVERT_HAVE_PUNCH_HOLE != 0;

// Gives back the memory of bytes [0, END) of the spill file FD.  The file
// keeps its size, so later offsets stay valid.  A failure (a file system
// without hole punching) only keeps the memory until the file is closed.
inline void give_back_spilled(int fd, off_t end) noexcept {
#if FASTREVERT_HAVE_PUNCH_HOLE
  fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, end);
#else
  (void)fd;
  (void)end;
#endif
}

}  // namespace fastrevert
