// A non-owning reference to a callable, for a parameter that is called (or not) before the
// function it is passed to returns. std::function would copy the callable, onto the heap once its
// captures pass 16 bytes, and the live guard passes one on every hooked call.
#pragma once

#include <type_traits>
#include <utility>

namespace msprobe {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: converts from any callable, as std::function does
      : callable_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* c, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(c))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(callable_, std::forward<Args>(args)...); }

 private:
  void* callable_;
  R (*call_)(void*, Args...);
};

}  // namespace msprobe
