// Tests of a process's output record (core/process_output.h): what the
// producer appends comes out once and in order, pieces never end inside a
// UTF-8 character while more may follow, a piece given back comes again,
// and the backlog bounds what waits.
#include "core/process_output.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

#include "catch_compat.h"
#include "core/fd.h"
#include "core/pipe.h"
#include "core/utf8.h"
#include "seeded_stream.h"

using namespace fastrevert;
using fastrevert::test::SeededRandom;
using fastrevert::test::seeded_stream;

namespace {

using Clock = ProcessOutput::Clock;
using Piece = ProcessOutput::Piece;

std::uint64_t property_seed() {
  if (const char* given = std::getenv("FASTREVERT_TEST_SEED")) {
    return std::strtoull(given, nullptr, 10);
  }
  return static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
}

ProcessOutput::Config utf8_config(std::uint64_t backlog = kDefaultBacklog) {
  ProcessOutput::Config config;
  config.decode = ProcessOutput::Decode::utf8;
  config.backlog = backlog;
  return config;
}

// The bytes of PIECE, a range read from its memfd.
std::string bytes_of(const Piece& piece) {
  if (piece.kind == Piece::Kind::range) return read_at(piece.memfd, piece.from, piece.to);
  return std::string(piece.bytes);
}

}  // namespace

TEST_CASE("process output: pieces of UTF-8 end where a character ends while more may follow",
          "[process_output]") {
  ProcessOutput output(utf8_config());
  std::string euro = "\xE2\x82\xAC";
  output.append(ProcessOutput::kStdout, "a" + euro.substr(0, 2));
  Piece piece;
  REQUIRE(output.claim(piece, 1 << 20));
  CHECK(piece.bytes == "a");
  output.commit();
  // The unfinished character waits: nothing is ready.
  CHECK_FALSE(output.claim(piece, 1 << 20));
  output.append(ProcessOutput::kStdout, euro.substr(2) + "b");
  REQUIRE(output.claim(piece, 1 << 20));
  CHECK(piece.bytes == euro + "b");
  output.commit();
  // At the end of the stream the unfinished rest goes as it is.
  output.append(ProcessOutput::kStdout, euro.substr(0, 1));
  CHECK_FALSE(output.claim(piece, 1 << 20));
  output.end_stream(ProcessOutput::kStdout);
  REQUIRE(output.claim(piece, 1 << 20));
  CHECK(piece.bytes == euro.substr(0, 1));
  output.commit();
}

TEST_CASE("process output: a piece given back comes again, first, and whole",
          "[process_output]") {
  ProcessOutput output(utf8_config());
  output.append(ProcessOutput::kStdout, "first ");
  Piece piece;
  REQUIRE(output.claim(piece, 1 << 20));
  CHECK(piece.bytes == "first ");
  // Bytes that come while it is claimed go behind it.
  output.append(ProcessOutput::kStdout, "second");
  output.release();
  REQUIRE(output.claim(piece, 1 << 20));
  CHECK(piece.bytes == "first ");
  output.commit();
  REQUIRE(output.claim(piece, 1 << 20));
  CHECK(piece.bytes == "second");
  output.commit();
  CHECK_FALSE(output.claim(piece, 1 << 20));
  CHECK(output.waiting() == 0);
}

TEST_CASE("process output: framed units longer than the cap come whole", "[process_output]") {
  ProcessOutput::Config config = utf8_config();
  config.whole_units = true;
  ProcessOutput output(config);
  std::string message = "Content-Length: 300000\r\n\r\n" + std::string(300000, 'x');
  output.append(ProcessOutput::kStdout, message);
  Piece piece;
  REQUIRE(output.claim(piece, 1000));
  CHECK(piece.bytes == message);
  output.commit();
  CHECK(output.waiting() == 0);
  // Unframed, the same bytes come in pieces of the cap.
  ProcessOutput plain(utf8_config());
  plain.append(ProcessOutput::kStdout, message);
  REQUIRE(plain.claim(piece, 1000));
  CHECK(piece.bytes.size() == 1000);
}

