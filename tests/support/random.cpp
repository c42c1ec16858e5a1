#include "random.h"

#include <random>

namespace axle::test {

std::vector<float> rand_vec(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

Tensor rnd(const Shape& s, uint32_t seed, double lo, double hi) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (float& x : v) x = float(u(g));
  return from_vector(v, s);
}

}  // namespace axle::test
