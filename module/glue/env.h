// A checked wrapper around emacs_env, and the machinery that registers
// native functions.  This directory is the only code that sees emacs_env.
//
// Every wrapper method checks for a pending non-local exit after the call it
// makes and throws PendingExit if there is one.  The trampoline catches
// PendingExit and returns at once, so C++ scopes unwind normally and the
// signal or throw stays pending for Emacs to raise.
#pragma once

#include <emacs-module.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace fastrevert::glue {

// Thrown when an env call left a non-local exit pending.
struct PendingExit {};

class Env {
 public:
  explicit Env(emacs_env* raw) noexcept : raw_(raw) {}

  emacs_env* raw() const noexcept { return raw_; }

  emacs_value intern(const char* name) const { return checked(raw_->intern(raw_, name)); }
  emacs_value nil() const { return intern("nil"); }
  emacs_value t() const { return intern("t"); }
  emacs_value boolean(bool value) const { return value ? t() : nil(); }

  emacs_value funcall(emacs_value function, std::initializer_list<emacs_value> args) const {
    return funcall(function, args.begin(), args.size());
  }
  emacs_value funcall(emacs_value function, const emacs_value* args, std::size_t count) const {
    return checked(raw_->funcall(raw_, function, static_cast<std::ptrdiff_t>(count),
                                 const_cast<emacs_value*>(args)));
  }
  // Calls FUNCTION with ARGS and returns true, or returns false with the
  // non-local exit it made left pending, throwing nothing: for the calls
  // that hand output to Lisp, out of which a client's throw to its waiting
  // request is routine, and cheaper unwound without a C++ exception.
  bool funcall_may_exit(emacs_value function,
                        std::initializer_list<emacs_value> args) const noexcept {
    raw_->funcall(raw_, function, static_cast<std::ptrdiff_t>(args.size()),
                  const_cast<emacs_value*>(args.begin()));
    return !exit_pending();
  }
  emacs_value call(const char* function, std::initializer_list<emacs_value> args) const {
    return funcall(intern(function), args);
  }
  emacs_value list(const std::vector<emacs_value>& items) const {
    return funcall(intern("list"), items.data(), items.size());
  }

  // Multibyte string from UTF-8.
  emacs_value string(std::string_view utf8) const {
    return checked(raw_->make_string(raw_, utf8.data(), size(utf8)));
  }
  // Unibyte string holding BYTES unchanged.
  emacs_value unibyte(std::string_view bytes) const {
    return checked(raw_->make_unibyte_string(raw_, bytes.data(), size(bytes)));
  }
  emacs_value integer(std::int64_t value) const { return checked(raw_->make_integer(raw_, value)); }

  // These signal `wrong-type-argument' (through Emacs) for a value of the
  // wrong type, which arrives here as PendingExit.
  std::int64_t to_integer(emacs_value value) const {
    return checked(raw_->extract_integer(raw_, value));
  }
  // The bytes of STRING: UTF-8 for a multibyte string, the bytes themselves
  // for a unibyte one (so Lisp passes file names encoded).
  // Signals `wrong-type-argument' for a non-string.
  std::string to_bytes(emacs_value string) const;
  // A number of SECONDS, integer or float, as a duration (see
  // core/duration.h): infinity and anything longer than a century become
  // kForever.  Signals `wrong-type-argument' for a value that is not a
  // number and `args-out-of-range' for NaN or a negative number.
  std::chrono::nanoseconds to_duration(emacs_value seconds) const;

  bool truthy(emacs_value value) const noexcept { return raw_->is_not_nil(raw_, value); }
  bool eq(emacs_value a, emacs_value b) const noexcept { return raw_->eq(raw_, a, b); }
  // Whether VALUE's `type-of' is the symbol TYPE.
  bool is_a(emacs_value value, const char* type) const {
    return eq(checked(raw_->type_of(raw_, value)), intern(type));
  }
  bool is_string(emacs_value value) const { return is_a(value, "string"); }

  // Signals `wrong-type-argument' with (PREDICATE VALUE) and throws PendingExit.
  [[noreturn]] void wrong_type(const char* predicate, emacs_value value) const {
    signal("wrong-type-argument", list({intern(predicate), value}));
  }
  // Signals SYMBOL with DATA and throws PendingExit.
  [[noreturn]] void signal(const char* symbol, emacs_value data) const {
    raw_->non_local_exit_signal(raw_, intern(symbol), data);
    throw PendingExit{};
  }

