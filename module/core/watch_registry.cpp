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

WatchRegistry::~WatchRegistry() {
  std::vector<WatchedPath*> all;
  all.reserve(paths_.size());
  paths_.for_each([&](WatchedPath& path) { all.push_back(&path); });
  for (WatchedPath* path : all) {
    for (WatchedId* node = path->first_id.next_of_path; node;) {
      WatchedId* next = node->next_of_path;
      delete node;
      node = next;
    }
    destroy(path);
  }
}

WatchedPath* WatchRegistry::find_in(std::string_view dir, std::string_view name) const {
  // split_path gives "." for a name without a slash and "/" for one in the
  // root; every other directory is the text before the last slash.
  if (dir == ".") {
    if (WatchedPath* path = find(name)) return path;
  }
  joined_.assign(dir);
  if (dir != "/") joined_ += '/';
  joined_ += name;
  return find(joined_);
}

std::pair<WatchedPath*, bool> WatchRegistry::add(std::uint64_t id, std::string_view path,
                                                 WatchMode mode) {
  if (WatchedPath* existing = find(path)) {
    if (unused(*existing)) {
      existing->first_id = WatchedId{};
      existing->first_id.path = existing;
      existing->first_id.id = id;
      existing->first_id.mode = mode;
      ids_.insert(&existing->first_id);
      return {existing, false};
    }
    auto node = std::make_unique<WatchedId>();
    node->path = existing;
    node->id = id;
    node->mode = mode;
    ids_.insert(node.get());
    // The new id goes second, so that the first stays where it is.
    node->next_of_path = existing->first_id.next_of_path;
    existing->first_id.next_of_path = node.release();
    return {existing, false};
  }
  if (path.size() > UINT32_MAX) throw std::bad_alloc();
  void* memory = ::operator new(sizeof(WatchedPath) + path.size());
  auto* entry = new (memory) WatchedPath();
  entry->name_length = static_cast<std::uint32_t>(path.size());
  std::memcpy(reinterpret_cast<char*>(entry + 1), path.data(), path.size());
  entry->first_id.path = entry;
  entry->first_id.id = id;
  entry->first_id.mode = mode;
  try {
    paths_.insert(entry);
  } catch (...) {
    destroy(entry);
    throw;
  }
  try {
    ids_.insert(&entry->first_id);
  } catch (...) {
    paths_.erase(entry);
    destroy(entry);
    throw;
  }
  return {entry, true};
}

void WatchRegistry::remove(WatchedId* node) noexcept {
  WatchedPath& path = *node->path;
  ids_.erase(node);
  if (node != &path.first_id) {
    WatchedId** link = &path.first_id.next_of_path;
    while (*link != node) link = &(*link)->next_of_path;
    *link = node->next_of_path;
    delete node;
    return;
  }
  WatchedId* second = path.first_id.next_of_path;
  if (!second) {
    path.first_id = WatchedId{};
    return;
  }
  // The second id moves into the block, so that ids beyond the first stay
  // the only ones allocated on their own.  Re-linking it cannot allocate:
  // the table held it a moment ago.
  ids_.erase(second);
  path.first_id = *second;
  path.first_id.next_in_table = nullptr;
  path.first_id.path = &path;
  delete second;
  ids_.insert(&path.first_id);
}

void WatchRegistry::erase(WatchedPath* path) noexcept {
  if (path->target) drop_link(*path->target, path);
  paths_.erase(path);
  destroy(path);
}

void WatchRegistry::destroy(WatchedPath* path) noexcept {
  path->~WatchedPath();
  ::operator delete(path);
}

void WatchRegistry::add_link(const std::string& target, WatchedPath* link) {
  auto& links = links_[target];
  if (std::find(links.begin(), links.end(), link) == links.end()) links.push_back(link);
}

void WatchRegistry::drop_link(const std::string& target, WatchedPath* link) noexcept {
  auto it = links_.find(target);
  if (it == links_.end()) return;
  auto& links = it->second;
  links.erase(std::remove(links.begin(), links.end(), link), links.end());
  if (links.empty()) links_.erase(it);
}

const std::vector<WatchedPath*>* WatchRegistry::links_to(const std::string& target) const {
  auto it = links_.find(target);
  return it == links_.end() ? nullptr : &it->second;
}

}  // namespace fastrevert
