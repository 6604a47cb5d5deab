// Errors raised by the engine.  The glue turns a SystemError into the Lisp
// signal `fastrevert-system-error' with data (FUNCTION STRERROR PATH).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace fastrevert {

class SystemError : public std::system_error {
 public:
  // FUNCTION names the system call or operation that failed; PATH is the file
  // it was applied to, or empty when there is none.
  SystemError(int error, std::string function, std::string path = {});

  const std::string& function() const noexcept { return function_; }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string function_;
  std::string path_;
};

// Throws a SystemError for the current errno.
[[noreturn]] void throw_errno(const char* function, std::string path = {});

// The symbolic name of the errno ERROR ("ENOSPC"), for notices that tell the
// user which limit was reached; "errno N" for a number without one.
std::string errno_name(int error);

// The name of ERROR in the module's own table of POSIX's errnos, or null
// for one not in it: what errno_name() says where the C library has no
// strerrorname_np (before glibc 2.32, musl, macOS, the BSDs, a portable
// build).
const char* errno_table_name(int error) noexcept;

// The error condition Emacs's report_file_errno signals for ERROR: ENOENT is
// `file-missing', EACCES `permission-denied', EEXIST `file-already-exists',
// and any other errno `file-error'.
const char* file_error_condition(int error) noexcept;

// The errno named NAME, for the errors Emacs reports about a program or a
// directory ("ENOENT", "EACCES", "EISDIR", "ENOTDIR", "ENAMETOOLONG"), or
// std::nullopt for any other name.
std::optional<int> file_errno_named(std::string_view name) noexcept;

}  // namespace fastrevert