  // True when the user has asked to quit (C-g) while native code runs.
  bool quit_requested() const noexcept {
    return raw_->process_input(raw_) == emacs_process_input_quit;
  }

  // Forgets a pending non-local exit, so that Emacs can be called again.
  void clear_exit() const noexcept { raw_->non_local_exit_clear(raw_); }

  // A non-local exit taken out of the environment (take_exit), so that
  // Emacs can be called before it goes on (resume).
  struct Exit {
    emacs_funcall_exit kind = emacs_funcall_exit_return;
    emacs_value symbol = nullptr;  // The signal's symbol, or the throw's tag.
    emacs_value data = nullptr;    // The signal's data, or the thrown value.
  };
  Exit take_exit() const noexcept {
    Exit exit;
    exit.kind = raw_->non_local_exit_get(raw_, &exit.symbol, &exit.data);
    raw_->non_local_exit_clear(raw_);
    return exit;
  }
  // Makes EXIT pending again.
  void restore(const Exit& exit) const noexcept {
    if (exit.kind == emacs_funcall_exit_throw) {
      raw_->non_local_exit_throw(raw_, exit.symbol, exit.data);
    } else {
      raw_->non_local_exit_signal(raw_, exit.symbol, exit.data);
    }
  }
  // Whether EXIT is a quit.
  bool is_quit(const Exit& exit) const {
    return exit.kind == emacs_funcall_exit_signal && eq(exit.symbol, intern("quit"));
  }

  // A reference to VALUE that outlives this environment, until freed.
  emacs_value global(emacs_value value) const {
    return checked(raw_->make_global_ref(raw_, value));
  }
  void free_global(emacs_value value) const noexcept { raw_->free_global_ref(raw_, value); }

  // Whether a non-local exit is pending.
  bool exit_pending() const noexcept {
    return raw_->non_local_exit_check(raw_) != emacs_funcall_exit_return;
  }
  // Throws PendingExit if a non-local exit is pending.
  void check() const {
    if (exit_pending()) throw PendingExit{};
  }

 private:
  // RESULT, the value of an env call just made, once check() passed.
  template <typename T>
  T checked(T result) const {
    check();
    return result;
  }
  static std::ptrdiff_t size(std::string_view text) noexcept {
    return static_cast<std::ptrdiff_t>(text.size());
  }

  emacs_env* raw_;
};

using NativeFunction = emacs_value (*)(Env& env, std::ptrdiff_t nargs, emacs_value* args);

// Turns any C++ exception into the matching Lisp signal; see env.cpp.
emacs_value run_guarded(emacs_env* raw, NativeFunction function, std::ptrdiff_t nargs,
                        emacs_value* args) noexcept;

template <NativeFunction Function>
emacs_value trampoline(emacs_env* raw, std::ptrdiff_t nargs, emacs_value* args, void*) noexcept {
  return run_guarded(raw, Function, nargs, args);
}

// A native function to be bound by emacs_module_init.  Registrations are
// collected at load time by static objects in each glue file.
struct FunctionSpec {
  const char* lisp_name;
  std::ptrdiff_t min_arity;
  std::ptrdiff_t max_arity;
  emacs_value (*entry)(emacs_env*, std::ptrdiff_t, emacs_value*, void*) noexcept;
  const char* docstring;
};

std::vector<FunctionSpec>& function_registry();

struct Registrar {
  explicit Registrar(const FunctionSpec& spec) { function_registry().push_back(spec); }
};

}  // namespace fastrevert::glue

// Defines a native function bound to LISP_NAME.  The body sees `env', `nargs'
// and `args'.
#define FASTREVERT_DEFUN(LISP_NAME, CXX_NAME, MIN_ARITY, MAX_ARITY, DOCSTRING)                 \
  static emacs_value CXX_NAME(::fastrevert::glue::Env& env, std::ptrdiff_t nargs,              \
                              emacs_value* args);                                              \
  static const ::fastrevert::glue::Registrar CXX_NAME##_registrar{                             \
      ::fastrevert::glue::FunctionSpec{LISP_NAME, MIN_ARITY, MAX_ARITY,                        \
                                       &::fastrevert::glue::trampoline<CXX_NAME>, DOCSTRING}}; \
  static emacs_value CXX_NAME([[maybe_unused]] ::fastrevert::glue::Env& env,                   \
                              [[maybe_unused]] std::ptrdiff_t nargs,                           \
                              [[maybe_unused]] emacs_value* args)
