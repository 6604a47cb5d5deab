// The asynchronous process glue: `fastrevert-make-process' (children run by
// the engine's process table, and served while Lisp waits: core/handoff.h),
// the delivery of their output to the Lisp functions that pass it on to
// filters, buffers and sentinels, and signal names and numbers.  Children
// are spawned here, so that a spawn failure reaches Lisp at once.
#include <sys/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/child.h"
#include "core/direct_input.h"
#include "core/engine.h"
#include "core/fd.h"
#include "core/framing.h"
#include "core/json_lisp.h"
#include "core/named_pipes.h"
#include "core/pipe.h"
#include "core/process_output.h"
#include "core/process_table.h"
#include "core/spill.h"
#include "core/utf8.h"
#include "glue/child_args.h"
#include "glue/env.h"
#include "glue/process.h"
#include "glue/state.h"

using namespace fastrevert;
using namespace fastrevert::glue;

namespace {

// How a process's bytes become the text Lisp is given.
enum class Decoding : std::uint8_t {
  utf8,  // UTF-8: well-formed pieces become multibyte strings here.
  raw,   // Raw bytes: unibyte strings, as stock gives them.
  lisp,  // Any other coding: Lisp decodes, holding back what it must.
};

// A process whose output Lisp is given.  Main thread only.
struct LispProcess {
  std::shared_ptr<ProcessOutput> output;
  // The `fastrevert-process' object, held by a global reference.
  emacs_value object = nullptr;
  Decoding decoding = Decoding::lisp;
  // How much of the memfd's memory was given back.
  std::uint64_t given_back = 0;
  // The largest range of the memfd handed to Lisp at once: no limit for
  // a buffer, which takes a range straight from the memfd, and
  // kLargestText for a filter, which is given it as a string.
  std::uint64_t largest_range = std::numeric_limits<std::uint64_t>::max();
  // Its output is being delivered further up this stack: a filter waits for
  // more there.  That delivery goes on with what comes meanwhile.
  bool delivering = false;
  // For a process attached to named pipes, the write end that keeps its
  // output from ending before Lisp says the process has (see
  // core/named_pipes.h).
  UniqueFd output_keeper;
  // Where sends are written at once while the engine has none left to
  // write (see core/direct_input.h), or null.
  std::shared_ptr<DirectInput> direct_input;
};

std::unordered_map<std::uint64_t, LispProcess>& lisp_processes() {
  static std::unordered_map<std::uint64_t, LispProcess> processes;
  return processes;
}

// The most bytes beyond its backlog that waited for any process forgotten
// since; see fastrevert::glue::backlog_stats.
std::uint64_t forgotten_overrun = 0;

// The largest text handed to Lisp at once: a quit waits for it.
constexpr std::size_t kLargestText = std::size_t{256} << 10;

// The most one delivery hands on before it lets the wait go on: Emacs's
// timers and other processes get their turn at least this often, as with
// stock Emacs, which runs them between two reads.
constexpr std::uint64_t kDeliveryBytes = std::uint64_t{1} << 20;

// Delivered bytes of a memfd whose memory is given back at a time.
constexpr std::uint64_t kGiveBackStep = std::uint64_t{1} << 20;

// Gives back, on the engine's thread, the memory of what was delivered of
// PROCESS's memfd, a step at a time.  The command holds the output, and
// with it the descriptor, until it has run.
void give_back_delivered(LispProcess& process) {
  std::uint64_t delivered = process.output->memfd_delivered();
  if (delivered < process.given_back + kGiveBackStep) return;
  process.given_back = delivered;
  std::shared_ptr<ProcessOutput> output = process.output;
  runtime.post([output, delivered](Engine&) {
    give_back_spilled(output->memfd(), static_cast<off_t>(delivered));
  });
}

// Symbols used at every delivery, interned once for the life of Emacs.
struct Names {
  emacs_value deliver_text;
  emacs_value deliver_range;
  emacs_value deliver_end;
  emacs_value deliver_failure;
  emacs_value deliver_later;
  emacs_value handed;
  emacs_value quit_flag;
  emacs_value set;
  emacs_value symbol_value;
  emacs_value nil;
  emacs_value whole;
  emacs_value part;
};

const Names& names(Env& env) {
  static std::optional<Names> made;
  if (!made) {
    auto global = [&env](const char* name) { return env.global(env.intern(name)); };
    made = Names{global("fastrevert--deliver-text"),
                 global("fastrevert--deliver-range"),
                 global("fastrevert--deliver-end"),
                 global("fastrevert--deliver-failure"),
                 global("fastrevert--deliver-later"),
                 global("fastrevert--handed"),
                 global("quit-flag"),
                 global("set"),
                 global("symbol-value"),
                 global("nil"),
                 global("whole"),
                 global("part")};
  }
  return *made;
}

// Forgets the process ID: its object is no longer held.
void forget(Env& env, std::uint64_t id) {
  auto& processes = lisp_processes();
  auto found = processes.find(id);
  if (found == processes.end()) return;
  forgotten_overrun = std::max(forgotten_overrun, found->second.output->overrun());
  env.free_global(found->second.object);
  processes.erase(found);
}

// Tells the consumer again that OUTPUT of ID waits: a delivery stopped
// before all of it was taken, and its process_ready record is gone.
void tell_again(std::uint64_t id, const std::shared_ptr<ProcessOutput>& output) {
  if (Engine* engine = runtime.engine()) {
    engine->emit(Record{RecordKind::process_ready, id, 0, {}, output});
  }
}

// Whether BYTES are all ASCII.
bool ascii(std::string_view bytes) noexcept {
  for (char byte : bytes) {
    if (static_cast<unsigned char>(byte) >= 0x80) return false;
  }
  return true;
}

// Hands PIECE of process OBJECT to Lisp.  Returns false, with the exit
// pending, if Lisp exited non-locally.
bool hand_to_lisp(Env& env, const Names& n, emacs_value object, Decoding decoding,
                  const ProcessOutput::Piece& piece) {
  switch (piece.kind) {
    case ProcessOutput::Piece::Kind::text: {
      emacs_value stream = env.integer(piece.stream + 1);
      emacs_value text;
      emacs_value kind = n.nil;
      if (decoding == Decoding::utf8 && ascii(piece.bytes)) {
        // ASCII is the same text unibyte or multibyte, and a unibyte
        // string costs one allocation where make_string costs two: Lisp
        // makes it multibyte only for a filter, which must see what stock
        // gives it.
        text = env.unibyte(piece.bytes);
      } else if (decoding == Decoding::utf8 && valid_utf8(piece.bytes)) {
        text = env.string(piece.bytes);
      } else {
        text = env.unibyte(piece.bytes);
        if (decoding == Decoding::utf8) kind = n.whole;
        if (decoding == Decoding::lisp) kind = n.part;
      }
      return env.funcall_may_exit(n.deliver_text, {object, stream, text, kind});
    }
    case ProcessOutput::Piece::Kind::range:
      return env.funcall_may_exit(
          n.deliver_range, {object, env.integer(piece.memfd),
                            env.integer(static_cast<std::int64_t>(piece.from)),
                            env.integer(static_cast<std::int64_t>(piece.to))});
    case ProcessOutput::Piece::Kind::end:
      if (piece.failed) {
        return env.funcall_may_exit(n.deliver_failure, {object, env.string(piece.reason)});
      }
      return env.funcall_may_exit(n.deliver_end, {object, env.integer(piece.status.code),
                                                  env.string(exit_how_name(piece.status))});
    case ProcessOutput::Piece::Kind::none:
      break;
  }
  return true;
}

Framing framing_arg(Env& env, emacs_value value) {
  if (!env.truthy(value)) return Framing::none;
  if (env.eq(value, env.intern("lines"))) return Framing::lines;
  if (env.eq(value, env.intern("lsp"))) return Framing::lsp;
  env.wrong_type("fastrevert-framing-p", value);
}

Decoding decoding_arg(Env& env, emacs_value value) {
  if (env.eq(value, env.intern("utf-8"))) return Decoding::utf8;
  if (env.eq(value, env.intern("raw"))) return Decoding::raw;
  if (env.eq(value, env.intern("lisp"))) return Decoding::lisp;
  env.wrong_type("fastrevert-decoding-p", value);
}

// How the printed Lisp of a JSON value is to look, from the list
// (OBJECT-TYPE NULL-OBJECT FALSE-OBJECT) that `json-parse-buffer' takes as
// keywords: OBJECT-TYPE is `plist' or `hash-table', the others nil or a
// keyword.
std::shared_ptr<const JsonLisp> json_style_arg(Env& env, emacs_value value) {
  auto style = std::make_shared<JsonLisp>();
  emacs_value rest = value;
  auto next = [&env, &rest, value]() {
    if (!env.is_a(rest, "cons")) env.wrong_type("fastrevert-json-style-p", value);
    emacs_value item = env.call("car", {rest});
    rest = env.call("cdr", {rest});
    return item;
  };
  emacs_value objects = next();
  if (env.eq(objects, env.intern("plist"))) {
    style->objects = JsonLisp::Objects::plist;
  } else if (env.eq(objects, env.intern("hash-table"))) {
    style->objects = JsonLisp::Objects::hash_table;
  } else {
    env.wrong_type("fastrevert-json-style-p", value);
  }
  for (std::string* form : {&style->null_form, &style->false_form}) {
    emacs_value object = next();
    if (!env.truthy(object)) {
      *form = "nil";
      continue;
    }
    if (!env.truthy(env.call("keywordp", {object}))) env.wrong_type("fastrevert-json-style-p", value);
    *form = env.to_bytes(env.call("symbol-name", {object}));
    for (char c : form->substr(1)) {
      bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '_';
      if (!plain) env.wrong_type("fastrevert-json-style-p", value);
    }
  }
  // An optional fourth element: label the keys (JsonLisp::label_keys).
  if (env.truthy(rest)) style->label_keys = env.truthy(next());
  if (env.truthy(rest)) env.wrong_type("fastrevert-json-style-p", value);
  return style;
}

// The output of a process framed as FRAMING, handed to Lisp as DECODING
// says, whose backlog is BACKLOG bytes (nil for the default).
std::shared_ptr<ProcessOutput> make_output(Env& env, Framing framing, Decoding decoding,
                                           emacs_value backlog) {
  ProcessOutput::Config config;
  config.decode =
      decoding == Decoding::utf8 ? ProcessOutput::Decode::utf8 : ProcessOutput::Decode::bytes;
  config.whole_units = framing != Framing::none;
  config.prompt = framing == Framing::lsp;
  if (env.truthy(backlog)) {
    std::int64_t bytes = env.to_integer(backlog);
    if (bytes <= 0) env.signal("args-out-of-range", env.list({backlog}));
    config.backlog = static_cast<std::uint64_t>(bytes);
  }
  return std::make_shared<ProcessOutput>(config);
}

// Signals wrong-type-argument unless VALUE is a `fastrevert-process'.
void check_process_object(Env& env, emacs_value value) {
  if (!env.truthy(env.call("fastrevert-process-p", {value}))) {
    env.wrong_type("fastrevert-process-p", value);
  }
}

// Records that OUTPUT of process KEY goes to OBJECT (a global reference
// this takes over), handed to Lisp as DECODING says.
LispProcess& remember(std::uint64_t key, std::shared_ptr<ProcessOutput> output,
                      emacs_value object, Decoding decoding) {
  LispProcess& process = lisp_processes()[key];
  process.output = std::move(output);
  process.object = object;
  process.decoding = decoding;
  return process;
}

// The process that ID, an engine process ID from Lisp, names, or null when
// none is remembered.
LispProcess* find_lisp_process(Env& env, emacs_value id) {
  auto found = lisp_processes().find(static_cast<std::uint64_t>(env.to_integer(id)));
  return found == lisp_processes().end() ? nullptr : &found->second;
}

// Gives HANDOVER to the engine to run as process KEY; when the engine
// cannot take it, forgets KEY and signals why.
void run_on_engine(Env& env, std::uint64_t key, std::unique_ptr<ProcessHandover> handover) {
  Runtime::Posted posted = runtime.adopt(key, std::move(handover));
  if (posted != Runtime::Posted::yes) forget(env, key);
  check_posted(env, posted);
}

}  // namespace

