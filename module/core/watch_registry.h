// The watcher's registry: every registered name, the ids registered for it,
// and the symlinks registered through a target.
//
// What a watched file costs is mostly this registry, and a user may watch
// tens of thousands of files, so it is laid out to cost little more than the
// name itself.  A name is kept in two parts: its directory part (the text up
// to and including its last slash), kept once for every name that shares it,
// and the rest, in the name's own block (WatchedPath) after its fields, with
// its first id and the baseline shared by its ids.  Hash tables of pointers
// find the blocks, by directory part and rest and by first id, and the
// directory parts by their text; none allocates per element.  A kernel event
// names a directory and an entry of it, which are the two parts of the name
// it concerns, so the event finds the name by them, never building it whole.
// Only what few names have is kept in maps aside: the ids beyond a name's
// first, and symlink targets with their links.
//
// Engine thread only.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fastrevert {

enum class WatchMode : std::uint8_t {
  notify,  // A kernel watch on the file's directory (and its target's, for a symlink).
  poll,    // Background stat polling at the poll interval.
};

// What a stat of a registered name says about the file it names, following
// symlinks as `file-attributes' does.  Two signatures differ exactly when the
// watcher reports a change.  The mode is compared too: a chmod changes the
// ctime only at the kernel's coarse clock resolution, so a chmod in the same
// tick as the previous change would otherwise go unseen.  The flag comes last
// so that it shares the mode's padding.
struct FileSignature {
  dev_t device = 0;
  ino_t inode = 0;
  off_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  mode_t mode = 0;
  bool exists = false;

  bool operator==(const FileSignature& other) const noexcept;
  bool operator!=(const FileSignature& other) const noexcept { return !(*this == other); }
};

// Splits PATH into its directory and its last component, lexically, as
// `file-name-directory' and `file-name-nondirectory' would: "/a/b" gives
// "/a" and "b", "/b" gives "/" and "b", and "b" gives "." and "b".
std::pair<std::string_view, std::string_view> split_path(std::string_view path) noexcept;

// A hash table of pointers to elements it does not own, with open
// addressing: the slots hold the pointers themselves, so an element needs no
// link of its own, and a collision takes the next free slot.  KEY_OF gives
// an element's key; HASH hashes a key.  The slots double when the elements
// would fill more than three quarters of them and halve when they fill less
// than an eighth, so as it grows the table costs 10 to 21 bytes per element,
// about what a chained table's link and bucket cost.  A lookup that finds
// its element reads one to three slots on average, one that does not up to
// about eight.
template <typename Element, typename Key, typename KeyOf, typename Hash = std::hash<Key>>
class PointerTable {
 public:
  Element* find(const Key& key) const noexcept {
    if (slots_.empty()) return nullptr;
    for (std::size_t index = home_of(key);; index = next(index)) {
      Element* element = slots_[index];
      if (!element) return nullptr;
      if (KeyOf{}(*element) == key) return element;
    }
  }

  // Adds ELEMENT, whose key must not be in the table yet.
  void insert(Element* element) {
    if (4 * (size_ + 1) > 3 * slots_.size())
      resize(std::max<std::size_t>(kMinSlots, 2 * slots_.size()));
    place(element);
    ++size_;
  }

  // Takes ELEMENT, which must be in the table, out of it.
  void erase(Element* element) noexcept {
    std::size_t hole = home_of(KeyOf{}(*element));
    while (slots_[hole] != element) hole = next(hole);
    // Each later element of the run moves back into the hole unless that
    // would put it before its home slot, where a lookup starts.
    for (std::size_t index = next(hole); slots_[index]; index = next(index)) {
      std::size_t home = home_of(KeyOf{}(*slots_[index]));
      bool home_after_hole =
          hole <= index ? hole < home && home <= index : hole < home || home <= index;
      if (home_after_hole) continue;
      slots_[hole] = slots_[index];
      hole = index;
    }
    slots_[hole] = nullptr;
    --size_;
    if (slots_.size() > kMinSlots && size_ < slots_.size() / 8) {
      // Shrinking is an optimization: without memory for it, keep the table.
      try {
        resize(slots_.size() / 2);
      } catch (...) {
      }
    }
  }

