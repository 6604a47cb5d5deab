// Tests of the JSON to printed Lisp conversion: the text for each kind of
// value, the refusals, and the rewriting of LSP messages.  That `read' of
// the text equals `json-parse-string' is tested in Emacs itself
// (test/lisp/fastrevert-json-lisp-test.el).
#include "core/json_lisp.h"

#include <string>
#include <vector>
#include <string_view>

#include "catch_compat.h"

using namespace fastrevert;

namespace {

JsonLisp plist_style() {
  return JsonLisp{};
}

JsonLisp hash_style() {
  JsonLisp style;
  style.objects = JsonLisp::Objects::hash_table;
  style.false_form = "nil";
  return style;
}

// The printed Lisp of JSON, or "REFUSED".
std::string lisp(std::string_view json, const JsonLisp& style = plist_style()) {
  std::string out = "kept:";
  if (!json_to_lisp(json, style, out)) {
    REQUIRE(out == "kept:");
    return "REFUSED";
  }
  return out.substr(5);
}

std::string lsp_message(std::string_view body, std::string_view extra = {}) {
  return "Content-Length: " + std::to_string(body.size()) + "\r\n" + std::string(extra) + "\r\n" +
         std::string(body);
}

}  // namespace

TEST_CASE("json_lisp prints each kind of value as the Lisp json-parse-buffer makes", "[json]") {
  REQUIRE(json_lisp_available());
  CHECK(lisp("{\"a\":1,\"b\":[true,false,null]}") == "(:a 1 :b [t :json-false nil])");
  CHECK(lisp("{\"a\":{},\"b\":[]}") == "(:a () :b [])");
  CHECK(lisp("  [1, -2, 0, -0]  ") == "[1 -2 0 -0]");
  CHECK(lisp("9223372036854775807") == "9223372036854775807");
  CHECK(lisp("-9223372036854775808") == "-9223372036854775808");
  CHECK(lisp("[1.5,1e3,-2E-2,0.0,1e-320]") ==
        "[1.5 1000.0 -0.02 0.0 9.9998886718268301e-321]");
  CHECK(lisp("\"a\\\"b\\\\c\\nd\\u00e9\\u20ac\\ud83d\\ude00\"") ==
        "\"a\\\"b\\\\c\nd\\u00e9\\u20ac\\U0001f600\"");
  CHECK(lisp("\"\xc3\xa9\"") == "\"\\u00e9\"");
  CHECK(lisp("{\"x y\":1,\"a.b\":2,\"?\":3,\"\":4}") == "(:x\\ y 1 :a\\.b 2 :\\? 3 : 4)");
  CHECK(lisp("{\"a\":1,\"b\":{\"c\":null}}", hash_style()) ==
        "#s(hash-table size 2          test equal data (\"a\" 1 \"b\" "
        "#s(hash-table size 1          test equal data (\"c\" nil))))");
  CHECK(lisp("[false]", hash_style()) == "[nil]");
}

TEST_CASE("json_lisp refuses what would not read back as the same object", "[json]") {
  REQUIRE(json_lisp_available());
  CHECK(lisp("{\"a\":1,\"a\":2}") == "REFUSED");
  CHECK(lisp("{\"a\":1,\"a\":2}", hash_style()) == "REFUSED");
  CHECK(lisp("\"a\\u0000b\"") == "REFUSED");
  CHECK(lisp("{\"\xc3\xa9\":1}") == "REFUSED");
  CHECK(lisp("{\"a\\tb\":1}") == "REFUSED");
  CHECK(lisp("9223372036854775808") == "REFUSED");
  CHECK(lisp("-9223372036854775809") == "REFUSED");
  CHECK(lisp("1e400") == "REFUSED");
  CHECK(lisp("\"\\udc00\"") == "REFUSED");
  CHECK(lisp("\"\\ud800\"") == "REFUSED");
  CHECK(lisp("\"\xff\"") == "REFUSED");
  CHECK(lisp("\"\xc0\xaf\"") == "REFUSED");
  CHECK(lisp("{} x") == "REFUSED");
  CHECK(lisp("") == "REFUSED");
  CHECK(lisp("{\"a\":") == "REFUSED");
  CHECK(lisp(std::string(500, '[') + std::string(500, ']')) != "REFUSED");
  CHECK(lisp(std::string(501, '[') + std::string(501, ']')) == "REFUSED");
  // Nesting far past the limit is refused without recursion.
  CHECK(lisp(std::string(1000000, '[')) == "REFUSED");
}

TEST_CASE("lsp_bodies_to_lisp rewrites each message that converts, under its own length",
          "[json]") {
  REQUIRE(json_lisp_available());
  std::string units = lsp_message("{\"id\":1,\"result\":[1,2]}") +
                      lsp_message("{\"a\":1,\"a\":2}", "Content-Type: x\r\n") +
                      lsp_message("{\"method\":\"m\"}", "Content-Type: y\r\n");
  std::string first = std::string(kLispBodyMarker) + "(:id 1 :result [1 2])";
  std::string third = std::string(kLispBodyMarker) + "(:method \"m\")";
  CHECK(lsp_bodies_to_lisp(units, plist_style()) ==
        "Content-Length: " + std::to_string(first.size()) + "\r\n\r\n" + first +
            lsp_message("{\"a\":1,\"a\":2}", "Content-Type: x\r\n") + "Content-Length: " +
            std::to_string(third.size()) + "\r\n\r\n" + third);
  // What is not a run of whole messages stays as it is.
  std::string cut = units.substr(0, units.size() - 3);
  CHECK(lsp_bodies_to_lisp(cut, plist_style()) == cut);
  CHECK(lsp_bodies_to_lisp("no headers", plist_style()) == "no headers");
  CHECK(lsp_bodies_to_lisp("", plist_style()).empty());
}

