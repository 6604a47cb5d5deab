// Tests of the watcher's registry on its own: names, ids, symlink targets and
// the lookups a kernel event makes.
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "core/watch_registry.h"

using fastrevert::FileSignature;
using fastrevert::RegisteredId;
using fastrevert::split_path;
using fastrevert::WatchedPath;
using fastrevert::WatchMode;
using fastrevert::WatchRegistry;

namespace {

std::set<std::uint64_t> ids_of(WatchRegistry& registry, WatchedPath& path) {
  std::set<std::uint64_t> ids;
  registry.for_each_id(path, [&](RegisteredId& registered) { ids.insert(registered.id); });
  return ids;
}

WatchMode mode_of(WatchRegistry& registry, std::uint64_t id) {
  WatchedPath* path = registry.find_by_id(id);
  REQUIRE(path != nullptr);
  std::optional<RegisteredId> registered = registry.id_in(*path, id);
  REQUIRE(registered);
  return registered->mode;
}

// Removes ID and erases its name's entry when no id is left, as the watcher
// does.
void unregister(WatchRegistry& registry, std::uint64_t id) {
  WatchedPath* path = registry.find_by_id(id);
  REQUIRE(path != nullptr);
  registry.remove(*path, id);
  if (!path->has_ids) registry.erase(path);
}

}  // namespace

TEST_CASE("registry: a registered name is found by name and by id, and holds its bytes exactly",
          "[registry]") {
  WatchRegistry registry;
  std::string name = "/home/user/project/src/a file with spaces and \xc3\xa9.txt";
  auto [path, inserted] = registry.add(7, name, WatchMode::notify);
  CHECK(inserted);
  CHECK(registry.name_of(*path) == name);
  CHECK(registry.find(name) == path);
  CHECK(registry.find("/home/user/project/src/other.txt") == nullptr);
  CHECK(registry.find_by_id(7) == path);
  CHECK(mode_of(registry, 7) == WatchMode::notify);
  CHECK(registry.find_by_id(8) == nullptr);
  CHECK_FALSE(registry.id_in(*path, 8));
  CHECK(registry.size() == 1);
  CHECK(registry.id_count() == 1);
}

TEST_CASE(
    "registry: many ids of one name share its entry, and removing any of them keeps the others",
    "[registry]") {
  WatchRegistry registry;
  WatchedPath* path = registry.add(1, "/d/f", WatchMode::notify).first;
  CHECK_FALSE(registry.add(2, "/d/f", WatchMode::poll).second);
  CHECK_FALSE(registry.add(3, "/d/f", WatchMode::notify).second);
  CHECK(registry.size() == 1);
  CHECK(registry.id_count() == 3);
  CHECK(ids_of(registry, *path) == std::set<std::uint64_t>{1, 2, 3});
  CHECK(mode_of(registry, 2) == WatchMode::poll);
  CHECK(mode_of(registry, 3) == WatchMode::notify);

  SECTION("the first id goes and the second takes its place") {
    registry.remove(*path, 1);
    CHECK(registry.find_by_id(1) == nullptr);
    CHECK(ids_of(registry, *path) == std::set<std::uint64_t>{2, 3});
    CHECK(registry.find_by_id(2) == path);
    CHECK(mode_of(registry, 2) == WatchMode::poll);
    CHECK(registry.find_by_id(3) == path);
    CHECK(registry.id_count() == 2);
  }
  SECTION("a later id goes") {
    registry.remove(*path, 3);
    CHECK(ids_of(registry, *path) == std::set<std::uint64_t>{1, 2});
    CHECK(registry.find_by_id(3) == nullptr);
  }
  SECTION("an id's baseline flag stays with it when the first id goes") {
    registry.for_each_id(*path, [](RegisteredId& registered) {
      if (registered.id == 2) registered.has_baseline = true;
    });
    registry.remove(*path, 1);
    CHECK(registry.id_in(*path, 2)->has_baseline);
    CHECK_FALSE(registry.id_in(*path, 3)->has_baseline);
  }
  SECTION("the last id leaves the entry without ids until it is erased") {
    registry.remove(*path, 2);
    registry.remove(*path, 1);
    CHECK(path->has_ids);
    registry.remove(*path, 3);
    CHECK_FALSE(path->has_ids);
    CHECK(ids_of(registry, *path).empty());
    CHECK(registry.find_by_id(3) == nullptr);
    registry.erase(path);
    CHECK(registry.find("/d/f") == nullptr);
    CHECK(registry.size() == 0);
    CHECK(registry.id_count() == 0);
  }
}

