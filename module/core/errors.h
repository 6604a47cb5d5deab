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

// The error condition Emacs's report_file_errno signals for ERROR: ENOENT is
// `file-missing', EACCES `permission-denied', EEXIST `file-already-exists',
// and any other errno `file-error'.
const char* file_error_condition(int error) noexcept;

// The errno named NAME, for the errors Emacs reports about a program or a
// directory ("ENOENT", "EACCES", "EISDIR", "ENOTDIR", "ENAMETOOLONG"), or
// std::nullopt for any other name.
std::optional<int> file_errno_named(std::string_view name) noexcept;

}  // namespace fastrevert