  // Calls FN on every element.  FN must not insert or erase.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (Element* element : slots_) {
      if (element) fn(*element);
    }
  }

  std::size_t size() const noexcept { return size_; }

 private:
  static constexpr std::size_t kMinSlots = 16;

  std::size_t home_of(const Key& key) const noexcept { return Hash{}(key) & (slots_.size() - 1); }
  std::size_t next(std::size_t index) const noexcept { return (index + 1) & (slots_.size() - 1); }

  void place(Element* element) noexcept {
    std::size_t index = home_of(KeyOf{}(*element));
    while (slots_[index]) index = next(index);
    slots_[index] = element;
  }

  void resize(std::size_t slot_count) {
    std::vector<Element*> old(slot_count, nullptr);
    old.swap(slots_);
    for (Element* element : old) {
      if (element) place(element);
    }
  }

  std::vector<Element*> slots_;
  std::size_t size_ = 0;
};

// One id registered for a name.
struct RegisteredId {
  std::uint64_t id = 0;
  WatchMode mode = WatchMode::notify;
  // Whether the id has taken the name's baseline: from then on it is told
  // of every change.
  bool has_baseline = false;
};

// The directory part of registered names: a name's text up to and including
// its last slash, empty for a name without one, so that the part and the
// rest joined give the name back byte for byte.  Made only by WatchRegistry,
// as one block with the text after it, and shared by every name in it.
struct NamePrefix {
  // The names that have this part, and the part's number in the registry.
  std::uint32_t users = 0;
  std::uint32_t number = 0;
  std::size_t length = 0;

  std::string_view text() const noexcept {
    return {reinterpret_cast<const char*>(this + 1), length};
  }
};

// One registered name, shared by every id that registered it.  Made only by
// WatchRegistry, as one block with the bytes of the name after its directory
// part (WatchRegistry::name_of gives the whole), and value-initialized there,
// so that the bit-fields start false.  What only a few names have (more than
// one id, a symlink target) is kept aside by the registry, so that the block
// holds no pointer for it.  The fields are ordered so that the block has no
// padding but its tail.
struct WatchedPath {
  // The first id; its mode and baseline flag are the bit-fields below.
  std::uint64_t first_id = 0;
  // The signature every id with a baseline compares with: each sweep
  // updates all of them alike, so one copy serves them all.  Whether the
  // file exists, its device and its mode are the registry's kind number
  // baseline_kind (see WatchRegistry::set_baseline).
  std::uint64_t baseline_inode = 0;
  std::int64_t baseline_size = 0;
  std::int64_t baseline_mtime_ns = 0;
  std::int64_t baseline_ctime_ns = 0;
  std::uint32_t baseline_kind = 0;
  // Distinguishes this entry from an earlier one for the same name, so a
  // sweep started before a remove and re-add cannot update the new one.  It
  // wraps only after four billion new names, far more than a sweep lasts.
  std::uint32_t incarnation = 0;
  // The low 32 bits of the number of the first sweep started after the last
  // id registered: results of earlier sweeps cannot give an id without a
  // baseline its baseline.  Compared modulo 2^32 (see sweep_is_usable), as a
  // sweep is never four billion sweeps old.
  std::uint32_t first_usable_sweep = 0;
  // The name's directory part, by its number, and the length of the rest.
  std::uint32_t prefix_number = 0;
  std::uint32_t base_length = 0;
  // The first id's registration: whether it polls, and whether it has taken
  // the baseline (RegisteredId's mode and has_baseline).
  bool first_id_polls : 1;
  bool first_id_has_baseline : 1;
  // Whether first_id is an id (false only between the last remove and
  // erase), whether there are more ids, and whether the name was a symlink
  // with a resolved target on the last sweep (WatchRegistry::target_of).
  bool has_ids : 1;
  bool more_ids : 1;
  bool has_target : 1;
  // A symlink whose target could not be resolved is polled: no directory
  // watch can see its target appear.
  bool link_unresolved : 1;
  // Registered with contents: the directory itself is watched as well.
  bool contents : 1;
  // Whether an id watches by notification, so that the name counts among
  // the interests of its directory's kernel watch (and its target's).
  bool has_kernel_interest : 1;
  bool stat_pending : 1;
  bool stat_in_flight : 1;
  bool polled : 1;
  // Counted among the names of its directory part's repository (see
  // Watcher's repository links).
  bool in_repository : 1;