TEST_CASE("registry: a renamed file is a remove and an add: the old name is gone, the new found",
          "[registry]") {
  WatchRegistry registry;
  registry.add(1, "/d/old", WatchMode::notify);
  unregister(registry, 1);
  WatchedPath* renamed = registry.add(1, "/d/new", WatchMode::notify).first;
  CHECK(registry.find("/d/old") == nullptr);
  CHECK(registry.find("/d/new") == renamed);
  CHECK(registry.find_by_id(1) == renamed);
}

TEST_CASE("registry: ten thousand names and ids stay found as the tables grow and shrink",
          "[registry]") {
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
    REQUIRE(registry.name_of(*registry.find_by_id(i)) == name_of(i));
  }
  // Removing all but every hundredth shrinks the tables; the rest stay found.
  for (int i = 0; i < 10000; ++i) {
    if (i % 100 != 0) unregister(registry, i);
  }
  CHECK(registry.size() == 100);
  for (int i = 0; i < 10000; ++i) {
    CHECK((registry.find(name_of(i)) != nullptr) == (i % 100 == 0));
    CHECK((registry.find_by_id(i) != nullptr) == (i % 100 == 0));
  }
}

namespace {

struct Item {
  int key;
};
struct KeyOfItem {
  int operator()(const Item& item) const noexcept { return item.key; }
};
// Sends every key to one of the last four slots of the smallest table, so
// that runs collide, wrap around the end and cross one another.
struct CrowdingHash {
  std::size_t operator()(int key) const noexcept { return 12 + key % 4; }
};

}  // namespace

TEST_CASE("registry: a pointer table finds exactly its elements through colliding runs that wrap",
          "[registry]") {
  fastrevert::PointerTable<Item, int, KeyOfItem, CrowdingHash> table;
  std::vector<Item> items(12);
  for (int key = 0; key < 12; ++key) items[key].key = key;
  std::set<int> present;
  auto check_all = [&] {
    CHECK(table.size() == present.size());
    for (const Item& item : items) {
      CHECK((table.find(item.key) == &item) == (present.count(item.key) != 0));
    }
    CHECK(table.find(99) == nullptr);
  };
  // Twelve elements fit the smallest table.  Toggling keys in a fixed
  // pseudo-random order puts every kind of element at the wrap, and erases
  // from every place in a run.
  std::mt19937 random(20261201);
  for (int step = 0; step < 3000; ++step) {
    int key = static_cast<int>(random() % items.size());
    if (present.erase(key) != 0) {
      table.erase(&items[key]);
    } else {
      present.insert(key);
      table.insert(&items[key]);
    }
    check_all();
  }
}

TEST_CASE(
    "registry: a kernel event's directory and name lead to the registered name they split from",
    "[registry]") {
  WatchRegistry registry;
  WatchedPath* nested = registry.add(1, "/a/b/c.txt", WatchMode::notify).first;
  WatchedPath* in_root = registry.add(2, "/top", WatchMode::notify).first;
  WatchedPath* relative = registry.add(3, "bare", WatchMode::notify).first;
  WatchedPath* doubled = registry.add(4, "/a//d", WatchMode::notify).first;
  for (WatchedPath* path : {nested, in_root, relative, doubled}) {
    std::string whole = registry.name_of(*path);
    auto [dir, name] = split_path(whole);
    CHECK(registry.find_in(dir, name) == path);
    CHECK(registry.dir_of(*path) == dir);
  }
  CHECK(split_path("/a/b/c.txt") ==
        std::make_pair(std::string_view("/a/b"), std::string_view("c.txt")));
  CHECK(split_path("/top") == std::make_pair(std::string_view("/"), std::string_view("top")));
  CHECK(split_path("bare") == std::make_pair(std::string_view("."), std::string_view("bare")));
  CHECK(registry.find_in("/a/b", "other") == nullptr);
  CHECK(registry.find_in("/a", "b") == nullptr);
}