namespace fastrevert::glue {

bool deliver_process_output(Env& env, const Record& record) {
  auto& processes = lisp_processes();
  auto found = processes.find(record.id);
  if (found == processes.end() || found->second.output != record.output) return true;
  const Names& n = names(env);
  if (found->second.delivering) {
    return env.funcall_may_exit(n.deliver_later, {found->second.object});
  }
  const std::uint64_t id = record.id;
  const std::shared_ptr<ProcessOutput> output = record.output;
  const emacs_value object = found->second.object;
  const Decoding decoding = found->second.decoding;
  const std::uint64_t largest_range = found->second.largest_range;
  found->second.delivering = true;
  bool ended = false;
  bool stopped = false;
  // The non-local exit Lisp made, raised again once the delivery is tidied.
  std::optional<Env::Exit> exit;
  // One delivery takes at most what waited when it began, and at most
  // kDeliveryBytes: a child that writes as fast as Lisp takes its output
  // must not keep the wait (and its timers) from ending.  The rest goes in
  // the next delivery.
  const std::uint64_t budget =
      std::max<std::uint64_t>(std::min(output->waiting(), kDeliveryBytes), 1);
  std::uint64_t delivered = 0;
  // Ends the delivery.  One that Lisp cut short (INTERRUPTED: a non-local
  // exit, such as a client's throw to its waiting request, or a C++
  // exception) leaves nothing to tell of when it took all there was.
  auto tidy = [&](bool interrupted) {
    auto again = processes.find(id);
    if (ended) {
      forget(env, id);
    } else if (again != processes.end() && again->second.output == output) {
      again->second.delivering = false;
      if (interrupted ? !output->settle() : stopped) tell_again(id, output);
    }
  };
  try {
    for (;;) {
      // A quit typed while a piece was delivered is taken now, before the
      // next; what is left waits for the next delivery.
      if (env.truthy(env.funcall(n.symbol_value, {n.quit_flag}))) {
        stopped = true;
        break;
      }
      if (delivered >= budget) {
        // Told again only if more is ready: otherwise the engine tells of
        // what comes next, and no empty delivery follows each one.
        stopped = !output->settle();
        break;
      }
      ProcessOutput::Piece piece;
      if (!output->claim(piece, kLargestText, largest_range)) {
        if (output->settle()) break;
        continue;
      }
      bool returned = false;
      try {
        env.funcall(n.set, {n.handed, n.nil});
        returned = hand_to_lisp(env, n, object, decoding, piece);
      } catch (const PendingExit&) {
        // As a non-local exit of the Lisp that hands the piece on.
      } catch (...) {
        output->release();
        throw;
      }
      if (!returned) {
        // The piece was delivered if Lisp had begun to hand it on (the
        // filter or the sentinel ran, the insertion began); otherwise only
        // a quit keeps it for the next delivery.  Any other failure drops
        // it, as Emacs drops output it cannot decode, and is reported.
        exit = env.take_exit();
        bool handed = env.truthy(env.funcall(n.symbol_value, {n.handed}));
        if (!handed && env.is_quit(*exit)) {
          output->release();
          break;
        }
      }
      delivered += piece.kind == ProcessOutput::Piece::Kind::range ? piece.to - piece.from
                                                                   : piece.bytes.size();
      if (output->commit()) {
        runtime.post_for_process(
            id, [id](Engine& engine) { engine.service<ProcessTable>().resume(id); });
      }
      if (piece.kind == ProcessOutput::Piece::Kind::range) {
        auto slot = processes.find(id);
        if (slot != processes.end()) give_back_delivered(slot->second);
      }
      if (piece.kind == ProcessOutput::Piece::Kind::end) {
        ended = true;
        break;
      }
      if (exit) break;
    }
  } catch (...) {
    tidy(true);
    if (exit) env.restore(*exit);
    throw;
  }
  tidy(exit.has_value());
  if (!exit) return true;
  env.restore(*exit);
  return false;
}

void forget_all_processes(Env& env) {
  auto& processes = lisp_processes();
  while (!processes.empty()) forget(env, processes.begin()->first);
}

void backlog_stats(std::uint64_t& waiting, std::uint64_t& overrun) {
  waiting = 0;
  overrun = forgotten_overrun;
  for (const auto& entry : lisp_processes()) {
    waiting += entry.second.output->waiting();
    overrun = std::max(overrun, entry.second.output->overrun());
  }
}

}  // namespace fastrevert::glue

