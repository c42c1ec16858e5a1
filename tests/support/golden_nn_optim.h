// Shared by test_nn.cpp and test_optim.cpp: PyTorch 1.13 golden values
// (tests/golden/gen_nn_optim.py -> tests/data/golden_nn_optim.json) and comparisons.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "axle/axle.h"
#include "test_paths.h"

namespace pytorch_golden {

using json = nlohmann::json;

inline std::shared_ptr<axle::nn::Sequential> seq(std::vector<axle::nn::ModulePtr> ms) {
  return std::make_shared<axle::nn::Sequential>(std::move(ms));
}

inline const json& data() {
  static const json j = [] {
    std::ifstream f(std::string(AXLE_TEST_DATA) + "/golden_nn_optim.json");
    if (!f) throw std::runtime_error("cannot open golden_nn_optim.json under " + AXLE_TEST_DATA);
    return json::parse(f);
  }();
  return j;
}

inline axle::Tensor from_json(const json& j, axle::DType as = axle::kFloat32) {
  axle::Shape shape = j.at("shape").get<axle::Shape>();
  if (as == axle::kInt64) return axle::from_vector(j.at("values").get<std::vector<int64_t>>(), shape);
  return axle::from_vector(j.at("values").get<std::vector<double>>(), shape, {.dtype = as});
}

/// |a - b| / (1 + |b|) <= tol elementwise (NaN fails).
inline void expect_close(const axle::Tensor& a, const json& ref, const std::string& what, double tol = 1e-5) {
  ASSERT_TRUE(a.defined()) << what << " is undefined";
  ASSERT_EQ(a.shape(), ref.at("shape").get<axle::Shape>()) << what;
  std::vector<double> got = a.to_vector<double>();
  std::vector<double> want = ref.at("values").get<std::vector<double>>();
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::abs(got[i] - want[i]) / (1 + std::abs(want[i]));
    if (!(err <= worst)) worst = err, at = i;  // also catches NaN
  }
  EXPECT_LE(worst, tol) << what << ": element " << at << " is " << got[at] << ", PyTorch has " << want[at];
}

}  // namespace pytorch_golden