TEST_CASE(
    "registry: names that differ only in how their directory is written stay apart, byte for byte",
    "[registry]") {
  WatchRegistry registry;
  // One last component under directory parts a dot or a slash apart, and
  // names whose last component is empty or whose directory part is.
  std::vector<std::string> names = {"bare",  "./bare", "/bare", "//bare", "/a/b", "/a/b/",
                                    "/a//b", "a/b",    "/",     "",       "/a/",  "/a"};
  std::uint64_t id = 1;
  std::vector<WatchedPath*> paths;
  for (const std::string& name : names) {
    auto [path, inserted] = registry.add(id++, name, WatchMode::poll);
    CHECK(inserted);
    paths.push_back(path);
  }
  REQUIRE(registry.size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    CHECK(registry.name_of(*paths[i]) == names[i]);
    CHECK(registry.find(names[i]) == paths[i]);
    CHECK(registry.dir_of(*paths[i]) == split_path(names[i]).first);
    CHECK(paths[i]->base() == split_path(names[i]).second);
  }
}

TEST_CASE("registry: the names of one directory keep its text once, until the last of them goes",
          "[registry]") {
  WatchRegistry registry;
  for (int i = 0; i < 100; ++i) {
    registry.add(i, "/project/src/file" + std::to_string(i) + ".c", WatchMode::notify);
  }
  CHECK(registry.prefix_count() == 1);
  registry.add(100, "/project/include/file.h", WatchMode::notify);
  CHECK(registry.prefix_count() == 2);
  for (int i = 0; i < 99; ++i) unregister(registry, i);
  CHECK(registry.prefix_count() == 2);
  WatchedPath* last = registry.find("/project/src/file99.c");
  REQUIRE(last != nullptr);
  CHECK(registry.find_in("/project/src", "file99.c") == last);
  unregister(registry, 99);
  CHECK(registry.prefix_count() == 1);
  CHECK(registry.find_in("/project/src", "file99.c") == nullptr);
  // The directory comes back with a new name, under a number used before.
  WatchedPath* again = registry.add(101, "/project/src/new.c", WatchMode::notify).first;
  CHECK(registry.prefix_count() == 2);
  CHECK(registry.name_of(*again) == "/project/src/new.c");
  CHECK(registry.find_in("/project/src", "new.c") == again);
  CHECK(registry.name_of(*registry.find_by_id(100)) == "/project/include/file.h");
}

TEST_CASE("registry: symlinks are found through their target until it changes or they are erased",
          "[registry]") {
  WatchRegistry registry;
  WatchedPath* first = registry.add(1, "/links/one", WatchMode::notify).first;
  WatchedPath* second = registry.add(2, "/links/two", WatchMode::notify).first;
  CHECK(registry.target_of(*first) == nullptr);
  CHECK(registry.links_to("/data/target") == nullptr);
  std::string target = "/data/target";
  registry.set_target(*first, &target);
  registry.set_target(*second, &target);
  REQUIRE(registry.target_of(*first) != nullptr);
  CHECK(*registry.target_of(*first) == target);
  REQUIRE(registry.links_to(target) != nullptr);
  CHECK(*registry.links_to(target) == std::vector<WatchedPath*>{first, second});
  // A kernel event names the target's directory and its entry there.
  REQUIRE(registry.links_to("/data", "target") != nullptr);
  CHECK(*registry.links_to("/data", "target") == std::vector<WatchedPath*>{first, second});
  CHECK(registry.links_to("/data", "other") == nullptr);

  // A link retargeted leaves its old target's links.
  std::string elsewhere = "/data/elsewhere";
  registry.set_target(*first, &elsewhere);
  CHECK(*registry.target_of(*first) == elsewhere);
  CHECK(*registry.links_to(target) == std::vector<WatchedPath*>{second});
  CHECK(*registry.links_to(elsewhere) == std::vector<WatchedPath*>{first});

  // One that is no symlink any more has no target.
  registry.set_target(*first, nullptr);
  CHECK(registry.target_of(*first) == nullptr);
  CHECK(registry.links_to(elsewhere) == nullptr);

  // Erasing a link's entry takes it out of its target's links.
  unregister(registry, 2);
  CHECK(registry.links_to(target) == nullptr);
  CHECK(registry.find("/links/two") == nullptr);
}

TEST_CASE("registry: sweep numbers are compared modulo 2^32, so the stored low bits never misorder",
          "[registry]") {
  WatchRegistry registry;
  WatchedPath* path = registry.add(1, "/d/f", WatchMode::notify).first;
  path->first_usable_sweep = 0xFFFFFFFFu;
  CHECK_FALSE(path->sweep_is_usable(0x1FFFFFFFEull));
  CHECK(path->sweep_is_usable(0x1FFFFFFFFull));
  CHECK(path->sweep_is_usable(0x200000000ull));
  CHECK(path->sweep_is_usable(0x200000005ull));
}

