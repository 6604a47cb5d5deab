// Tests of LineFramer and LspFramer: complete units only, nothing lost,
// whatever the split.
#include "core/framing.h"

#include <cctype>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "catch_compat.h"

using namespace fastrevert;

namespace {

std::string lsp_message(const std::string& body, const std::string& extra_headers = {}) {
  return "Content-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

// Splits CHUNK into LSP messages; false when it is not exactly a sequence of
// well-formed messages.  A deliberately simple reference parser.
bool parse_lsp_messages(std::string chunk, std::vector<std::string>* bodies = nullptr) {
  while (!chunk.empty()) {
    std::size_t header_end = chunk.find("\r\n\r\n");
    if (header_end == std::string::npos) return false;
    std::string headers = chunk.substr(0, header_end + 2);
    std::size_t length = std::string::npos;
    std::size_t line_start = 0;
    while (line_start < headers.size()) {
      std::size_t line_end = headers.find("\r\n", line_start);
      std::string line = headers.substr(line_start, line_end - line_start);
      std::string lower;
      for (char c : line) lower.push_back(static_cast<char>(std::tolower(c)));
      if (lower.rfind("content-length:", 0) == 0) length = std::stoul(line.substr(15));
      line_start = line_end + 2;
    }
    if (length == std::string::npos) return false;
    std::size_t body_start = header_end + 4;
    if (chunk.size() < body_start + length) return false;
    if (bodies) bodies->push_back(chunk.substr(body_start, length));
    chunk.erase(0, body_start + length);
  }
  return true;
}

// Feeds INPUT to FRAMER in the pieces that CUTS (ascending offsets) make,
// taking after every piece.  Returns every non-empty take, then the flush
// (if non-empty) as the last element.
std::vector<std::string> feed(Framer& framer, const std::string& input,
                              const std::vector<std::size_t>& cuts) {
  std::vector<std::string> delivered;
  std::size_t previous = 0;
  std::vector<std::size_t> ends = cuts;
  ends.push_back(input.size());
  for (std::size_t end : ends) {
    framer.append(std::string_view(input).substr(previous, end - previous));
    previous = end;
    std::string taken = framer.take();
    if (!taken.empty()) delivered.push_back(taken);
  }
  std::string tail = framer.flush();
  if (!tail.empty()) delivered.push_back(tail);
  return delivered;
}

std::string joined(const std::vector<std::string>& pieces) {
  std::string all;
  for (const auto& piece : pieces) all += piece;
  return all;
}

std::vector<std::size_t> every_byte(std::size_t size) {
  std::vector<std::size_t> cuts;
  for (std::size_t i = 1; i < size; ++i) cuts.push_back(i);
  return cuts;
}

}  // namespace

TEST_CASE("line framer delivers only complete lines at every split point", "[framing]") {
  const std::string input = "alpha\nbe\n\ngamma delta\nunfinished";
  for (std::size_t cut = 0; cut <= input.size(); ++cut) {
    LineFramer framer;
    std::vector<std::string> delivered = feed(framer, input, {cut});
    CHECK(joined(delivered) == input);
    for (std::size_t i = 0; i + 1 < delivered.size(); ++i) CHECK(delivered[i].back() == '\n');
    CHECK(delivered.back() == "unfinished");
  }
  LineFramer framer;
  std::vector<std::string> delivered = feed(framer, input, every_byte(input.size()));
  CHECK(delivered ==
        std::vector<std::string>{"alpha\n", "be\n", "\n", "gamma delta\n", "unfinished"});
}

TEST_CASE("line framer delivers several lines of one chunk together", "[framing]") {
  LineFramer framer;
  framer.append("one\ntwo\nthr");
  CHECK(framer.complete_size() == 8);
  CHECK(framer.take() == "one\ntwo\n");
  CHECK(framer.take().empty());
  framer.append("ee\n");
  CHECK(framer.take() == "three\n");
  CHECK(framer.pending_size() == 0);
  CHECK(framer.flush().empty());
  CHECK_FALSE(framer.broken());
}

TEST_CASE("lsp framer delivers whole messages with their headers at every split point",
          "[framing]") {
  const std::string input =
      lsp_message("{\"jsonrpc\":\"2.0\",\"id\":1}") +
      lsp_message("{\"method\":\"x\"}",
                  "Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n") +
      "content-length: 2\r\n\r\n{}" + "Content-Type: text/plain\r\nCONTENT-LENGTH:   0  \r\n\r\n" +
      lsp_message("{\"text\":\"h\xC3\xA9llo \xE2\x82\xAC\"}");
  std::vector<std::string> expected_bodies = {"{\"jsonrpc\":\"2.0\",\"id\":1}",
                                              "{\"method\":\"x\"}", "{}", "",
                                              "{\"text\":\"h\xC3\xA9llo \xE2\x82\xAC\"}"};

  for (std::size_t cut = 0; cut <= input.size(); ++cut) {
    LspFramer framer;
    std::vector<std::string> delivered = feed(framer, input, {cut});
    INFO("cut at " << cut);
    CHECK_FALSE(framer.broken());
    CHECK(joined(delivered) == input);
    std::vector<std::string> bodies;
    for (const auto& unit : delivered) CHECK(parse_lsp_messages(unit, &bodies));
    CHECK(bodies == expected_bodies);
  }

  LspFramer framer;
  std::vector<std::string> delivered = feed(framer, input, every_byte(input.size()));
  CHECK_FALSE(framer.broken());
  REQUIRE(delivered.size() == expected_bodies.size());
  for (std::size_t i = 0; i < delivered.size(); ++i) {
    std::vector<std::string> bodies;
    CHECK(parse_lsp_messages(delivered[i], &bodies));
    CHECK(bodies == std::vector<std::string>{expected_bodies[i]});
  }
}

TEST_CASE("lsp framer delivers several messages of one chunk in one unit", "[framing]") {
  LspFramer framer;
  std::string two = lsp_message("{\"a\":1}") + lsp_message("{\"b\":2}");
  framer.append(two + "Content-Length: 10\r\n\r\n{\"c\"");
  CHECK(framer.take() == two);
  CHECK(framer.pending_size() == 26);
  framer.append(":3}   ");
  CHECK(framer.take() == "Content-Length: 10\r\n\r\n{\"c\":3}   ");
}

TEST_CASE("lsp framer holds an incomplete message and flushes it at end of stream", "[framing]") {
  LspFramer framer;
  framer.append("Content-Length: 100\r\n\r\n{\"partial\":");
  CHECK(framer.take().empty());
  CHECK(framer.flush() == "Content-Length: 100\r\n\r\n{\"partial\":");
  CHECK(framer.pending_size() == 0);
  CHECK_FALSE(framer.broken());

  framer.append("Content-Len");
  CHECK(framer.take().empty());
  CHECK(framer.flush() == "Content-Len");
}

TEST_CASE("lsp framer assembles a large body from many small appends", "[framing]") {
  std::string body(5u << 20, 'b');
  std::string message = lsp_message(body);
  LspFramer framer;
  std::string delivered;
  for (std::size_t offset = 0; offset < message.size(); offset += 4096) {
    framer.append(std::string_view(message).substr(offset, 4096));
    delivered += framer.take();
    if (offset + 4096 < message.size()) CHECK(delivered.empty());
  }
  CHECK(delivered == message);
}

TEST_CASE("lsp framer breaks on malformed headers and passes every byte through raw", "[framing]") {
  struct Case {
    const char* name;
    std::string input;
  };
  const std::string good = lsp_message("{}");
  std::vector<Case> cases = {
      {"no content-length", "Content-Type: x\r\n\r\n{}"},
      {"non-numeric length", "Content-Length: 12a\r\n\r\n{}"},
      {"empty length", "Content-Length: \r\n\r\n{}"},
      {"negative length", "Content-Length: -1\r\n\r\n{}"},
      {"absurd length", "Content-Length: 99999999999999999999999\r\n\r\n{}"},
      {"length over 1 GiB", "Content-Length: 1073741825\r\n\r\n{}"},
      {"header without colon", "Content-Length 2\r\n\r\n{}"},
      {"conflicting lengths", "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}"},
      {"log line before a message", "server starting\n" + good},
  };
  for (const auto& test : cases) {
    INFO(test.name);
    LspFramer framer;
    std::string input = good + test.input + good;
    std::vector<std::string> delivered = feed(framer, input, every_byte(input.size()));
    CHECK(framer.broken());
    CHECK_FALSE(framer.error().empty());
    CHECK(joined(delivered) == input);
    // The good message before the damage still came out whole.
    CHECK(delivered.front() == good);
  }
}

TEST_CASE("lsp framer accepts a length of exactly 1 GiB without buffering it whole", "[framing]") {
  LspFramer framer;
  framer.append("Content-Length: 1073741824\r\n\r\nabc");
  CHECK_FALSE(framer.broken());
  CHECK(framer.take().empty());
}

TEST_CASE("lsp framer breaks on a header block over 64 KiB, losing nothing", "[framing]") {
  LspFramer framer;
  std::string header = "X-Padding: " + std::string(70000, 'p');
  std::string delivered;
  for (std::size_t offset = 0; offset < header.size(); offset += 1000) {
    framer.append(std::string_view(header).substr(offset, 1000));
    delivered += framer.take();
  }
  CHECK(framer.broken());
  framer.append("more raw bytes");
  delivered += framer.take();
  delivered += framer.flush();
  CHECK(delivered == header + "more raw bytes");
}

TEST_CASE("raw framer passes everything at once", "[framing]") {
  std::unique_ptr<Framer> framer = make_framer(Framing::none);
  framer->append("no newline");
  CHECK(framer->take() == "no newline");
  CHECK(framer->flush().empty());
}

TEST_CASE("a unit too long to wait for goes in pieces that join up to it", "[framing]") {
  SECTION("lines") {
    auto framer = make_framer(Framing::lines);
    framer->append("one\ntwo half ");
    // The complete line and the started one go; the framer goes on with the
    // line as if its start were still held.
    CHECK(framer->take_unfinished() == "one\ntwo half ");
    framer->append("and the rest\nthree");
    CHECK(framer->take() == "and the rest\n");
    CHECK(framer->flush() == "three");
  }
  SECTION("lsp") {
    auto framer = make_framer(Framing::lsp);
    std::string body(100, 'b');
    std::string message = lsp_message(body);
    std::string next = lsp_message("{}");
    // The header block has not ended: the unit cannot be cut yet.
    framer->append(message.substr(0, 10));
    CHECK(framer->take_unfinished().empty());
    framer->append(message.substr(10, 40));
    std::string pieces = framer->take_unfinished();
    CHECK(pieces == message.substr(0, 50));
    framer->append(message.substr(50, 30));
    pieces += framer->take_unfinished();
    framer->append(message.substr(80) + next);
    // The rest of the body ends the unit where its length says: the next
    // message is framed whole after it.
    pieces += framer->take();
    CHECK(pieces == message + next);
    CHECK_FALSE(framer->broken());
    framer->append(next);
    CHECK(framer->take() == next);
  }
}
