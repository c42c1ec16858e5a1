// axle::compile: trace a whole function into one graph (seed Pattern 4).
//
//   auto step_fn = [&](const Tensor& data, const Tensor& target) {
//     optimizer.zero_grad();
//     Tensor loss = axle::cross_entropy((*model)(data), target);
//     loss.backward();
//     optimizer.step();
//     return loss;
//   };
//   auto compiled_step = axle::compile(step_fn, {.full_graph = true, .name = "train_step"});
//   for (auto& b : loader) Tensor loss = compiled_step(b.data.to(dev), b.target.to(dev));
//
// A call syncs pending work, traces `fn` lazily (also inside eager mode), then runs
// everything it produced as one graph named `name`, compiled once per input
// signature (shapes, dtypes, devices) and cached. With full_graph = true, reading a
// value inside `fn` (item(), to(cpu), printing, a branch on a value) throws
// axle::Error naming the read and the function. With max_different_graphs = N, a
// call that would make the function's (N+1)-th distinct graph throws, saying what
// differed from the previous one.
#pragma once
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "axle/tensor.h"

namespace axle {

struct CompileOptions {
  bool full_graph = false;
  std::string name = "compiled";
  int max_different_graphs = 0;  ///< 0: no limit
};

namespace detail {
struct CompiledState;
std::shared_ptr<CompiledState> make_compiled_state(CompileOptions o);

/// One call of a compiled function: enters the tracing context (after syncing
/// pending work); finish() runs the graph; the destructor leaves the context.
class CompiledCall {
 public:
  explicit CompiledCall(CompiledState& s);
  ~CompiledCall();
  CompiledCall(const CompiledCall&) = delete;
  CompiledCall& operator=(const CompiledCall&) = delete;
  void finish();

 private:
  CompiledState& s_;
  void* saved_;
};

/// Names the k-th tensor argument of a call for AXLE_DEBUG explanations.
void label_argument(CompiledState& s, int k, const Tensor& t);
template <class T>
void label_if_tensor(CompiledState& s, int& k, const T& arg) {
  if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) label_argument(s, k++, arg);
}
}  // namespace detail

template <class F>
class CompiledFunction {
 public:
  CompiledFunction(F fn, CompileOptions o) : fn_(std::move(fn)), state_(detail::make_compiled_state(std::move(o))) {}

  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    detail::CompiledCall call(*state_);
    int k = 0;
    (detail::label_if_tensor(*state_, k, args), ...);
    if constexpr (std::is_void_v<std::invoke_result_t<F&, Args&&...>>) {
      fn_(std::forward<Args>(args)...);
      call.finish();
    } else {
      auto out = fn_(std::forward<Args>(args)...);
      call.finish();
      return out;
    }
  }

 private:
  F fn_;
  std::shared_ptr<detail::CompiledState> state_;
};

/// Compiles `fn` (any callable over tensors) into a cached graph per input signature.
template <class F>
CompiledFunction<F> compile(F fn, CompileOptions o = {}) {
  return CompiledFunction<F>(std::move(fn), std::move(o));
}

}  // namespace axle
