// optimization_barrier (the identity, identity gradients) against PyTorch 2.x's identity
// (rows: tests/golden/ops_barrier.py; harness: tests/support/golden_ops.h).
#include "golden_ops.h"

using namespace axle;

AXLE_GOLDEN_ROWS(Barrier, "golden_ops_barrier.safetensors",
  {"barrier_identity", [](const In& x) { return Out{optimization_barrier({x[0]})[0]}; }},
  {"barrier_two_outputs", [](const In& x) { return Out(optimization_barrier({x[0], x[1]})); }},
  {"barrier_then_mul", [](const In& x) {
     std::vector<Tensor> y = optimization_barrier({x[0], x[1]});
     return Out{mul(y[0], y[1])};
   }},
  {"barrier_of_transposed", [](const In& x) { return Out{mul(optimization_barrier({x[0].t()})[0], 2.0)}; }},
  {"barrier_special", [](const In& x) { return Out{optimization_barrier({x[0]})[0]}; }},
  {"barrier_int64", [](const In& x) { return Out{optimization_barrier({x[0]})[0]}; }},
  {"barrier_empty", [](const In& x) { return Out{optimization_barrier({x[0]})[0]}; }})