TEST_CASE("process output: the end comes after every byte of both streams, once",
          "[process_output]") {
  ProcessOutput output(ProcessOutput::Config{});
  output.append(ProcessOutput::kStderr, "err");
  output.append(ProcessOutput::kStdout, "out");
  output.set_partial(ProcessOutput::kStdout, 3);
  ExitStatus status;
  status.how = ExitStatus::How::exited;
  status.code = 4;
  output.finish(status);
  Piece piece;
  REQUIRE(output.claim(piece, 1 << 20));
  // The streams go in the order their bytes came.
  CHECK(piece.stream == ProcessOutput::kStderr);
  output.commit();
  REQUIRE(output.claim(piece, 1 << 20));
  CHECK(piece.stream == ProcessOutput::kStdout);
  output.commit();
  // A framer still holds bytes: the end waits for them.
  CHECK_FALSE(output.claim(piece, 1 << 20));
  output.append(ProcessOutput::kStdout, "end");
  output.set_partial(ProcessOutput::kStdout, 0);
  REQUIRE(output.claim(piece, 1 << 20));
  CHECK(piece.bytes == "end");
  output.commit();
  REQUIRE(output.claim(piece, 1 << 20));
  CHECK(piece.kind == Piece::Kind::end);
  CHECK(piece.status.code == 4);
  output.commit();
  CHECK(output.done());
  CHECK_FALSE(output.claim(piece, 1 << 20));
}

TEST_CASE("process output: the backlog counts text, ranges and unfinished units, and says when "
          "to read again",
          "[process_output]") {
  ProcessOutput output(utf8_config(1000));
  output.append(ProcessOutput::kStdout, std::string(600, 'a'));
  output.set_partial(ProcessOutput::kStdout, 300);
  CHECK(output.room() == 100);
  output.append(ProcessOutput::kStderr, std::string(300, 'b'));
  CHECK(output.room() == 0);
  CHECK(output.overrun() == 200);
  output.note_throttled();
  Piece piece;
  REQUIRE(output.claim(piece, 1 << 20));
  // 600 bytes still wait, more than half the backlog.
  CHECK_FALSE(output.commit());
  REQUIRE(output.claim(piece, 1 << 20));
  CHECK(output.commit());
  CHECK(output.waiting() == 300);
}

TEST_CASE("process output: a consumer is told at once after a quiet spell, in batches while "
          "output streams",
          "[process_output]") {
  ProcessOutput output(ProcessOutput::Config{});
  Clock::time_point deadline;
  auto now = Clock::now();
  output.append(ProcessOutput::kStdout, "first");
  REQUIRE(output.notify_decision(now, deadline) == ProcessOutput::Notify::now);
  // Told once: more bytes add nothing until it has taken them.
  output.append(ProcessOutput::kStdout, "more");
  CHECK(output.notify_decision(now, deadline) == ProcessOutput::Notify::none);
  Piece piece;
  REQUIRE(output.claim(piece, 1 << 20));
  output.commit();
  CHECK(output.settle());
  // It took output a moment ago: what comes now waits for a batch.
  output.append(ProcessOutput::kStdout, "streaming");
  REQUIRE(output.notify_decision(Clock::now(), deadline) == ProcessOutput::Notify::later);
  CHECK_FALSE(output.notify_due(deadline - std::chrono::milliseconds(1)));
  CHECK(output.notify_due(deadline));
  REQUIRE(output.claim(piece, 1 << 20));
  output.commit();
  CHECK(output.settle());
  // 64 KiB make a batch at once.
  output.append(ProcessOutput::kStdout, std::string(std::size_t{64} << 10, 'x'));
  CHECK(output.notify_decision(Clock::now(), deadline) == ProcessOutput::Notify::now);
  REQUIRE(output.claim(piece, 1 << 20));
  output.commit();
  CHECK(output.settle());
  // And so does the end.
  output.end_stream(ProcessOutput::kStdout);
  output.end_stream(ProcessOutput::kStderr);
  output.finish(ExitStatus{});
  CHECK(output.notify_decision(Clock::now(), deadline) == ProcessOutput::Notify::now);
}

