// Seed Pattern 6: eager mode for debugging, with a compiled hot path.
// Every op on the xla device runs at once (a cached one-op graph), so values can be
// printed anywhere; the compiled function still runs as one graph.
//
//   build/bin/example_06_eager_mode
#include <cstdio>

#include "axle/axle.h"

using namespace axle;

int main() {
  axle::experimental::eager_mode(true);  // all xla ops now execute eagerly

  manual_seed(0);
  Device device = axle::device();
  auto fc1 = std::make_shared<nn::Linear>(4, 8), fc2 = std::make_shared<nn::Linear>(8, 3);
  auto model = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{fc1, std::make_shared<nn::ReLU>(), fc2});
  model->to(device);
  Tensor x = randn({2, 4}).to(device);

  // Debugging: inspect intermediate values as they are computed.
  Tensor hidden = relu((*fc1)(x));
  std::printf("hidden activations:\n%s\n", hidden.str().c_str());

  // Mixed: eager globally, compile() for the hot path.
  auto compiled_fn = axle::compile([&](const Tensor& in) { return softmax((*model)(in), 1); }, {.name = "forward"});
  Tensor probs = compiled_fn(x);
  std::printf("probabilities:\n%s\n%s\n", probs.str().c_str(), metrics::short_report().c_str());

  // The examples run as tests, so each checks what its pattern promises. Here: the compiled
  // function is one graph, compiled on its first call and reused on the next; it computes
  // what the eager ops compute (each row of probabilities sums to 1, as its eager softmax).
  const int64_t compiles = metrics::counter_value("UncachedCompile");
  Tensor again = compiled_fn(x);
  const bool reused = metrics::counter_value("UncachedCompile") == compiles;
  const double err = amax(abs(again - softmax((*model)(x), 1))).item();
  const double row_err = amax(abs(sum(probs, {1}) - 1.0)).item();
  const bool ok = reused && err < 1e-6 && row_err < 1e-6;
  std::printf("%s: recompiled %s, |compiled - eager| %.2g, |row sum - 1| %.2g\n", ok ? "PASS" : "FAIL",
              reused ? "no" : "yes", err, row_err);
  return ok ? 0 : 1;
}
