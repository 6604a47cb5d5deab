#include "core/errors.h"

#include <cerrno>
#include <utility>

namespace fastrevert {

SystemError::SystemError(int error, std::string function, std::string path)
    : std::system_error(error, std::generic_category(), function),
      function_(std::move(function)),
      path_(std::move(path)) {}

void throw_errno(const char* function, std::string path) {
  throw SystemError(errno, function, std::move(path));
}

const char* file_error_condition(int error) noexcept {
  switch (error) {
    case ENOENT:
      return "file-missing";
    case EACCES:
      return "permission-denied";
    case EEXIST:
      return "file-already-exists";
    default:
      return "file-error";
  }
}

std::optional<int> file_errno_named(std::string_view name) noexcept {
  static const std::pair<std::string_view, int> kErrnos[] = {{"ENOENT", ENOENT},
                                                             {"EACCES", EACCES},
                                                             {"EISDIR", EISDIR},
                                                             {"ENOTDIR", ENOTDIR},
                                                             {"ENAMETOOLONG", ENAMETOOLONG}};
  for (const auto& [known, number] : kErrnos) {
    if (name == known) return number;
  }
  return std::nullopt;
}

}  // namespace fastrevert