TEST_CASE("process output: bytes that are no UTF-8 are cut at the cap, as text and as ranges",
          "[process_output]") {
  // Continuation bytes only: no character starts anywhere, so no cut can
  // split one, and each piece but the last is as long as the cap allows.
  const std::string junk(std::size_t{1} << 20, '\x80');
  ProcessOutput output(utf8_config());
  int memfd = memfd_create("process-output-test", MFD_CLOEXEC);
  REQUIRE(memfd >= 0);
  UniqueFd producer(memfd);
  output.append(ProcessOutput::kStdout, junk.substr(0, 100000));
  output.start_memfd(UniqueFd(dup(memfd)));
  std::string_view rest = std::string_view(junk).substr(100000);
  REQUIRE(write_all_at(memfd, rest, 0) == 0);
  output.memfd_written(0, rest.size(), rest.substr(rest.size() - 4));
  output.end_stream(ProcessOutput::kStdout);
  output.end_stream(ProcessOutput::kStderr);
  output.finish(ExitStatus{});
  const std::size_t text_cap = 30000;
  const std::uint64_t range_cap = 256 << 10;
  std::string out;
  Piece piece;
  while (output.claim(piece, text_cap, range_cap) && piece.kind != Piece::Kind::end) {
    std::string got = bytes_of(piece);
    std::size_t left = junk.size() - out.size();
    std::size_t cap = piece.kind == Piece::Kind::range ? range_cap : text_cap;
    if (piece.kind == Piece::Kind::text) {
      // Text comes before the memfd's first byte.
      CHECK(got.size() == std::min<std::size_t>(cap, 100000 - out.size()));
    } else {
      CHECK(got.size() == std::min<std::size_t>(cap, left));
    }
    out += got;
    output.commit();
  }
  CHECK(piece.kind == Piece::Kind::end);
  CHECK(out == junk);
}

// The property: a seeded stream of UTF-8, appended in pieces of random
// sizes as text or as ranges of a memfd (the switch once, as a process
// table makes it), and claimed with random caps (on ranges too, as for a
// filter, in half the rounds), some pieces given back,
// comes out whole and in order, each piece of it well-formed UTF-8.
TEST_CASE("process output: seeded streams come out once, in order, in whole characters",
          "[process_output]") {
  std::uint64_t seed = property_seed();
  INFO("seed " << seed << " (replay: FASTREVERT_TEST_SEED=" << seed << ")");
  SeededRandom draw(seed);
  for (int round = 0; round < 200; ++round) {
    INFO("round " << round);
    auto stream = seeded_stream(draw.next(), draw.sized(1, 200000));
    const std::string& bytes = stream.bytes;
    ProcessOutput output(utf8_config());
    int memfd = memfd_create("process-output-test", MFD_CLOEXEC);
    REQUIRE(memfd >= 0);
    UniqueFd producer(memfd);
    std::size_t switch_at = draw.between(0, 1) ? draw.between(0, bytes.size()) : bytes.size();
    // Ranges capped as for a filter, in half the rounds.
    bool cap_ranges = draw.between(0, 1) == 1;
    if (switch_at < bytes.size()) {
      output.start_memfd(UniqueFd(dup(memfd)));
    }
    std::uint64_t memfd_size = 0;
    std::size_t appended = 0;
    std::string out;
    std::string err;
    std::size_t err_appended = 0;
    std::string err_bytes = "standard error, interleaved\n";
    bool ended = false;
    while (!ended) {
      // Produce a little, on one stream or the other.
      if (appended < bytes.size() && draw.between(0, 2) > 0) {
        std::size_t size = std::min<std::size_t>(draw.sized(1, 20000), bytes.size() - appended);
        if (appended >= switch_at) {
          std::string_view chunk(bytes.data() + appended, size);
          REQUIRE(write_all_at(memfd, chunk, memfd_size) == 0);
          std::string_view last = std::string_view(bytes).substr(0, appended + size);
          last = last.substr(last.size() - std::min<std::size_t>(4, last.size()));
          output.memfd_written(memfd_size, memfd_size + size, last);
          memfd_size += size;
        } else {
          size = std::min(size, switch_at - appended);
          output.append(ProcessOutput::kStdout, std::string_view(bytes.data() + appended, size));
        }
        appended += size;
        if (err_appended < err_bytes.size() && draw.between(0, 3) == 0) {
          output.append(ProcessOutput::kStderr, std::string_view(&err_bytes[err_appended], 1));
          ++err_appended;
        }
        if (appended == bytes.size()) {
          output.append(ProcessOutput::kStderr, std::string_view(err_bytes).substr(err_appended));
          err_appended = err_bytes.size();
          output.end_stream(ProcessOutput::kStdout);
          output.end_stream(ProcessOutput::kStderr);
          output.finish(ExitStatus{});
        }
      }
      // Consume a little.
      int claims = static_cast<int>(draw.between(0, 3));
      for (int i = 0; i < claims; ++i) {
        Piece piece;
        std::size_t cap = draw.sized(1, 1 << 20);
        bool claimed = cap_ranges ? output.claim(piece, cap, cap) : output.claim(piece, cap);
        if (!claimed) {
          output.settle();
          break;
        }
        if (piece.kind == Piece::Kind::end) {
          output.commit();
          ended = true;
          break;
        }
        std::string got = bytes_of(piece);
        if (draw.between(0, 9) == 0) {
          output.release();
          continue;
        }
        if (piece.kind == Piece::Kind::text || cap_ranges) {
          CHECK(got.size() <= std::max<std::size_t>(cap, 8));
        }
        // Every piece decodes alone: whole characters, always.
        std::string hex;
        for (unsigned char c : got.substr(0, 16)) {
          char two[4];
          std::snprintf(two, sizeof two, "%02x ", c);
          hex += two;
        }
        std::string want;
        for (unsigned char c : bytes.substr(out.size(), 16)) {
          char two[4];
          std::snprintf(two, sizeof two, "%02x ", c);
          want += two;
        }
        INFO("piece kind " << static_cast<int>(piece.kind) << " at " << out.size() << " of "
                           << bytes.size() << ", " << got.size() << " bytes [" << hex
                           << "] stream [" << want << "], memfd from " << switch_at
                           << ", appended " << appended << ", cap " << cap);
        CHECK(valid_utf8(got));
        (piece.stream == ProcessOutput::kStdout ? out : err) += got;
        output.commit();
      }
    }
    CHECK(out == bytes);
    CHECK(err == err_bytes);
    CHECK(output.waiting() == 0);
  }
}