  // The name after its directory part: split_path's second half.
  std::string_view base() const noexcept {
    return {reinterpret_cast<const char*>(this + 1), base_length};
  }
  // Whether the results of sweep NUMBER can give an id its baseline.
  bool sweep_is_usable(std::uint64_t number) const noexcept {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(number) - first_usable_sweep) >= 0;
  }
};
// The fields take 62 bytes on a 64-bit system; a field added must pay for
// itself, since every watched file has this block.
static_assert(sizeof(WatchedPath) <= 64, "a watched file's block grew");

class WatchRegistry {
 public:
  WatchRegistry() = default;
  ~WatchRegistry();
  WatchRegistry(const WatchRegistry&) = delete;
  WatchRegistry& operator=(const WatchRegistry&) = delete;

  WatchedPath* find(std::string_view path) const noexcept;
  // The name ID is registered for, or null.
  WatchedPath* find_by_id(std::uint64_t id) const noexcept;
  // The registration of ID if it is one of PATH's ids.
  std::optional<RegisteredId> id_in(const WatchedPath& path, std::uint64_t id) const;
  // Whether any of PATH's ids is registered with MODE.
  bool has_id_with_mode(const WatchedPath& path, WatchMode mode) const;
  // The registered name that DIR and NAME, split as split_path splits, came
  // from; null when none.
  WatchedPath* find_in(std::string_view dir, std::string_view name) const;

  // PATH's whole name, and its directory as split_path gives it.
  std::string name_of(const WatchedPath& path) const;
  std::string_view dir_of(const WatchedPath& path) const noexcept;

  // Registers ID, which must not be registered, for PATH.  Returns the
  // name's entry and whether it is new; a new one has no other fields set.
  std::pair<WatchedPath*, bool> add(std::uint64_t id, std::string_view path, WatchMode mode);
  // Unregisters ID, one of PATH's ids.  The entry stays, even without ids,
  // until erase().
  void remove(WatchedPath& path, std::uint64_t id) noexcept;
  // Forgets PATH (and its target), which must have no ids left.
  void erase(WatchedPath* path) noexcept;

  // Makes SIGNATURE the baseline that PATH's ids compare with.
  void set_baseline(WatchedPath& path, const FileSignature& signature);
  // Whether SIGNATURE equals PATH's baseline: false exactly when the watcher
  // reports a change.
  bool baseline_matches(const WatchedPath& path, const FileSignature& signature) const noexcept;