FASTREVERT_DEFUN("fastrevert--mod-process-start", mod_process_start, 13, 13,
                 "Spawn a child for the engine to run as process ID; return its pid.\n"
                 "PROGRAM, ARGV, ENV and CWD are as for `fastrevert--mod-call-process'.\n"
                 "STDIN is t (a pipe), nil (/dev/null) or an encoded file name.\n"
                 "STDOUT is t (a pipe), nil (/dev/null), `memfd': a pipe whose bytes\n"
                 "past the first 16 KiB go through a memfd, delivered as ranges of it, or\n"
                 "`memfd-filter': the same, in ranges cut at 256 KiB, for a filter.\n"
                 "STDERR is t (with stdout), `pipe' (a pipe of its own), nil (/dev/null)\n"
                 "or an encoded file name.  FRAMING is nil, `lines' or `lsp', for\n"
                 "stdout.  READ-SIZE is the first read size.  PROCESS is the Lisp object\n"
                 "the output is delivered for (see `fastrevert--deliver-text'), or nil\n"
                 "for a child nobody hears from again, whose output is dropped.\n"
                 "DECODING is `utf-8' (well-formed UTF-8 comes decoded), `raw' (bytes\n"
                 "as they are) or `lisp' (Lisp decodes).  BACKLOG is the most bytes of\n"
                 "output that may wait for Emacs before the child waits on its pipe, or\n"
                 "nil for 16 MiB.  A spawn failure returns (:error CONDITION FUNCTION\n"
                 "STRERROR PATH).\n\n"
                 "(fn ID PROGRAM ARGV ENV CWD STDIN STDOUT STDERR FRAMING READ-SIZE PROCESS "
                 "DECODING BACKLOG)") {
  std::int64_t id = env.to_integer(args[0]);
  SpawnSpec spec;
  fill_spec(env, args + 1, spec);
  spec.stdout_mode = !env.truthy(args[6]) ? SpawnSpec::Stdout::null : SpawnSpec::Stdout::pipe;
  ProcessTable::Options options;
  options.framing = framing_arg(env, args[8]);
  std::int64_t read_size = env.to_integer(args[9]);
  options.initial_read_size = read_size > 0 ? static_cast<std::size_t>(read_size) : 4096;
  options.signal_process_group = true;
  bool filter_memfd = env.eq(args[6], env.intern("memfd-filter"));
  options.stdout_to_memfd = filter_memfd || env.eq(args[6], env.intern("memfd"));
  options.memfd_threshold = kMemfdThreshold;
  Decoding decoding = decoding_arg(env, args[11]);
  options.output = make_output(env, options.framing, decoding, args[12]);
  auto key = static_cast<std::uint64_t>(id);
  if (lisp_processes().count(key)) env.signal("args-out-of-range", env.list({args[0]}));

  // Checked before spawning, so that no child is started that nobody runs.
  check_posted(env, runtime.can_post());
  bool heard = env.truthy(args[10]);
  if (heard) check_process_object(env, args[10]);
  emacs_value object = heard ? env.global(args[10]) : nullptr;
  emacs_value failure = nullptr;
  std::optional<Child> child;
  try {
    child = spawn_like_emacs(env, spec, failure);
  } catch (...) {
    if (heard) env.free_global(object);
    throw;
  }
  if (!child) {
    if (heard) env.free_global(object);
    return failure;
  }
  pid_t pid = child->pid;
  if (heard) {
    LispProcess& remembered = remember(key, options.output, object, decoding);
    if (filter_memfd) remembered.largest_range = kLargestText;
  }
  run_on_engine(env, key, std::make_unique<ProcessHandover>(std::move(*child), options));
  return env.integer(pid);
}

