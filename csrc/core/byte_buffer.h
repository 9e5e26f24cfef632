// A growable byte buffer whose growth leaves the new bytes as they are: a reader's buffer grows
// just before read(2) fills it, and zeroing it first was 4 % of `check`'s time on a folder of
// small dump files (a std::string's resize writes every new byte).
#pragma once

#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace msprobe {

template <typename T>
class DefaultInitAllocator : public std::allocator<T> {
 public:
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() noexcept = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>& other) noexcept : std::allocator<T>(other) {}

  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialized: a char keeps what memory held
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using ByteBuffer = std::vector<char, DefaultInitAllocator<char>>;

}  // namespace msprobe