TEST_CASE("lsp_bodies_to_files hands bodies of the threshold and more to the filer as JSON",
          "[json]") {
  std::string small = "{\"id\":1}";
  std::string large = "{\"id\":2,\"result\":\"xxxxxxxxxx\"}";
  std::string units = lsp_message(small) + lsp_message(large, "Content-Type: x\r\n");
  std::vector<std::string> filed;
  LispBodyFiler filer = [&filed](std::string_view body, std::string& name) {
    filed.emplace_back(body);
    name = "3 " + std::to_string(filed.size());
    return true;
  };
  std::string stub = std::string(kJsonFileMarker) + "3 1\n";
  CHECK(lsp_bodies_to_files(units, filer, large.size()) ==
        lsp_message(small) + "Content-Length: " + std::to_string(stub.size()) + "\r\n\r\n" + stub);
  REQUIRE(filed.size() == 1);
  CHECK(filed[0] == large);
  // A filer that refuses, and what is not a run of whole messages, leave
  // the messages as they were.
  LispBodyFiler refuser = [](std::string_view, std::string&) { return false; };
  CHECK(lsp_bodies_to_files(units, refuser, 1) == units);
  std::string cut = units.substr(0, units.size() - 3);
  CHECK(lsp_bodies_to_files(cut, filer, 1) == cut);
}

TEST_CASE("lsp_bodies_to_lisp hands bodies of the threshold and more to the filer", "[json]") {
  REQUIRE(json_lisp_available());
  std::string small = std::string(kLispBodyMarker) + "(:id 1)";
  std::string large = std::string(kLispBodyMarker) + "(:id 2 :result \"xxxxxxxxxx\")";
  std::string units = lsp_message("{\"id\":1}") + lsp_message("{\"id\":2,\"result\":\"xxxxxxxxxx\"}");
  std::vector<std::string> filed;
  LispBodyFiler filer = [&filed](std::string_view lisp, std::string& name) {
    filed.emplace_back(lisp);
    name = "7 " + std::to_string(filed.size());
    return true;
  };
  std::string stub = std::string(kLispFileMarker) + "7 1\n";
  CHECK(lsp_bodies_to_lisp(units, plist_style(), &filer, large.size()) ==
        "Content-Length: " + std::to_string(small.size()) + "\r\n\r\n" + small +
            "Content-Length: " + std::to_string(stub.size()) + "\r\n\r\n" + stub);
  REQUIRE(filed.size() == 1);
  CHECK(filed[0] == large);
  // A filer that refuses leaves the Lisp in the message.
  LispBodyFiler refuser = [](std::string_view, std::string&) { return false; };
  CHECK(lsp_bodies_to_lisp(units, plist_style(), &refuser, 1) ==
        lsp_bodies_to_lisp(units, plist_style()));
}

TEST_CASE("json_lisp labels each plist key where it first comes and refers to it after",
          "[json]") {
  REQUIRE(json_lisp_available());
  JsonLisp labelled = plist_style();
  labelled.label_keys = true;
  CHECK(lisp("{\"a\":[{\"b\":1,\"a\":2},{\"b\":{\"c\":false}}],\"x y\":null}", labelled) ==
        "(#1=:a [(#2=:b 1 #1# 2) (#2# (#3=:c :json-false))] #4=:x\\ y nil)");
  CHECK(lisp("{\"a\":1,\"a\":2}", labelled) == "REFUSED");
  // Hash tables have string keys, which stay strings of their own; the
  // symbols of their form are labelled.
  JsonLisp table = hash_style();
  table.label_keys = true;
  CHECK(lisp("[{\"a\":1},{\"a\":{}}]", table) ==
        "[#s(#1=hash-table #2=size 1          #3=test #4=equal #5=data (\"a\" 1)) "
        "#s(#1# #2# 1          #3# #4# #5# (\"a\" #s(#1# #2# 0          #3# #4# #5# ())))]");
}

TEST_CASE("lsp_bodies_to_lisp labels the keys of long bodies only", "[json]") {
  REQUIRE(json_lisp_available());
  std::string items = "[";
  while (items.size() < kLabelKeysFrom) items += "{\"label\":\"x\",\"kind\":1},";
  items.back() = ']';
  std::string units = lsp_message("{\"id\":1,\"result\":" + items + "}") +
                      lsp_message("{\"id\":2,\"result\":[{\"kind\":1},{\"kind\":2}]}");
  std::string out = lsp_bodies_to_lisp(units, plist_style());
  std::size_t second = out.find("Content-Length", 1);
  REQUIRE(second != std::string::npos);
  CHECK(out.substr(0, second).find(std::string(kLispBodyMarker) +
                                   "(#1=:id 1 #2=:result [(#3=:label \"x\" #4=:kind 1) "
                                   "(#3# \"x\" #4# 1)") != std::string::npos);
  CHECK(out.substr(second).find("(:id 2 :result [(:kind 1) (:kind 2)])") != std::string::npos);
}