  // Calls FN on every id of PATH.  FN may set an id's has_baseline, and
  // must not add or remove.
  template <typename Fn>
  void for_each_id(WatchedPath& path, Fn&& fn) {
    if (!path.has_ids) return;
    RegisteredId first = first_id_of(path);
    fn(first);
    path.first_id_has_baseline = first.has_baseline;
    if (!path.more_ids) return;
    for (RegisteredId& more : more_ids_of_.at(&path)) fn(more);
  }
  // Calls FN on every registered name.  FN must not add, remove or erase.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    by_name_.for_each(fn);
  }

  // Where the symlink PATH resolved on the last sweep; null when it is no
  // symlink or did not resolve.
  const std::string* target_of(const WatchedPath& path) const noexcept;
  // Sets or (with a null TARGET) clears that.
  void set_target(WatchedPath& path, const std::string* target);
  // The registered names whose target is TARGET, or NAME in DIR (split as
  // split_path splits); null when none.
  const std::vector<WatchedPath*>* links_to(const std::string& target) const;
  const std::vector<WatchedPath*>* links_to(std::string_view dir, std::string_view name) const;

  std::size_t size() const noexcept { return by_name_.size(); }
  // How many distinct directory parts the names have.
  std::size_t prefix_count() const noexcept { return by_text_.size(); }
  std::size_t id_count() const noexcept { return by_first_id_.size() + more_ids_.size(); }

 private:
  // A name as the table by name knows it: its directory part's number and
  // the rest.
  struct NameKey {
    std::uint32_t prefix_number;
    std::string_view base;
    bool operator==(const NameKey& other) const noexcept {
      return prefix_number == other.prefix_number && base == other.base;
    }
  };
  struct NameOf {
    NameKey operator()(const WatchedPath& path) const noexcept {
      return {path.prefix_number, path.base()};
    }
  };
  struct NameHash {
    std::size_t operator()(const NameKey& key) const noexcept {
      return std::hash<std::string_view>{}(key.base) ^
             static_cast<std::size_t>(key.prefix_number * 0x9E3779B97F4A7C15ull);
    }
  };
  struct TextOf {
    std::string_view operator()(const NamePrefix& prefix) const noexcept { return prefix.text(); }
  };
  struct FirstIdOf {
    std::uint64_t operator()(const WatchedPath& path) const noexcept { return path.first_id; }
  };
  // What a signature says besides the inode, the size and the times.  Few
  // distinct ones occur (a device per file system, a handful of modes), so
  // each is kept once, in kinds_, and a baseline holds its number: four
  // bytes where the values themselves take sixteen in every block.
  struct FileKind {
    dev_t device;
    mode_t mode;
    bool exists;
    bool operator==(const FileKind& other) const noexcept {
      return device == other.device && mode == other.mode && exists == other.exists;
    }
  };
  struct FileKindHash {
    std::size_t operator()(const FileKind& kind) const noexcept {
      return std::hash<std::uint64_t>{}(static_cast<std::uint64_t>(kind.device) * 31 +
                                        static_cast<std::uint64_t>(kind.mode) * 2 + kind.exists);
    }
  };
  // The table keeps an id's low bits, which a plain id would fill badly if
  // ids came in strides; multiplying spreads every bit into them.
  struct IdHash {
    std::size_t operator()(std::uint64_t id) const noexcept {
      id *= 0x9E3779B97F4A7C15ull;
      return static_cast<std::size_t>(id ^ (id >> 32));
    }
  };

  static void destroy(WatchedPath* path) noexcept;
  // The name in the directory part PREFIX (its text) with the rest BASE.
  WatchedPath* find_parts(std::string_view prefix, std::string_view base) const noexcept;
  // The name in the directory part PREFIX, if kept, with the rest BASE.
  WatchedPath* find_under(const NamePrefix* prefix, std::string_view base) const noexcept {
    return prefix ? by_name_.find({prefix->number, base}) : nullptr;
  }
  // The directory part with text PREFIX, with one more user: KNOWN, when
  // it is already kept (what by_text_ finds for PREFIX), or else a new one.
  NamePrefix* use_prefix(NamePrefix* known, std::string_view prefix);
  // Drops a user of PREFIX, and PREFIX with its last user.
  void release_prefix(NamePrefix* prefix) noexcept;
  static RegisteredId first_id_of(const WatchedPath& path) noexcept {
    return {path.first_id, path.first_id_polls ? WatchMode::poll : WatchMode::notify,
            path.first_id_has_baseline};
  }
  static void set_first_id(WatchedPath& path, const RegisteredId& registered) noexcept {
    path.first_id = registered.id;
    path.first_id_polls = registered.mode == WatchMode::poll;
    path.first_id_has_baseline = registered.has_baseline;
  }
  // The name that split_path splits into DIR and NAME, in joined_.
  const std::string& join(std::string_view dir, std::string_view name) const;

  PointerTable<WatchedPath, NameKey, NameOf, NameHash> by_name_;
  PointerTable<NamePrefix, std::string_view, TextOf> by_text_;
  // Every directory part by its number, with null for a number free again,
  // and the free numbers.
  std::vector<NamePrefix*> prefixes_;
  std::vector<std::uint32_t> free_prefix_numbers_;
  PointerTable<WatchedPath, std::uint64_t, FirstIdOf, IdHash> by_first_id_;
  // The ids beyond each name's first, and the name of each.
  std::unordered_map<const WatchedPath*, std::vector<RegisteredId>> more_ids_of_;
  std::unordered_map<std::uint64_t, WatchedPath*> more_ids_;
  // Each symlink's target, and the symlinks of each target.
  std::unordered_map<const WatchedPath*, std::string> targets_;
  std::unordered_map<std::string, std::vector<WatchedPath*>> links_;
  // Every kind a baseline has had, in the order first seen, and the number
  // of each.  They are never forgotten: there are too few to matter.
  std::vector<FileKind> kinds_;
  std::unordered_map<FileKind, std::uint32_t, FileKindHash> kind_numbers_;
  // A directory and a name, or a directory and an empty name (its directory
  // part), are joined here, so that a kernel event allocates nothing once the
  // longest name has been seen.
  mutable std::string joined_;
};

}  // namespace fastrevert