FASTREVERT_DEFUN("fastrevert--mod-process-attach", mod_process_attach, 5, 7,
                 "Make named pipes in DIRECTORY for the engine to run as process ID.\n"
                 "DIRECTORY is an encoded name of an empty private directory.  The\n"
                 "engine reads DIRECTORY/out, framed as FRAMING says (nil, `lines' or\n"
                 "`lsp'), and writes what `fastrevert--mod-process-send' queues to\n"
                 "DIRECTORY/in; whoever starts the process connects its standard output\n"
                 "and input to them.  The output goes to PROCESS, a `fastrevert-process',\n"
                 "as raw bytes; BACKLOG is as for `fastrevert--mod-process-start'.  The\n"
                 "output does not end before `fastrevert--mod-process-ended' says the\n"
                 "process has; it ends, as exited with code 0, once the pipe is closed.\n\n"
                 "With FRAMING `lsp' and JSON-STYLE non-nil, each message's JSON body\n"
                 "is rewritten as printed Lisp, as `fastrevert--mod-json-to-lisp' makes\n"
                 "it for JSON-STYLE, behind the comment line \";;fastrevert-lisp\", under\n"
                 "a Content-Length of its own; a body that does not convert stays.\n"
                 "With FRAMING `lsp' and FILE-THRESHOLD, a positive integer, a body of that\n"
                 "many bytes or more goes to a file of its own instead, and the message's\n"
                 "body is the line \";;fastrevert-lisp-file ID TOKEN\" (its printed Lisp,\n"
                 "with JSON-STYLE) or \";;fastrevert-json-file ID TOKEN\" (the JSON as it\n"
                 "was); see `fastrevert--mod-lisp-file'.\n\n"
                 "(fn ID DIRECTORY FRAMING PROCESS BACKLOG &optional JSON-STYLE FILE-THRESHOLD)") {
  auto key = static_cast<std::uint64_t>(env.to_integer(args[0]));
  std::string directory = env.to_bytes(args[1]);
  ProcessTable::Options options;
  options.framing = framing_arg(env, args[2]);
  if (nargs > 5 && env.truthy(args[5])) {
    std::shared_ptr<const JsonLisp> style = json_style_arg(env, args[5]);
    if (options.framing == Framing::lsp && json_lisp_available()) options.lisp_replies = style;
  }
  if (nargs > 6 && env.truthy(args[6])) {
    std::int64_t threshold = env.to_integer(args[6]);
    if (threshold <= 0) env.signal("args-out-of-range", env.list({args[6]}));
    if (options.framing == Framing::lsp) options.lisp_file_threshold = static_cast<std::size_t>(threshold);
  }
  check_process_object(env, args[3]);
  options.output = make_output(env, options.framing, Decoding::raw, args[4]);
  if (lisp_processes().count(key)) env.signal("args-out-of-range", env.list({args[0]}));
  check_posted(env, runtime.can_post());
  NamedPipes pipes = open_named_pipes(directory);
  // A server answers requests: its input is written at once where it can be.
  options.direct_input = std::make_shared<DirectInput>(pipes.input.get());
  Child ends;
  ends.stdout_fd = pipes.output.release();
  ends.stdin_fd = pipes.input.release();
  auto handover = std::make_unique<ProcessHandover>(std::move(ends), options);
  LispProcess& remembered = remember(key, options.output, env.global(args[3]), Decoding::raw);
  remembered.output_keeper = std::move(pipes.output_keeper);
  remembered.direct_input = options.direct_input;
  run_on_engine(env, key, std::move(handover));
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-json-to-lisp", mod_json_to_lisp, 2, 2,
                 "Return the JSON text JSON as printed Lisp, or nil.\n"
                 "STYLE is a list (OBJECT-TYPE NULL-OBJECT FALSE-OBJECT), as\n"
                 "`json-parse-buffer' takes them: OBJECT-TYPE `plist' or `hash-table',\n"
                 "the others nil or a keyword.  `read' of the text gives what\n"
                 "`json-parse-string' gives for JSON with those settings.  A fourth\n"
                 "element of STYLE, non-nil, labels each plist key where it first comes\n"
                 "\\=(#1=:key) and refers to the label after (#1#), and so the symbols\n"
                 "of the `#s' form of hash tables, which `read' takes faster than the\n"
                 "names, with `read-circle' non-nil.  The value is\n"
                 "nil where it would not be the same: JSON that is not one value,\n"
                 "a key twice in an object, a NUL in a string, a plist key that is not\n"
                 "printable ASCII, an integer beyond 64 bits, a float beyond the double\n"
                 "range, nesting deeper than 500.  With JSON nil, return whether this\n"
                 "module has the converter (it needs RapidJSON where it is built).\n\n"
                 "(fn JSON STYLE)") {
  if (!env.truthy(args[0])) return env.boolean(json_lisp_available());
  if (!env.is_string(args[0])) env.wrong_type("stringp", args[0]);
  std::shared_ptr<const JsonLisp> style = json_style_arg(env, args[1]);
  std::string json = env.to_bytes(args[0]);
  std::string lisp;
  if (!json_to_lisp(json, *style, lisp)) return env.nil();
  return env.unibyte(lisp);
}

