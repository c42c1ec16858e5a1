// Golden-value tests against PyTorch 2.x: each op's forward outputs and gradients, on `cpu` and
// lazy `xla`, compared with what PyTorch computed for the same inputs.
//
// The values come from tests/golden/gen_ops.py (run with the PyTorch venv; see its docstring),
// which runs the rows of every tests/golden/ops_<family>.py and writes
// tests/data/golden_ops_<family>.safetensors. For a row "r" the file holds
//   r.in<i>    the inputs (any dtype),      r.out<j>  PyTorch's outputs,
//   r.cot<j>   a random cotangent per float output,
//   r.grad<i>  d(sum_j <out_j, cot_j>)/d in<i>, for the inputs PyTorch differentiated,
// and the metadata "r" = "rtol atol" (PyTorch's tolerance for the row; a looser one than the
// default 1e-5 / 1e-6 carries its reason in the Python row).
//
// Each family's C++ rows are one file tests/golden/<family>.cpp, compiled into the one program
// test_golden (with tests/ops/test_golden.cpp), naming the same rows in C++:
//
//   AXLE_GOLDEN_ROWS(Reduce, "golden_ops_reduce.safetensors",
//     {"cumsum_dim1", [](const In& x) { return Out{axle::cumsum(x[0], 1)}; }},
//     ...)
//
// Each row is one test per device (Golden/Reduce.Matches/cumsum_dim1_xla); a row in the file
// without C++, or C++ without a row in the file, fails ReduceCoverage.FileAndRowsAgree. Every
// family registers itself (families()), so GoldenOps.EveryOpOfTheTableHasARow
// (tests/ops/test_golden.cpp) can run every row and list the ops.def entries none of them reaches. Views (transposes,
// slices) are made inside the row's function, on both sides, so non-contiguous inputs are
// tested as PyTorch saw them. Integer and bool outputs must match exactly; nan matches nan,
// inf matches inf of the same sign.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "axle/axle.h"
#include "test_paths.h"

namespace axle::golden {

using In = std::vector<Tensor>;
using Out = std::vector<Tensor>;
/// One row: the op applied to the file's inputs (in their order), returning its outputs.
struct Row {
  std::string name;
  std::function<Out(const In&)> fn;
};

/// Every value of `got` within rtol/atol of `want` (same shape and dtype; exact for integers
/// and bools). Returns "" or a message naming the first mismatch.
inline std::string shape_text(const Shape& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  return o.str() + "]";
}

inline std::string compare(const Tensor& got_any, const Tensor& want, double rtol, double atol) {
  const Tensor got = got_any.cpu();
  std::ostringstream m;
  if (got.shape() != want.shape()) {
    m << "shape " << shape_text(got.shape()) << ", expected " << shape_text(want.shape());
    return m.str();
  }
  if (got.dtype() != want.dtype()) {
    m << "dtype " << dtype_name(got.dtype()) << ", expected " << dtype_name(want.dtype());
    return m.str();
  }
  const bool exact = !is_floating(want.dtype());
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  int64_t bad = 0, first = -1, worst_at = -1;
  double worst = -1;
  for (size_t i = 0; i < b.size(); ++i) {
    bool ok;
    if (std::isnan(b[i])) ok = std::isnan(a[i]);
    else if (std::isinf(b[i])) ok = a[i] == b[i];
    else ok = !std::isnan(a[i]) && std::abs(a[i] - b[i]) <= (exact ? 0 : atol + rtol * std::abs(b[i]));
    if (ok) continue;
    ++bad;
    if (first < 0) first = int64_t(i);
    const double err = std::isfinite(a[i]) && std::isfinite(b[i]) ? std::abs(a[i] - b[i]) : INFINITY;
    if (err > worst) worst = err, worst_at = int64_t(i);
  }
  if (bad == 0) return "";
  m << bad << " of " << b.size() << " values differ (rtol " << rtol << ", atol " << atol << "); first at flat index "
    << first << ": got " << a[first] << ", expected " << b[first] << "; worst at " << worst_at << ": got "
    << a[worst_at] << ", expected " << b[worst_at];
  return m.str();
}

/// A family of rows and its file, registered by AXLE_GOLDEN_ROWS.
struct Family {
  std::string name, file;
  const std::vector<Row>* rows;
};
inline std::vector<Family>& families() {
  static std::vector<Family> all;
  return all;
}
inline bool register_family(const char* name, const char* file, const std::vector<Row>* rows) {
  families().push_back({name, file, rows});
  return true;
}

/// Row r's inputs from file f on `device` (those with a gradient in the file require grad).
inline In row_inputs(const SafeTensors& f, const Row& r, const std::string& device, std::vector<bool>* has_grad) {
  In inputs;
  for (int i = 0; f.contains(r.name + ".in" + std::to_string(i)); ++i) {
    Tensor x = f.at(r.name + ".in" + std::to_string(i)).clone().to(Device(device));
    const bool g = f.contains(r.name + ".grad" + std::to_string(i));
    if (g) x.set_requires_grad(true);
    inputs.push_back(x);
    if (has_grad) has_grad->push_back(g);
  }
  return inputs;
}

/// The file's contents, read once per program.
inline const SafeTensors& file(const std::string& name) {
  static std::map<std::string, std::unique_ptr<SafeTensors>> cache;
  auto& slot = cache[name];
  if (!slot) slot = std::make_unique<SafeTensors>(load(std::string(AXLE_TEST_DATA) + "/" + name));
  return *slot;
}

/// The row names a file holds (its metadata keys).
inline std::set<std::string> rows_in(const SafeTensors& f) {
  std::set<std::string> names;
  for (const auto& [k, v] : f.metadata)
    if (k != "format" && k != "generator") names.insert(k);
  return names;
}

/// Runs row `r` on `device` and compares with the file; failures are gtest failures.
inline void check_row(const SafeTensors& f, const Row& r, const std::string& device) {
  ASSERT_TRUE(f.metadata.count(r.name)) << "row " << r.name << " is not in " << f.path;
  double rtol = 1e-5, atol = 1e-6;
  std::istringstream(f.metadata.at(r.name)) >> rtol >> atol;
  std::vector<bool> has_grad;
  In inputs = row_inputs(f, r, device, &has_grad);
  Out outs;
  try {
    outs = r.fn(inputs);
  } catch (const Error& e) {
    FAIL() << r.name << " on " << device << " threw: " << e.what();
  }
  int n_out = 0;
  while (f.contains(r.name + ".out" + std::to_string(n_out))) ++n_out;
  ASSERT_EQ(int(outs.size()), n_out) << r.name << ": outputs";
  Tensor loss;
  for (int j = 0; j < n_out; ++j) {
    const std::string k = r.name + ".out" + std::to_string(j);
    const std::string msg = compare(outs[j], f.at(k), rtol, atol);
    EXPECT_TRUE(msg.empty()) << r.name << " on " << device << ", output " << j << ": " << msg;
    const std::string ck = r.name + ".cot" + std::to_string(j);
    if (f.contains(ck) && outs[j].requires_grad()) {
      Tensor term = sum(mul(outs[j], f.at(ck).to(Device(device))));
      loss = loss.defined() ? add(loss, term) : term;
    }
  }
  const bool any_grad = std::find(has_grad.begin(), has_grad.end(), true) != has_grad.end();
  if (!any_grad) return;
  ASSERT_TRUE(loss.defined()) << r.name << ": the file has gradients but no output requires grad on " << device;
  loss.backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!has_grad[i]) continue;
    const Tensor g = inputs[i].grad();
    const std::string k = r.name + ".grad" + std::to_string(i);
    if (!g.defined()) {
      ADD_FAILURE() << r.name << " on " << device << ": no gradient reached input " << i;
      continue;
    }
    const std::string msg = compare(g, f.at(k), rtol, atol);
    EXPECT_TRUE(msg.empty()) << r.name << " on " << device << ", gradient of input " << i << ": " << msg;
  }
}

}  // namespace axle::golden

