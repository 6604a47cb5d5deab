#include "core/handed_fds.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/process_table.h"
#include "core/spill.h"

namespace fastrevert {

namespace {

// The memfd RECORD hands over, or -1.
int memfd_of(const Record& record) noexcept {
  if (record.kind != RecordKind::process_output ||
      record.code != static_cast<int>(OutputCode::stdout_memfd)) {
    return -1;
  }
  return std::atoi(record.data.c_str());
}

}  // namespace

void HandedFds::note_delivery(const Record& record) {
  int fd = memfd_of(record);
  if (fd >= 0) add(fd);
}

void HandedFds::discard(const std::deque<Record>& records) noexcept {
  for (const Record& record : records) {
    int fd = memfd_of(record);
    if (fd >= 0) ::close(fd);
  }
}

void HandedFds::release(int fd, off_t length, bool close, Engine* engine) {
  // From here on the number is no longer Lisp's: a second release or close
  // of it is refused, even before the engine has closed it.
  if (close) remove(fd);
  auto release_now = [fd, length, close] {
    if (length > 0) give_back_spilled(fd, length);
    if (close) ::close(fd);
  };
  // Freeing a few pages costs less than waking the engine for it.
  constexpr blkcnt_t kInlineBlocks = (256 * 1024) / 512;
  struct stat status;
  bool small = fstat(fd, &status) == 0 && status.st_blocks <= kInlineBlocks;
  if (engine && !(small && releases_posted_->load(std::memory_order_acquire) == 0)) {
    releases_posted_->fetch_add(1, std::memory_order_acq_rel);
    if (engine->post([release_now, posted = releases_posted_](Engine&) {
          release_now();
          posted->fetch_sub(1, std::memory_order_acq_rel);
        })) {
      return;
    }
    releases_posted_->fetch_sub(1, std::memory_order_acq_rel);
  }
  release_now();
}

}  // namespace fastrevert