FASTREVERT_DEFUN("fastrevert--mod-lisp-file", mod_lisp_file, 2, 2,
                 "Return the descriptor of file TOKEN of engine process ID, or nil.\n"
                 "Such a file holds a message's body, as JSON or as printed Lisp (see\n"
                 "`fastrevert--mod-process-attach'); it stays open until\n"
                 "`fastrevert--mod-lisp-file-done' is called for it or a later file, or\n"
                 "the process's output has all been delivered.  Nil when it is not open.\n\n"
                 "(fn ID TOKEN)") {
  LispProcess* process = find_lisp_process(env, args[0]);
  auto token = static_cast<std::uint64_t>(env.to_integer(args[1]));
  int fd = process ? process->output->lisp_file(token) : -1;
  return fd < 0 ? env.nil() : env.integer(fd);
}

FASTREVERT_DEFUN("fastrevert--mod-lisp-file-done", mod_lisp_file_done, 2, 2,
                 "Close file TOKEN of engine process ID, and every file before it.\n"
                 "Their bytes no longer count towards the process's backlog.\n\n"
                 "(fn ID TOKEN)") {
  LispProcess* process = find_lisp_process(env, args[0]);
  auto token = static_cast<std::uint64_t>(env.to_integer(args[1]));
  if (process && process->output->release_lisp_files(token)) {
    auto id = static_cast<std::uint64_t>(env.to_integer(args[0]));
    runtime.post_for_process(id, [id](Engine& engine) { engine.service<ProcessTable>().resume(id); });
  }
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-process-ended", mod_process_ended, 1, 1,
                 "Say that the process behind engine process ID, attached to named pipes\n"
                 "by `fastrevert--mod-process-attach', has ended: its output ends once\n"
                 "its own ends of the pipe are closed.\n\n"
                 "(fn ID)") {
  if (LispProcess* process = find_lisp_process(env, args[0])) process->output_keeper.reset();
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-process-send", mod_process_send, 2, 2,
                 "Queue the unibyte STRING for the stdin of engine process ID.\n"
                 "Never blocks: what the pipe does not take now is written later.\n"
                 "For a process attached to named pipes, what the pipe takes is written\n"
                 "here and now while no earlier send waits.\n\n"
                 "(fn ID STRING)") {
  auto id = static_cast<std::uint64_t>(env.to_integer(args[0]));
  std::string data = env.to_bytes(args[1]);
  LispProcess* process = find_lisp_process(env, args[0]);
  if (process && process->direct_input) {
    std::size_t written = process->direct_input->try_write(data);
    if (written == data.size() && !data.empty()) return env.nil();
    data.erase(0, written);
  }
  check_posted(env, runtime.post_for_process(id, [id, data = std::move(data)](Engine& e) mutable {
    if (!e.service<ProcessTable>().write_stdin(id, std::move(data))) {
      e.emit(Record{RecordKind::notice, id, 0,
                    "fastrevert: process " + std::to_string(id) + " no longer reads its input"});
    }
  }));
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-process-eof", mod_process_eof, 1, 1,
                 "Close the stdin of engine process ID once its queued input is written.\n\n"
                 "(fn ID)") {
  auto id = static_cast<std::uint64_t>(env.to_integer(args[0]));
  LispProcess* process = find_lisp_process(env, args[0]);
  if (process && process->direct_input) process->direct_input->close();
  check_posted(env, runtime.post_for_process(
                        id, [id](Engine& e) { e.service<ProcessTable>().close_stdin(id); }));
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-process-signal", mod_process_signal, 2, 2,
                 "Send signal number SIGNAL to engine process ID (its process group).\n\n"
                 "(fn ID SIGNAL)") {
  auto id = static_cast<std::uint64_t>(env.to_integer(args[0]));
  std::int64_t number = env.to_integer(args[1]);
  if (number < 0 || number > 64) env.signal("args-out-of-range", env.list({args[1]}));
  check_posted(env, runtime.post_for_process(id, [id, number](Engine& e) {
    e.service<ProcessTable>().signal(id, static_cast<int>(number));
  }));
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-process-remove", mod_process_remove, 1, 1,
                 "Forget engine process ID: kill it if it runs and reap it in the background.\n"
                 "No further output or end is delivered for it.  Do nothing if the engine\n"
                 "is stopped.\n\n"
                 "(fn ID)") {
  auto id = static_cast<std::uint64_t>(env.to_integer(args[0]));
  forget(env, id);
  runtime.post_for_process(id, [id](Engine& e) { e.service<ProcessTable>().remove(id); });
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-process-backlog", mod_process_backlog, 1, 1,
                 "Return (WAITING . OVERRUN) for engine process ID, or nil if it is gone.\n"
                 "WAITING is how many bytes of its output wait for Emacs now; OVERRUN the\n"
                 "most that ever waited beyond its backlog.\n\n"
                 "(fn ID)") {
  LispProcess* process = find_lisp_process(env, args[0]);
  if (!process) return env.nil();
  return env.call("cons",
                  {env.integer(static_cast<std::int64_t>(process->output->waiting())),
                   env.integer(static_cast<std::int64_t>(process->output->overrun()))});
}

FASTREVERT_DEFUN("fastrevert--mod-signal-number", mod_signal_number, 1, 1,
                 "Return the number of the signal NAME (a string such as \"SIGINT\",\n"
                 "\"int\" or \"KILL\"), or nil if there is no such signal.\n\n"
                 "(fn NAME)") {
  std::optional<int> number = signal_number(env.to_bytes(args[0]));
  return number ? env.integer(*number) : env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-strsignal", mod_strsignal, 1, 1,
                 "Return the C library's description of signal number SIGNAL, unibyte.\n\n"
                 "(fn SIGNAL)") {
  std::int64_t number = env.to_integer(args[0]);
  const char* description =
      number > 0 && number < 65 ? strsignal(static_cast<int>(number)) : nullptr;
  return description ? env.unibyte(description) : env.nil();
}