/// Declares the rows of one golden file: a parameterized test per (row, device) and a
/// coverage test (the file's rows and the C++ rows are the same set).
#define AXLE_GOLDEN_ROWS(Suite, FILE_NAME, ...)                                                              \
  namespace {                                                                                                \
  using axle::golden::In;                                                                                    \
  using axle::golden::Out;                                                                                   \
  const std::vector<axle::golden::Row>& Suite##_rows() {                                                     \
    static const std::vector<axle::golden::Row> rows{__VA_ARGS__};                                           \
    return rows;                                                                                             \
  }                                                                                                          \
  [[maybe_unused]] const bool Suite##_registered =                                                           \
      axle::golden::register_family(#Suite, FILE_NAME, &Suite##_rows());                                   \
  std::vector<std::pair<size_t, std::string>> Suite##_cases() {                                              \
    std::vector<std::pair<size_t, std::string>> c;                                                           \
    for (size_t i = 0; i < Suite##_rows().size(); ++i)                                                       \
      for (const char* d : {"cpu", "xla"}) c.emplace_back(i, d);                                             \
    return c;                                                                                                \
  }                                                                                                          \
  class Suite : public ::testing::TestWithParam<std::pair<size_t, std::string>> {};                         \
  TEST_P(Suite, Matches) {                                                                                   \
    const auto& [i, device] = GetParam();                                                                    \
    axle::golden::check_row(axle::golden::file(FILE_NAME), Suite##_rows()[i], device);                      \
  }                                                                                                          \
  INSTANTIATE_TEST_SUITE_P(Golden, Suite, ::testing::ValuesIn(Suite##_cases()),                              \
                           [](const auto& info) {                                                            \
                             return Suite##_rows()[info.param.first].name + "_" + info.param.second;         \
                           });                                                                               \
  TEST(Suite##Coverage, FileAndRowsAgree) {                                                                  \
    std::set<std::string> cpp;                                                                               \
    for (const auto& r : Suite##_rows()) EXPECT_TRUE(cpp.insert(r.name).second) << "row twice: " << r.name;  \
    const auto in_file = axle::golden::rows_in(axle::golden::file(FILE_NAME));                               \
    for (const auto& n : in_file) EXPECT_TRUE(cpp.count(n)) << "row in " FILE_NAME " without C++: " << n;   \
    for (const auto& n : cpp) EXPECT_TRUE(in_file.count(n)) << "C++ row not in " FILE_NAME ": " << n;       \
  }                                                                                                          \
  }  // namespace
