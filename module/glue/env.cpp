#include "glue/env.h"

#include <array>
#include <cstring>
#include <exception>
#include <new>
#include <optional>

#include "core/duration.h"
#include "core/errors.h"

namespace fastrevert::glue {

std::string Env::to_bytes(emacs_value value) const {
  if (!is_string(value)) wrong_type("stringp", value);
  std::ptrdiff_t size = 0;
  raw_->copy_string_contents(raw_, value, nullptr, &size);
  check();
  std::string text(static_cast<std::size_t>(size), '\0');
  raw_->copy_string_contents(raw_, value, text.data(), &size);
  check();
  // SIZE counts the terminating NUL that Emacs writes.
  text.resize(static_cast<std::size_t>(size) - 1);
  return text;
}

std::chrono::nanoseconds Env::to_duration(emacs_value seconds) const {
  // `float' signals `wrong-type-argument' for a non-number, and turns a
  // bignum into a float that seconds_to_duration caps.
  double value = raw_->extract_float(raw_, call("float", {seconds}));
  check();
  std::optional<std::chrono::nanoseconds> duration = seconds_to_duration(value);
  if (!duration) signal("args-out-of-range", list({seconds}));
  return *duration;
}

namespace {

// Raises SYMBOL with DATA built from MESSAGE.  Runs only while no exit is
// pending; if building the data itself fails, that failure stays pending.
void signal_message(emacs_env* raw, const char* symbol, const std::string& message) {
  emacs_value text =
      raw->make_string(raw, message.data(), static_cast<std::ptrdiff_t>(message.size()));
  emacs_value data = raw->funcall(raw, raw->intern(raw, "list"), 1, &text);
  if (raw->non_local_exit_check(raw) != emacs_funcall_exit_return) return;
  raw->non_local_exit_signal(raw, raw->intern(raw, symbol), data);
}

}  // namespace

emacs_value run_guarded(emacs_env* raw, NativeFunction function, std::ptrdiff_t nargs,
                        emacs_value* args) noexcept {
  Env env(raw);
  // Each handler leaves a non-local exit pending; Emacs ignores the returned
  // value in that case, so nullptr is safe to return.
  try {
    return function(env, nargs, args);
  } catch (const PendingExit&) {
    // Already pending: nothing to add.
  } catch (const std::bad_alloc&) {
    // Raise what Emacs's own memory_full raises: the error and data held in
    // `memory-signal-data', prepared at startup so that no allocation is
    // needed now.
    emacs_value signal_data =
        raw->funcall(raw, raw->intern(raw, "symbol-value"), 1,
                     std::array<emacs_value, 1>{raw->intern(raw, "memory-signal-data")}.data());
    emacs_value symbol = raw->funcall(raw, raw->intern(raw, "car"), 1, &signal_data);
    emacs_value data = raw->funcall(raw, raw->intern(raw, "cdr"), 1, &signal_data);
    if (raw->non_local_exit_check(raw) == emacs_funcall_exit_return) {
      raw->non_local_exit_signal(raw, symbol, data);
    }
  } catch (const SystemError& error) {
    // env.signal leaves the signal pending and throws; so does a failure to
    // build its data, with that failure pending instead.
    try {
      env.signal(
          "fastrevert-system-error",
          env.list({env.string(error.function()), env.string(std::strerror(error.code().value())),
                    error.path().empty() ? env.nil() : env.string(error.path())}));
    } catch (...) {
    }
  } catch (const std::exception& error) {
    signal_message(raw, "fastrevert-error", error.what());
  } catch (...) {
    signal_message(raw, "fastrevert-error", "unknown C++ exception");
  }
  if (raw->non_local_exit_check(raw) == emacs_funcall_exit_return) {
    // Unreachable in practice; never return a null value with nothing pending.
    signal_message(raw, "fastrevert-error", "native call failed without a reason");
  }
  return nullptr;
}

std::vector<FunctionSpec>& function_registry() {
  // A function-local static, so registrations from any translation unit's
  // static initializers find it constructed.
  static std::vector<FunctionSpec> registry;
  return registry;
}

}  // namespace fastrevert::glue
