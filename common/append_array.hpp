#pragma once

// A growable array of trivial values that is appended to in runs: extend() makes room for a run
// once and returns where it goes, for the caller's plain stores. std::vector's push_back checks its
// capacity and stores its end once per value, and its resize() zeroes the values it adds; for the
// few entries each of a graph's tasks appends, either costs more than the stores themselves.

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace strata {

// std::allocator, except that a value constructed without arguments is default-initialized: a
// trivial one is left unset, and growing a vector does not zero it.
template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <class U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}

  template <class U>
  void construct(U* at) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(at)) U;
  }
  template <class U, class... Args>
  void construct(U* at, Args&&... args) {
    ::new (static_cast<void*>(at)) U(std::forward<Args>(args)...);
  }
};

template <class T>
class AppendArray {
  static_assert(std::is_trivial_v<T>, "values are left unset until stored, and copied as bytes");

 public:
  // Room for `count` more values, unset until the caller stores them: they count as added at once.
  T* extend(size_t count) {
    if (storage_.size() - size_ < count) grow(size_ + count);
    T* run = storage_.data() + size_;
    size_ += count;
    return run;
  }
  // Drops the values from `size` on (a run extended for more values than the caller stored).
  void truncate(size_t size) { size_ = std::min(size, size_); }
  void reserve(size_t capacity) {
    if (capacity > storage_.size()) storage_.resize(capacity);
  }

  size_t size() const { return size_; }
  size_t capacity() const { return storage_.size(); }
  const T* data() const { return storage_.data(); }

 private:
  void grow(size_t needed) { storage_.resize(std::max(needed, 2 * storage_.size())); }

  // Every value the array has room for, set or not: its size is the capacity.
  std::vector<T, DefaultInitAllocator<T>> storage_;
  size_t size_ = 0;
};

}  // namespace strata
