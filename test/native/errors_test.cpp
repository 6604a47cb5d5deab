// Tests of the errors core reports to Lisp: a system error's parts, the
// condition Emacs signals for an errno, and the errnos Lisp names.
#include "core/errors.h"

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "catch_compat.h"

using namespace fastrevert;

TEST_CASE("a system error keeps its errno, function and path", "[errors]") {
  errno = EACCES;
  try {
    throw_errno("open", "/some/file");
    FAIL("throw_errno did not throw");
  } catch (const SystemError& error) {
    CHECK(error.code().value() == EACCES);
    CHECK(error.function() == "open");
    CHECK(error.path() == "/some/file");
  }
}

TEST_CASE("an errno maps to the file error condition Emacs signals for it", "[errors]") {
  CHECK(std::string(file_error_condition(ENOENT)) == "file-missing");
  CHECK(std::string(file_error_condition(EACCES)) == "permission-denied");
  CHECK(std::string(file_error_condition(EEXIST)) == "file-already-exists");
  CHECK(std::string(file_error_condition(ENOEXEC)) == "file-error");
  CHECK(std::string(file_error_condition(0)) == "file-error");
}

TEST_CASE("the errnos Lisp names are found by name and no other is", "[errors]") {
  CHECK(file_errno_named("ENOENT") == std::optional<int>(ENOENT));
  CHECK(file_errno_named("EACCES") == std::optional<int>(EACCES));
  CHECK(file_errno_named("EISDIR") == std::optional<int>(EISDIR));
  CHECK(file_errno_named("ENOTDIR") == std::optional<int>(ENOTDIR));
  CHECK(file_errno_named("ENAMETOOLONG") == std::optional<int>(ENAMETOOLONG));
  CHECK_FALSE(file_errno_named("EPERM"));
  CHECK_FALSE(file_errno_named("enoent"));
  CHECK_FALSE(file_errno_named(""));
}
