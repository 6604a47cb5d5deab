// Tests of the watcher's registry on its own: names, ids, symlink targets and
// the lookups a kernel event makes.
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "core/watch_registry.h"

using fastrevert::split_path;
using fastrevert::WatchedId;
using fastrevert::WatchedPath;
using fastrevert::WatchMode;
using fastrevert::WatchRegistry;

namespace {

std::set<std::uint64_t> ids_of(WatchedPath& path) {
  std::set<std::uint64_t> ids;
  WatchRegistry::for_each_id(path, [&](WatchedId& node) { ids.insert(node.id); });
  return ids;
}

// Removes ID and erases its name's entry when no id is left, as the watcher
// does.
void unregister(WatchRegistry& registry, std::uint64_t id) {
  WatchedId* node = registry.find_id(id);
  REQUIRE(node != nullptr);
  WatchedPath* path = node->path;
  registry.remove(node);
  if (WatchRegistry::unused(*path)) registry.erase(path);
}

}  // namespace

TEST_CASE("a registered name is found by name and by id, and holds its bytes exactly",
          "[registry]") {
  WatchRegistry registry;
  std::string name = "/home/user/project/src/a file with spaces and \xc3\xa9.txt";
  auto [path, inserted] = registry.add(7, name, WatchMode::notify);
  CHECK(inserted);
  CHECK(path->name() == name);
  CHECK(registry.find(name) == path);
  CHECK(registry.find("/home/user/project/src/other.txt") == nullptr);
  REQUIRE(registry.find_id(7) != nullptr);
  CHECK(registry.find_id(7)->path == path);
  CHECK(registry.find_id(7)->mode == WatchMode::notify);
  CHECK(registry.find_id(8) == nullptr);
  CHECK(registry.size() == 1);
  CHECK(registry.id_count() == 1);
}

TEST_CASE("many ids of one name share its entry, and removing any of them keeps the others",
          "[registry]") {
  WatchRegistry registry;
  WatchedPath* path = registry.add(1, "/d/f", WatchMode::notify).first;
  CHECK_FALSE(registry.add(2, "/d/f", WatchMode::poll).second);
  CHECK_FALSE(registry.add(3, "/d/f", WatchMode::notify).second);
  CHECK(registry.size() == 1);
  CHECK(ids_of(*path) == std::set<std::uint64_t>{1, 2, 3});
  CHECK(registry.find_id(2)->mode == WatchMode::poll);

  SECTION("the first id goes and the second takes its place") {
    registry.remove(registry.find_id(1));
    CHECK(registry.find_id(1) == nullptr);
    CHECK(ids_of(*path) == std::set<std::uint64_t>{2, 3});
    REQUIRE(registry.find_id(2) != nullptr);
    CHECK(registry.find_id(2)->path == path);
    CHECK(registry.find_id(2)->mode == WatchMode::poll);
    CHECK(registry.find_id(3)->path == path);
  }
  SECTION("a later id goes") {
    registry.remove(registry.find_id(3));
    CHECK(ids_of(*path) == std::set<std::uint64_t>{1, 2});
    CHECK(registry.find_id(3) == nullptr);
  }
  SECTION("the last id leaves the entry unused until it is erased") {
    registry.remove(registry.find_id(2));
    registry.remove(registry.find_id(1));
    CHECK_FALSE(WatchRegistry::unused(*path));
    registry.remove(registry.find_id(3));
    CHECK(WatchRegistry::unused(*path));
    CHECK(ids_of(*path).empty());
    registry.erase(path);
    CHECK(registry.find("/d/f") == nullptr);
    CHECK(registry.size() == 0);
    CHECK(registry.id_count() == 0);
  }
}

TEST_CASE("a renamed file is a remove and an add: the old name is gone, the new found",
          "[registry]") {
  WatchRegistry registry;
  registry.add(1, "/d/old", WatchMode::notify);
  unregister(registry, 1);
  WatchedPath* renamed = registry.add(1, "/d/new", WatchMode::notify).first;
  CHECK(registry.find("/d/old") == nullptr);
  CHECK(registry.find("/d/new") == renamed);
  CHECK(registry.find_id(1)->path == renamed);
}

TEST_CASE("ten thousand names and ids stay found as the tables grow and shrink", "[registry]") {
  WatchRegistry registry;
  auto name_of = [](int i) {
    return "/dir" + std::to_string(i % 10) + "/file" + std::to_string(i);
  };
  for (int i = 0; i < 10000; ++i) registry.add(i, name_of(i), WatchMode::notify);
  CHECK(registry.size() == 10000);
  int visited = 0;
  registry.for_each([&](WatchedPath&) { ++visited; });
  CHECK(visited == 10000);
  for (int i = 0; i < 10000; ++i) {
    REQUIRE(registry.find(name_of(i)) != nullptr);
    REQUIRE(registry.find_id(i)->path->name() == name_of(i));
  }
  // Removing all but every hundredth shrinks the tables; the rest stay found.
  for (int i = 0; i < 10000; ++i) {
    if (i % 100 != 0) unregister(registry, i);
  }
  CHECK(registry.size() == 100);
  for (int i = 0; i < 10000; ++i) {
    CHECK((registry.find(name_of(i)) != nullptr) == (i % 100 == 0));
    CHECK((registry.find_id(i) != nullptr) == (i % 100 == 0));
  }
}

TEST_CASE("a kernel event's directory and name lead to the registered name they split from",
          "[registry]") {
  WatchRegistry registry;
  WatchedPath* nested = registry.add(1, "/a/b/c.txt", WatchMode::notify).first;
  WatchedPath* in_root = registry.add(2, "/top", WatchMode::notify).first;
  WatchedPath* relative = registry.add(3, "bare", WatchMode::notify).first;
  WatchedPath* doubled = registry.add(4, "/a//d", WatchMode::notify).first;
  for (WatchedPath* path : {nested, in_root, relative, doubled}) {
    auto [dir, name] = split_path(path->name());
    CHECK(registry.find_in(dir, name) == path);
  }
  CHECK(split_path("/a/b/c.txt") ==
        std::make_pair(std::string_view("/a/b"), std::string_view("c.txt")));
  CHECK(split_path("/top") == std::make_pair(std::string_view("/"), std::string_view("top")));
  CHECK(split_path("bare") == std::make_pair(std::string_view("."), std::string_view("bare")));
  CHECK(registry.find_in("/a/b", "other") == nullptr);
  CHECK(registry.find_in("/a", "b") == nullptr);
}

TEST_CASE("symlinks are found through their target until dropped or erased", "[registry]") {
  WatchRegistry registry;
  WatchedPath* first = registry.add(1, "/links/one", WatchMode::notify).first;
  WatchedPath* second = registry.add(2, "/links/two", WatchMode::notify).first;
  CHECK(registry.links_to("/data/target") == nullptr);
  registry.add_link("/data/target", first);
  registry.add_link("/data/target", second);
  registry.add_link("/data/target", first);
  REQUIRE(registry.links_to("/data/target") != nullptr);
  CHECK(*registry.links_to("/data/target") == std::vector<WatchedPath*>{first, second});

  registry.drop_link("/data/target", first);
  CHECK(*registry.links_to("/data/target") == std::vector<WatchedPath*>{second});

  // Erasing a link's entry takes it out of its target's links.
  second->target = std::make_unique<std::string>("/data/target");
  unregister(registry, 2);
  CHECK(registry.links_to("/data/target") == nullptr);
  CHECK(registry.find("/links/two") == nullptr);
}