TEST_CASE("registry: a baseline differs from a signature that differs in any one field",
          "[registry]") {
  WatchRegistry registry;
  WatchedPath* path = registry.add(1, "/d/f", WatchMode::notify).first;
  WatchedPath* other = registry.add(2, "/d/g", WatchMode::notify).first;
  FileSignature recorded;
  recorded.exists = true;
  recorded.device = 0x10302;
  recorded.inode = 4242;
  recorded.size = 100;
  recorded.mtime_ns = 1700000000123456789;
  recorded.ctime_ns = 1700000000987654321;
  recorded.mode = 0100644;
  registry.set_baseline(*path, recorded);
  CHECK(registry.baseline_matches(*path, recorded));

  // Each variant changes one field only, as a chmod in the same clock tick as
  // the last write changes only the mode, or a file copied over from another
  // file system with the same times changes only the device.
  auto differs = [&](auto change) {
    FileSignature changed = recorded;
    change(changed);
    return !registry.baseline_matches(*path, changed);
  };
  CHECK(differs([](FileSignature& s) { s.exists = false; }));
  CHECK(differs([](FileSignature& s) { s.device = 0x10303; }));
  CHECK(differs([](FileSignature& s) { s.device = ~dev_t{0}; }));
  CHECK(differs([](FileSignature& s) { s.inode = 4243; }));
  CHECK(differs([](FileSignature& s) { s.inode = ino_t{4242} | (ino_t{1} << 40); }));
  CHECK(differs([](FileSignature& s) { s.size = 101; }));
  CHECK(differs([](FileSignature& s) { s.size = off_t{100} | (off_t{1} << 40); }));
  CHECK(differs([](FileSignature& s) { s.mtime_ns += 1; }));
  CHECK(differs([](FileSignature& s) { s.ctime_ns += 1; }));
  CHECK(differs([](FileSignature& s) { s.mode = 0100600; }));
  CHECK(differs([](FileSignature& s) { s.mode = 0120644; }));

  // Another name's baseline, with another device and mode, changes nothing
  // for this one, and the two stay apart.
  FileSignature elsewhere = recorded;
  elsewhere.device = 0x803;
  elsewhere.mode = 0100755;
  registry.set_baseline(*other, elsewhere);
  CHECK(registry.baseline_matches(*path, recorded));
  CHECK(registry.baseline_matches(*other, elsewhere));
  CHECK_FALSE(registry.baseline_matches(*path, elsewhere));
  CHECK_FALSE(registry.baseline_matches(*other, recorded));

  // A file that is gone has a baseline too, and its coming back differs.
  registry.set_baseline(*path, FileSignature{});
  CHECK(registry.baseline_matches(*path, FileSignature{}));
  CHECK_FALSE(registry.baseline_matches(*path, recorded));
}

TEST_CASE("registry: each id keeps its mode and baseline flag, the first one's too",
          "[registry]") {
  WatchRegistry registry;
  WatchedPath* path = registry.add(1, "/d/f", WatchMode::poll).first;
  CHECK(registry.has_id_with_mode(*path, WatchMode::poll));
  CHECK_FALSE(registry.has_id_with_mode(*path, WatchMode::notify));
  registry.add(2, "/d/f", WatchMode::notify);
  CHECK(registry.has_id_with_mode(*path, WatchMode::notify));
  CHECK_FALSE(registry.id_in(*path, 1)->has_baseline);

  registry.for_each_id(*path, [](RegisteredId& registered) {
    if (registered.id == 1) registered.has_baseline = true;
  });
  CHECK(registry.id_in(*path, 1)->has_baseline);
  CHECK(registry.id_in(*path, 1)->mode == WatchMode::poll);
  CHECK_FALSE(registry.id_in(*path, 2)->has_baseline);

  // The first id going leaves only the notifying one.
  registry.remove(*path, 1);
  CHECK_FALSE(registry.has_id_with_mode(*path, WatchMode::poll));
  CHECK(registry.has_id_with_mode(*path, WatchMode::notify));
  registry.remove(*path, 2);
  CHECK_FALSE(registry.has_id_with_mode(*path, WatchMode::notify));
}
