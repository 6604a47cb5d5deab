#include "core/watch_registry.h"

#include <cstring>
#include <new>

namespace fastrevert {

bool FileSignature::operator==(const FileSignature& other) const noexcept {
  return exists == other.exists && device == other.device && inode == other.inode &&
         mode == other.mode && size == other.size && mtime_ns == other.mtime_ns &&
         ctime_ns == other.ctime_ns;
}

std::pair<std::string_view, std::string_view> split_path(std::string_view path) noexcept {
  std::size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return {".", path};
  if (slash == 0) return {"/", path.substr(1)};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

namespace {

// Where a name's directory part ends: just after its last slash, or at 0.
std::size_t prefix_length(std::string_view path) noexcept {
  std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? 0 : slash + 1;
}

}  // namespace

WatchRegistry::~WatchRegistry() {
  std::vector<WatchedPath*> all;
  all.reserve(by_name_.size());
  by_name_.for_each([&](WatchedPath& path) { all.push_back(&path); });
  for (WatchedPath* path : all) destroy(path);
  for (NamePrefix* prefix : prefixes_) {
    if (prefix) ::operator delete(prefix);
  }
}

WatchedPath* WatchRegistry::find_parts(std::string_view prefix,
                                       std::string_view base) const noexcept {
  return find_under(by_text_.find(prefix), base);
}

WatchedPath* WatchRegistry::find(std::string_view path) const noexcept {
  std::size_t length = prefix_length(path);
  return find_parts(path.substr(0, length), path.substr(length));
}

std::string WatchRegistry::name_of(const WatchedPath& path) const {
  std::string name(prefixes_[path.prefix_number]->text());
  name += path.base();
  return name;
}

std::string_view WatchRegistry::dir_of(const WatchedPath& path) const noexcept {
  // As split_path: "." without a slash, "/" when the only slash is the
  // first byte, and otherwise the text before the last slash.
  std::string_view prefix = prefixes_[path.prefix_number]->text();
  if (prefix.empty()) return ".";
  if (prefix.size() == 1) return prefix;
  return prefix.substr(0, prefix.size() - 1);
}

NamePrefix* WatchRegistry::use_prefix(NamePrefix* known, std::string_view text) {
  if (known) {
    ++known->users;
    return known;
  }
  if (free_prefix_numbers_.empty()) {
    if (prefixes_.size() >= UINT32_MAX) throw std::bad_alloc();
    prefixes_.push_back(nullptr);
    // Every number may be free at once: room for all of them keeps
    // release_prefix from allocating.
    try {
      free_prefix_numbers_.reserve(prefixes_.capacity());
    } catch (...) {
      prefixes_.pop_back();
      throw;
    }
    free_prefix_numbers_.push_back(static_cast<std::uint32_t>(prefixes_.size() - 1));
  }
  void* memory = ::operator new(sizeof(NamePrefix) + text.size());
  auto* prefix = new (memory) NamePrefix();
  prefix->length = text.size();
  std::memcpy(reinterpret_cast<char*>(prefix + 1), text.data(), text.size());
  try {
    by_text_.insert(prefix);
  } catch (...) {
    ::operator delete(prefix);
    throw;
  }
  prefix->number = free_prefix_numbers_.back();
  free_prefix_numbers_.pop_back();
  prefixes_[prefix->number] = prefix;
  prefix->users = 1;
  return prefix;
}

void WatchRegistry::release_prefix(NamePrefix* prefix) noexcept {
  if (--prefix->users != 0) return;
  by_text_.erase(prefix);
  prefixes_[prefix->number] = nullptr;
  // Within the capacity use_prefix reserved: it cannot fail.
  free_prefix_numbers_.push_back(prefix->number);
  ::operator delete(prefix);
}

WatchedPath* WatchRegistry::find_by_id(std::uint64_t id) const noexcept {
  if (WatchedPath* path = by_first_id_.find(id)) return path;
  auto it = more_ids_.find(id);
  return it == more_ids_.end() ? nullptr : it->second;
}

std::optional<RegisteredId> WatchRegistry::id_in(const WatchedPath& path, std::uint64_t id) const {
  if (!path.has_ids) return std::nullopt;
  if (path.first_id == id) return first_id_of(path);
  if (!path.more_ids) return std::nullopt;
  for (const RegisteredId& more : more_ids_of_.at(&path)) {
    if (more.id == id) return more;
  }
  return std::nullopt;
}

bool WatchRegistry::has_id_with_mode(const WatchedPath& path, WatchMode mode) const {
  if (!path.has_ids) return false;
  if (first_id_of(path).mode == mode) return true;
  if (!path.more_ids) return false;
  const auto& more = more_ids_of_.at(&path);
  return std::any_of(more.begin(), more.end(),
                     [mode](const RegisteredId& registered) { return registered.mode == mode; });
}

const std::string& WatchRegistry::join(std::string_view dir, std::string_view name) const {
  // split_path gives "/" for a name in the root; every other directory is the
  // text before the last slash.
  joined_.assign(dir);
  if (dir != "/") joined_ += '/';
  joined_ += name;
  return joined_;
}

WatchedPath* WatchRegistry::find_in(std::string_view dir, std::string_view name) const {
  // split_path gives "." for a name without a slash, as for "./name".  The
  // directory joined to an empty name is the directory part.
  if (dir == ".") {
    if (WatchedPath* path = find_parts({}, name)) return path;
  }
  return find_parts(join(dir, {}), name);
}

std::pair<WatchedPath*, bool> WatchRegistry::add(std::uint64_t id, std::string_view path,
                                                 WatchMode mode) {
  RegisteredId registered{id, mode, false};
  std::size_t length = prefix_length(path);
  std::string_view prefix_text = path.substr(0, length);
  std::string_view base = path.substr(length);
  // The directory part is looked up once, for the name and for its share.
  NamePrefix* known = by_text_.find(prefix_text);
  if (WatchedPath* existing = find_under(known, base)) {
    if (!existing->has_ids) {
      set_first_id(*existing, registered);
      by_first_id_.insert(existing);
      existing->has_ids = true;
      return {existing, false};
    }
    auto [more_it, inserted] = more_ids_.emplace(id, existing);
    try {
      more_ids_of_[existing].push_back(registered);
    } catch (...) {
      more_ids_.erase(more_it);
      throw;
    }
    existing->more_ids = true;
    return {existing, false};
  }
  if (path.size() > UINT32_MAX) throw std::bad_alloc();
  NamePrefix* prefix = use_prefix(known, prefix_text);
  WatchedPath* entry;
  try {
    void* memory = ::operator new(sizeof(WatchedPath) + base.size());
    entry = new (memory) WatchedPath();
  } catch (...) {
    release_prefix(prefix);
    throw;
  }
  entry->prefix_number = prefix->number;
  entry->base_length = static_cast<std::uint32_t>(base.size());
  std::memcpy(reinterpret_cast<char*>(entry + 1), base.data(), base.size());
  set_first_id(*entry, registered);
  entry->has_ids = true;
  try {
    by_name_.insert(entry);
  } catch (...) {
    destroy(entry);
    release_prefix(prefix);
    throw;
  }
  try {
    by_first_id_.insert(entry);
  } catch (...) {
    by_name_.erase(entry);
    destroy(entry);
    release_prefix(prefix);
    throw;
  }
  return {entry, true};
}

void WatchRegistry::remove(WatchedPath& path, std::uint64_t id) noexcept {
  if (!path.has_ids) return;
  if (path.first_id != id) {
    if (!path.more_ids) return;
    auto more_it = more_ids_of_.find(&path);
    auto& more = more_it->second;
    auto it = std::find_if(more.begin(), more.end(),
                           [id](const RegisteredId& registered) { return registered.id == id; });
    if (it == more.end()) return;
    more.erase(it);
    more_ids_.erase(id);
    if (more.empty()) {
      more_ids_of_.erase(more_it);
      path.more_ids = false;
    }
    return;
  }
  by_first_id_.erase(&path);
  if (!path.more_ids) {
    path.has_ids = false;
    return;
  }
  // The next id becomes the first.  Adding it back cannot grow the table,
  // which held one more element a moment ago and shrinks only to a quarter.
  auto more_it = more_ids_of_.find(&path);
  auto& more = more_it->second;
  set_first_id(path, more.front());
  more.erase(more.begin());
  more_ids_.erase(path.first_id);
  if (more.empty()) {
    more_ids_of_.erase(more_it);
    path.more_ids = false;
  }
  by_first_id_.insert(&path);
}

void WatchRegistry::erase(WatchedPath* path) noexcept {
  set_target(*path, nullptr);
  by_name_.erase(path);
  NamePrefix* prefix = prefixes_[path->prefix_number];
  destroy(path);
  release_prefix(prefix);
}

void WatchRegistry::set_baseline(WatchedPath& path, const FileSignature& signature) {
  FileKind kind{signature.device, signature.mode, signature.exists};
  auto [it, inserted] = kind_numbers_.emplace(kind, static_cast<std::uint32_t>(kinds_.size()));
  if (inserted) {
    try {
      if (kinds_.size() == UINT32_MAX) throw std::bad_alloc();
      kinds_.push_back(kind);
    } catch (...) {
      kind_numbers_.erase(it);
      throw;
    }
  }
  path.baseline_kind = it->second;
  path.baseline_inode = signature.inode;
  path.baseline_size = signature.size;
  path.baseline_mtime_ns = signature.mtime_ns;
  path.baseline_ctime_ns = signature.ctime_ns;
}

bool WatchRegistry::baseline_matches(const WatchedPath& path,
                                     const FileSignature& signature) const noexcept {
  // A block's baseline_kind is 0 until its first baseline, and kinds_ may
  // still be empty then; no id compares before that baseline, but a kind
  // that was never recorded matches nothing anyway.
  if (path.baseline_kind >= kinds_.size()) return false;
  return kinds_[path.baseline_kind] ==
             FileKind{signature.device, signature.mode, signature.exists} &&
         path.baseline_inode == static_cast<std::uint64_t>(signature.inode) &&
         path.baseline_size == signature.size && path.baseline_mtime_ns == signature.mtime_ns &&
         path.baseline_ctime_ns == signature.ctime_ns;
}

void WatchRegistry::destroy(WatchedPath* path) noexcept {
  path->~WatchedPath();
  ::operator delete(path);
}

const std::string* WatchRegistry::target_of(const WatchedPath& path) const noexcept {
  if (!path.has_target) return nullptr;
  return &targets_.find(&path)->second;
}

void WatchRegistry::set_target(WatchedPath& path, const std::string* target) {
  if (path.has_target) {
    auto target_it = targets_.find(&path);
    auto links_it = links_.find(target_it->second);
    auto& links = links_it->second;
    links.erase(std::remove(links.begin(), links.end(), &path), links.end());
    if (links.empty()) links_.erase(links_it);
    targets_.erase(target_it);
    path.has_target = false;
  }
  if (!target) return;
  auto [target_it, inserted] = targets_.emplace(&path, *target);
  try {
    links_[*target].push_back(&path);
  } catch (...) {
    targets_.erase(target_it);
    throw;
  }
  path.has_target = true;
}

const std::vector<WatchedPath*>* WatchRegistry::links_to(const std::string& target) const {
  auto it = links_.find(target);
  return it == links_.end() ? nullptr : &it->second;
}

const std::vector<WatchedPath*>* WatchRegistry::links_to(std::string_view dir,
                                                         std::string_view name) const {
  // Most watchers have no symlink at all; then no event needs the join.
  if (links_.empty()) return nullptr;
  return links_to(join(dir, name));
}

}  // namespace fastrevert
