// The watcher's registry: every registered name, the ids registered for it,
// and the symlinks registered through a target.
//
// What a watched file costs is mostly this registry, and a user may watch
// tens of thousands of files, so it is laid out to cost little more than the
// name itself.  Each name has one block (WatchedPath) that holds the name's
// bytes after its fields, its first id, and the baseline shared by its ids.
// Two hash tables find the blocks, by name and by first id; both link their
// elements through a pointer inside the element, so neither allocates per
// element.  The directory index needs no table of its own: a kernel event
// names a directory and an entry of it, and the registered name it concerns
// is the two joined, found by name.  Only what few names have is kept in maps
// aside: the ids beyond a name's first, and symlink targets with their links.
//
// Engine thread only.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
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

// A hash table of elements it does not own, chained through the member NEXT
// of each element.  KEY_OF gives an element's key; HASH hashes a key.  The
// bucket array doubles when the elements outnumber the buckets and halves
// when they fall to an eighth, so it costs one to two pointers per element.
template <typename Element, typename Key, Element* Element::*Next, typename KeyOf,
          typename Hash = std::hash<Key>>
class IntrusiveTable {
 public:
  Element* find(const Key& key) const noexcept {
    if (buckets_.empty()) return nullptr;
    for (Element* element = buckets_[index_of(key)]; element; element = element->*Next) {
      if (KeyOf{}(*element) == key) return element;
    }
    return nullptr;
  }

  // Links ELEMENT, whose key must not be in the table yet.
  void insert(Element* element) {
    if (size_ + 1 > buckets_.size())
      resize(std::max<std::size_t>(kMinBuckets, 2 * buckets_.size()));
    Element*& head = buckets_[index_of(KeyOf{}(*element))];
    element->*Next = head;
    head = element;
    ++size_;
  }

  // Unlinks ELEMENT, which must be in the table.
  void erase(Element* element) noexcept {
    for (Element** link = &buckets_[index_of(KeyOf{}(*element))]; *link; link = &((*link)->*Next)) {
      if (*link != element) continue;
      *link = element->*Next;
      element->*Next = nullptr;
      --size_;
      break;
    }
    if (buckets_.size() > kMinBuckets && size_ < buckets_.size() / 8) {
      // Shrinking is an optimization: without memory for it, keep the table.
      try {
        resize(buckets_.size() / 2);
      } catch (...) {
      }
    }
  }

  // Calls FN on every element.  FN must not insert or erase.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (Element* head : buckets_) {
      for (Element* element = head; element;) {
        Element* next = element->*Next;
        fn(*element);
        element = next;
      }
    }
  }

  std::size_t size() const noexcept { return size_; }

 private:
  static constexpr std::size_t kMinBuckets = 16;

  std::size_t index_of(const Key& key) const noexcept {
    return Hash{}(key) & (buckets_.size() - 1);
  }

  void resize(std::size_t bucket_count) {
    std::vector<Element*> old(bucket_count, nullptr);
    old.swap(buckets_);
    for (Element* head : old) {
      for (Element* element = head; element;) {
        Element* next = element->*Next;
        Element*& new_head = buckets_[index_of(KeyOf{}(*element))];
        element->*Next = new_head;
        new_head = element;
        element = next;
      }
    }
  }

  std::vector<Element*> buckets_;
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

// One registered name, shared by every id that registered it.  Made only by
// WatchRegistry, as one block with the name's bytes after it.  What only a
// few names have (more than one id, a symlink target) is kept aside by the
// registry, so that the block holds no pointer for it.
struct WatchedPath {
  WatchedPath* next_by_name = nullptr;
  WatchedPath* next_by_first_id = nullptr;
  RegisteredId first_id;
  // The signature every id with a baseline compares with: each sweep
  // updates all of them alike, so one copy serves them all.
  FileSignature baseline;
  // Distinguishes this entry from an earlier one for the same name, so a
  // sweep started before a remove and re-add cannot update the new one.  It
  // wraps only after four billion new names, far more than a sweep lasts.
  std::uint32_t incarnation = 0;
  // The low 32 bits of the number of the first sweep started after the last
  // id registered: results of earlier sweeps cannot give an id without a
  // baseline its baseline.  Compared modulo 2^32 (see sweep_is_usable), as a
  // sweep is never four billion sweeps old.
  std::uint32_t first_usable_sweep = 0;
  std::uint32_t notify_registrations = 0;
  std::uint32_t poll_registrations = 0;
  std::uint32_t name_length = 0;
  // Whether first_id is an id (false only between the last remove and
  // erase), whether there are more ids, and whether the name was a symlink
  // with a resolved target on the last sweep (WatchRegistry::target_of).
  bool has_ids = false;
  bool more_ids = false;
  bool has_target = false;
  // A symlink whose target could not be resolved is polled: no directory
  // watch can see its target appear.
  bool link_unresolved = false;
  // Registered with contents: the directory itself is watched as well.
  bool contents = false;
  bool has_kernel_interest = false;
  bool stat_pending = false;
  bool stat_in_flight = false;
  bool polled = false;

  std::string_view name() const noexcept {
    return {reinterpret_cast<const char*>(this + 1), name_length};
  }
  // Whether the results of sweep NUMBER can give an id its baseline.
  bool sweep_is_usable(std::uint64_t number) const noexcept {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(number) - first_usable_sweep) >= 0;
  }
};

class WatchRegistry {
 public:
  WatchRegistry() = default;
  ~WatchRegistry();
  WatchRegistry(const WatchRegistry&) = delete;
  WatchRegistry& operator=(const WatchRegistry&) = delete;

  WatchedPath* find(std::string_view path) const noexcept { return by_name_.find(path); }
  // The name ID is registered for, or null.
  WatchedPath* find_by_id(std::uint64_t id) const noexcept;
  // The registration of ID, one of PATH's; null if it is not.
  RegisteredId* id_in(WatchedPath& path, std::uint64_t id);
  // The registered name that DIR and NAME, split as split_path splits, came
  // from; null when none.
  WatchedPath* find_in(std::string_view dir, std::string_view name) const;

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

  // Calls FN on every id of PATH.  FN must not add or remove.
  template <typename Fn>
  void for_each_id(WatchedPath& path, Fn&& fn) {
    if (!path.has_ids) return;
    fn(path.first_id);
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
  std::size_t id_count() const noexcept { return by_first_id_.size() + more_ids_.size(); }

 private:
  struct NameOf {
    std::string_view operator()(const WatchedPath& path) const noexcept { return path.name(); }
  };
  struct FirstIdOf {
    std::uint64_t operator()(const WatchedPath& path) const noexcept { return path.first_id.id; }
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
  // The name that split_path splits into DIR and NAME, in joined_.
  const std::string& join(std::string_view dir, std::string_view name) const;

  IntrusiveTable<WatchedPath, std::string_view, &WatchedPath::next_by_name, NameOf> by_name_;
  IntrusiveTable<WatchedPath, std::uint64_t, &WatchedPath::next_by_first_id, FirstIdOf, IdHash>
      by_first_id_;
  // The ids beyond each name's first, and the name of each.
  std::unordered_map<const WatchedPath*, std::vector<RegisteredId>> more_ids_of_;
  std::unordered_map<std::uint64_t, WatchedPath*> more_ids_;
  // Each symlink's target, and the symlinks of each target.
  std::unordered_map<const WatchedPath*, std::string> targets_;
  std::unordered_map<std::string, std::vector<WatchedPath*>> links_;
  // A directory and a name are joined here, so that a kernel event
  // allocates nothing once the longest name has been seen.
  mutable std::string joined_;
};

}  // namespace fastrevert
