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

}  // namespace fastrevert