TEST_CASE("process output: a producer and a consumer on two threads lose and double nothing",
          "[process_output]") {
  std::uint64_t seed = property_seed();
  INFO("seed " << seed << " (replay: FASTREVERT_TEST_SEED=" << seed << ")");
  auto stream = seeded_stream(seed, 8 << 20);
  const std::string& bytes = stream.bytes;
  ProcessOutput output(utf8_config(std::uint64_t{1} << 20));
  std::thread producer([&] {
    SeededRandom draw(seed + 1);
    std::size_t appended = 0;
    while (appended < bytes.size()) {
      if (output.room() == 0) {
        std::this_thread::yield();
        continue;
      }
      std::size_t size = std::min<std::size_t>(draw.sized(1, 65536), bytes.size() - appended);
      output.append(ProcessOutput::kStdout, std::string_view(bytes.data() + appended, size));
      appended += size;
    }
    output.end_stream(ProcessOutput::kStdout);
    output.end_stream(ProcessOutput::kStderr);
    output.finish(ExitStatus{});
  });
  SeededRandom draw(seed + 2);
  std::string out;
  bool valid = true;
  bool ended = false;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!ended && Clock::now() < deadline) {
    Piece piece;
    if (!output.claim(piece, draw.sized(1, 1 << 20))) {
      output.settle();
      std::this_thread::yield();
      continue;
    }
    if (piece.kind == Piece::Kind::end) {
      output.commit();
      ended = true;
      break;
    }
    if (draw.between(0, 19) == 0) {
      output.release();
      continue;
    }
    valid = valid && valid_utf8(piece.bytes);
    out += piece.bytes;
    output.commit();
  }
  producer.join();
  CHECK(ended);
  CHECK(valid);
  CHECK(out.size() == bytes.size());
  CHECK(out == bytes);
  // The producer read only while there was room: one append past it at most.
  CHECK(output.overrun() <= 65536);
}

TEST_CASE("valid_utf8 takes well-formed UTF-8 and refuses what Emacs decodes otherwise",
          "[process_output]") {
  CHECK(valid_utf8(""));
  CHECK(valid_utf8("plain ASCII, longer than eight bytes"));
  CHECK(valid_utf8("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));
  CHECK(valid_utf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF
  CHECK_FALSE(valid_utf8("\xC0\x80"));  // An overlong NUL.
  CHECK_FALSE(valid_utf8("\xE0\x80\x80"));
  CHECK_FALSE(valid_utf8("\xED\xA0\x80"));  // A surrogate.
  CHECK_FALSE(valid_utf8("\xF4\x90\x80\x80"));  // Past U+10FFFF.
  CHECK_FALSE(valid_utf8("\xF8\x88\x80\x80\x80"));
  CHECK_FALSE(valid_utf8("\xE2\x82"));  // Cut short.
  CHECK_FALSE(valid_utf8("abcdefgh\xFF"));
  CHECK_FALSE(valid_utf8("\x80"));
}
