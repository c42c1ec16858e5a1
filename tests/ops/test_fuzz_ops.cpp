// Differential fuzzing: random valid op sequences (every elementwise op of the op table,
// broadcasting, views, reductions,
// matmul, conv, softmax, scalars that trigger folding) run on the eager cpu path, the
// lazy xla device (one graph, all compiler passes) and xla eager mode; every value and
// every input gradient must agree. A fixed seed corpus runs in `make test`;
// `make fuzz` runs many more programs (AXLE_FUZZ_PROGRAMS, AXLE_FUZZ_SEED).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "axle/axle.h"
#include "ops/op.h"

using namespace axle;

namespace {

struct Instr {
  int op = 0;
  std::vector<int> args;     // indices into the value list
  std::vector<int64_t> ints;
  double scalar = 0;
  ops::Attrs attrs{};  // an elementwise op's attributes
};

enum Op {
  kElementwise1, kElementwise2, kScalar, kSum, kMean, kAmax, kPermute, kReshape, kSlice, kExpand, kMatmul,
  kSoftmax, kLogSoftmax, kCat, kConv, kPool, kCount
};

// The elementwise ops come from the op table (every EW op in src/ops/ops.def), with operands
// in the domain the table declares (POSITIVE, NONZERO), a bool condition for `where`, and
// attributes drawn around each field's declared default. Nothing here names an op, so a new
// elementwise op is fuzzed (in fused chains, on every device) from the day it is added.
//
// The table's elementwise ops taking one value, and those taking two (binary ops, where).
const std::vector<ops::OpKind>& elementwise_ops(int values) {
  static const std::vector<ops::OpKind> one = [] {
    std::vector<ops::OpKind> v;
    for (ops::OpKind k : ops::ops_with(ops::kElementwise))
      if (ops::op_info(k).inputs.lo == 1) v.push_back(k);
    return v;
  }();
  static const std::vector<ops::OpKind> two = [] {
    std::vector<ops::OpKind> v;
    for (ops::OpKind k : ops::ops_with(ops::kElementwise))
      if (ops::op_info(k).inputs.lo > 1) v.push_back(k);
    return v;
  }();
  return values == 1 ? one : two;
}

// Operands for op k in its declared domain, from any values.
std::vector<Tensor> operands_in_domain(ops::OpKind k, const std::vector<Tensor>& values) {
  const ops::OpInfo& info = ops::op_info(k);
  std::vector<Tensor> v;
  for (const Tensor& x : values) {
    if (info.has(ops::kPositive)) v.push_back(abs(x) + 0.5);
    else if (info.has(ops::kNonzero)) v.push_back(where(ge(x, 0.0), x + 0.5, x - 0.5));
    else v.push_back(x);
  }
  if (info.inputs.lo == 3) v.insert(v.begin(), gt(values[0], 0.0));  // where(cond, a, b)
  return v;
}

// Attributes for op k: a random dtype for DTYPE fields (cast), a random BOOL (gelu's tanh), floats around their default
// (uniform in [-1, 1] where the default is unbounded). Stored in the instruction, so every
// device runs the same.
ops::Attrs draw_attrs(ops::OpKind k, std::mt19937_64& rng) {
  const ops::OpInfo& info = ops::op_info(k);
  ops::Attrs a;
  std::uniform_real_distribution<double> u(-1, 1);
  for (size_t f = 0; f < info.num_attrs; ++f) {
    const ops::AttrField& field = info.attrs[f];
    if (field.type == ops::AttrType::DType) {
      const DType choices[] = {kFloat32, kInt32, kInt64, kBool};
      a.ints.push_back(int64_t(choices[rng() % 4]));
    } else if (field.type == ops::AttrType::Bool) {  // gelu's tanh: both forms
      a.ints.push_back(int64_t(rng() % 2));
    } else if (field.type == ops::AttrType::Float) {
      const double d = field.default_value;
      a.floats.push_back(std::isfinite(d) ? d * (1 + 0.5 * u(rng)) : u(rng));
    } else {
      ADD_FAILURE() << info.name << ": the fuzzer cannot draw attribute '" << field.name << "'";
    }
  }
  return a;
}

Tensor apply_elementwise(ops::OpKind k, const std::vector<Tensor>& values, const ops::Attrs& a) {
  Tensor y = ops::call1(k, operands_in_domain(k, values), a);
  return y.dtype() == kFloat32 ? y : cast(y, kFloat32);  // comparisons, casts: back to float
}

Tensor apply_instr(const Instr& in, const std::vector<Tensor>& v) {
  auto a = [&](size_t i) -> const Tensor& { return v[size_t(in.args[i])]; };
  switch (in.op) {
    case kElementwise1: return apply_elementwise(elementwise_ops(1)[size_t(in.ints[0])], {a(0)}, in.attrs);
    case kElementwise2: return apply_elementwise(elementwise_ops(2)[size_t(in.ints[0])], {a(0), a(1)}, in.attrs);
    case kScalar:
      return in.ints[0] == 0 ? mul(a(0), in.scalar) : add(a(0), in.scalar);
    case kSum: return sum(a(0), {in.ints[0]}, in.ints[1] != 0);
    case kMean: return mean(a(0), {in.ints[0]}, in.ints[1] != 0);
    case kAmax: return amax(a(0), {in.ints[0]}, in.ints[1] != 0);
    case kPermute: return permute(a(0), in.ints);
    case kReshape: return reshape(a(0), in.ints);
    case kSlice: return slice(a(0), in.ints[0], in.ints[1], in.ints[2], in.ints[3]);
    case kExpand: return expand(a(0), in.ints);
    case kMatmul: return matmul(a(0), a(1));
    case kSoftmax: return softmax(a(0), in.ints[0]);
    case kLogSoftmax: return log_softmax(a(0), in.ints[0]);
    case kCat: return cat(std::vector<Tensor>{a(0), a(1)}, in.ints[0]);
    case kConv: return conv2d(a(0), a(1), {}, {.padding = {in.ints[0], in.ints[0]}});
    case kPool: return max_pool2d(a(0));
  }
  AXLE_FAIL("bad instr");
}

struct Program {
  std::vector<Shape> input_shapes;
  std::vector<Instr> code;
};

// Builds a random program, choosing each op so that it is valid for the shapes so far.
Program generate(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Program p;
  std::vector<Shape> shapes;
  const int n_inputs = int(pick(1, 3));
  for (int i = 0; i < n_inputs; ++i) {
    Shape s(size_t(pick(1, 4)));
    for (auto& d : s) d = pick(1, 5);
    p.input_shapes.push_back(s);
    shapes.push_back(s);
  }
  const int n = int(pick(3, 14));
  int guard = 0;
  while (int(p.code.size()) < n && guard++ < 400) {
    Instr in;
    // Elementwise ops take a third of the draws, so each of the table's is drawn often.
    in.op = int(pick(0, kCount + 5));
    if (in.op >= kCount) in.op = in.op % 2 == 0 ? kElementwise1 : kElementwise2;
    const int x = int(pick(0, int64_t(shapes.size()) - 1));
    const Shape s = shapes[size_t(x)];  // a copy: fresh inputs below grow `shapes`
    const int64_t nd = int64_t(s.size());
    in.args = {x};
    if (nd == 0 && in.op != kElementwise1 && in.op != kScalar && in.op != kElementwise2) continue;
    Shape out;
    switch (in.op) {
      case kElementwise1:
        in.ints = {pick(0, int64_t(elementwise_ops(1).size()) - 1)};
        in.attrs = draw_attrs(elementwise_ops(1)[size_t(in.ints[0])], rng);
        out = s;
        break;
      case kElementwise2: {
        // A partner that broadcasts: an existing value of a compatible shape, else `s` with some dims set to 1.
        int y = -1;
        for (int tries = 0; tries < 8 && y < 0; ++tries) {
          int c = int(pick(0, int64_t(shapes.size()) - 1));
          const Shape& t = shapes[size_t(c)];
          bool ok = true;
          for (size_t k = 0; k < std::min(t.size(), s.size()); ++k) {
            int64_t da = s[s.size() - 1 - k], db = t[t.size() - 1 - k];
            ok = ok && (da == db || da == 1 || db == 1);
          }
          if (ok) y = c;
        }
        if (y < 0) continue;
        in.args.push_back(y);
        in.ints = {pick(0, int64_t(elementwise_ops(2).size()) - 1)};
        in.attrs = draw_attrs(elementwise_ops(2)[size_t(in.ints[0])], rng);
        const Shape& t = shapes[size_t(y)];
        out.assign(std::max(s.size(), t.size()), 1);
        for (size_t k = 0; k < out.size(); ++k) {
          int64_t da = k < s.size() ? s[s.size() - 1 - k] : 1, db = k < t.size() ? t[t.size() - 1 - k] : 1;
          out[out.size() - 1 - k] = std::max(da, db);
        }
        break;
      }
      case kScalar: {
        const double choices[] = {0.0, 1.0, -1.0, 0.5, 2.5, -3.0};
        in.ints = {pick(0, 1)};
        in.scalar = choices[pick(0, 5)];
        out = s;
        break;
      }
      case kSum: case kMean: case kAmax: {
        int64_t d = pick(0, nd - 1), keep = pick(0, 1);
        in.ints = {d, keep};
        out = s;
        if (keep) out[size_t(d)] = 1;
        else out.erase(out.begin() + d);
        if (out.empty() && in.op == kAmax) continue;
        break;
      }
      case kPermute: {
        Shape perm(static_cast<size_t>(nd));
        for (int64_t k = 0; k < nd; ++k) perm[size_t(k)] = k;
        std::shuffle(perm.begin(), perm.end(), rng);
        in.ints = perm;
        for (int64_t k = 0; k < nd; ++k) out.push_back(s[size_t(perm[size_t(k)])]);
        break;
      }
      case kReshape: {
        int64_t numel = 1;
        for (auto d : s) numel *= d;
        out = pick(0, 1) ? Shape{numel} : Shape{1, numel};
        in.ints = out;
        break;
      }
      case kSlice: {
        int64_t d = pick(0, nd - 1);
        if (s[size_t(d)] < 2) continue;
        int64_t start = pick(0, s[size_t(d)] - 1), step = pick(1, 2);
        int64_t end = pick(start + 1, s[size_t(d)]);
        in.ints = {d, start, end, step};
        out = s;
        out[size_t(d)] = (end - start + step - 1) / step;
        break;
      }
      case kExpand: {
        out = s;
        bool any = false;
        for (auto& d : out)
          if (d == 1) { d = pick(1, 4); any = true; }
        if (!any) out.insert(out.begin(), pick(2, 3));
        in.ints = out;
        break;
      }
      case kMatmul: {
        // b = a fresh input [k, m] so that x @ b is valid.
        int64_t k = s.back(), m = pick(1, 5);
        p.input_shapes.push_back({k, m});
        shapes.push_back({k, m});
        in.args.push_back(-int(p.input_shapes.size()));  // marker: an input, fixed below
        out = s;
        out.back() = m;  // [..., n, k] @ [k, m] -> [..., n, m]; [k] @ [k, m] -> [m]
        break;
      }
      case kSoftmax: case kLogSoftmax: in.ints = {pick(0, nd - 1)}; out = s; break;
      case kCat: {
        int y = -1;
        int64_t d = pick(0, nd - 1);
        for (int c = 0; c < int(shapes.size()) && y < 0; ++c) {
          const Shape& t = shapes[size_t(c)];
          if (t.size() != s.size()) continue;
          bool ok = true;
          for (int64_t k = 0; k < nd; ++k) ok = ok && (k == d || t[size_t(k)] == s[size_t(k)]);
          if (ok) y = c;
        }
        if (y < 0) continue;
        in.args.push_back(y);
        in.ints = {d};
        out = s;
        out[size_t(d)] += shapes[size_t(y)][size_t(d)];
        break;
      }
      case kConv: {
        if (nd != 4 || s[2] < 2 || s[3] < 2) continue;
        int64_t o = pick(1, 4), pad = pick(0, 1);
        p.input_shapes.push_back({o, s[1], 2, 2});
        shapes.push_back({o, s[1], 2, 2});
        in.args.push_back(-int(p.input_shapes.size()));
        in.ints = {pad};
        out = {s[0], o, s[2] + 2 * pad - 1, s[3] + 2 * pad - 1};
        break;
      }
      case kPool: {
        if (nd != 4 || s[2] < 2 || s[3] < 2) continue;
        out = {s[0], s[1], s[2] / 2, s[3] / 2};
        break;
      }
    }
    p.code.push_back(in);
    shapes.push_back(out);
  }
  return p;
}

// Values: inputs first (in input order), then each instruction's result. Fresh inputs added
// while generating (matmul/conv partners) were appended to shapes at generation time, so the
// value list mirrors that order.
std::vector<Tensor> run_program(const Program& p, const std::vector<Tensor>& inputs) {
  // Rebuild the value numbering used during generation.
  std::vector<Tensor> vals;
  size_t next_input = 0;
  // Initial inputs are those before the first instruction.
  size_t initial = p.input_shapes.size();
  for (const Instr& in : p.code)
    for (int a : in.args)
      if (a < 0) --initial;
  for (; next_input < initial; ++next_input) vals.push_back(inputs[next_input]);
  for (const Instr& ins : p.code) {
    Instr fixed = ins;
    for (int& a : fixed.args)
      if (a < 0) {
        vals.push_back(inputs[size_t(-a - 1)]);
        a = int(vals.size()) - 1;
      }
    vals.push_back(apply_instr(fixed, vals));
  }
  return vals;
}

void check_program(uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "program seed " << seed);
  Program p = generate(seed);
  manual_seed(seed);
  std::vector<Tensor> base;
  for (const Shape& s : p.input_shapes) base.push_back(randn(s));
  // Each device: every value, then the gradient of a weighted sum of the last value.
  auto eval = [&](Device dev, bool eager) {
    experimental::eager_mode(eager);
    std::vector<Tensor> in;
    for (const Tensor& b : base) {
      Tensor t = b.to(dev);
      t.set_requires_grad(true);
      in.push_back(t);
    }
    std::vector<Tensor> vals = run_program(p, in);
    Tensor last = vals.back();
    // A fixed, data-independent weighting so that every element's gradient differs.
    Tensor w = (arange(0, last.numel(), 1, {.dtype = kFloat32}).reshape(last.shape()) * 0.01 + 0.5).to(dev);
    if (last.requires_grad()) sum(last * w).backward();  // not after a comparison or a cast to int
    axle::sync();
    std::vector<std::vector<float>> out;
    for (const Tensor& v : vals) out.push_back(v.to_vector<float>());
    for (const Tensor& t : in) out.push_back(t.grad().defined() ? t.grad().to_vector<float>() : std::vector<float>{});
    experimental::eager_mode(false);
    return out;
  };
  auto ref = eval(kCPU, false);
  for (bool eager : {false, true}) {
    SCOPED_TRACE(eager ? "xla eager mode" : "xla lazy");
    auto got = eval(device(), eager);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t k = 0; k < ref.size(); ++k) {
      ASSERT_EQ(got[k].size(), ref[k].size()) << "value " << k;
      for (size_t i = 0; i < ref[k].size(); ++i) {
        const float a = got[k][i], b = ref[k][i];
        if (std::isnan(b)) { EXPECT_TRUE(std::isnan(a)) << "value " << k << " element " << i; continue; }
        if (std::isinf(b)) { EXPECT_EQ(a, b) << "value " << k << " element " << i; continue; }
        ASSERT_NEAR(a, b, 1e-4 * (1 + std::abs(b))) << "value " << k << " element " << i;
      }
    }
  }
}

}  // namespace

TEST(DifferentialFuzz, SeedCorpus) {
  const char* n_env = std::getenv("AXLE_FUZZ_PROGRAMS");
  const char* s_env = std::getenv("AXLE_FUZZ_SEED");
  const uint64_t n = n_env ? std::strtoull(n_env, nullptr, 10) : 150;
  const uint64_t first = s_env ? std::strtoull(s_env, nullptr, 10) : 1;
  for (uint64_t s = first; s < first + n; ++s) {
    check_program(s);
    if (HasFatalFailure()) return;
  }
}

// The domains ops.def declares are right: each elementwise op, on operands made from normal
// values by the fuzzer's rule, gives finite values and gradients (log without POSITIVE gives NaN).
TEST(DifferentialFuzz, DeclaredDomainsGiveFiniteResults) {
  manual_seed(3);
  std::mt19937_64 rng(3);
  for (int values : {1, 2}) {
    for (ops::OpKind k : elementwise_ops(values)) {
      SCOPED_TRACE(ops::op_name(k));
      std::vector<Tensor> v;
      for (int i = 0; i < values; ++i) {
        v.push_back(randn({4096}) * 1.5);
        v.back().set_requires_grad(true);
      }
      Tensor y = apply_elementwise(k, v, draw_attrs(k, rng));
      auto finite = [](const Tensor& t) {
        for (float f : t.to_vector<float>())
          if (!std::isfinite(f)) return false;
        return true;
      };
      EXPECT_TRUE(finite(y)) << "non-finite values: declare its domain in ops.def";
      if (!y.requires_grad()) continue;
      sum(y).backward();
      for (const Tensor& x : v)
        if (x.grad().defined()) {
          EXPECT_TRUE(finite(x.grad())) << "non-finite gradients";
        }
    }
  }
}

// The seed corpus draws every one of them (so `make test` runs each in fused chains).
TEST(DifferentialFuzz, SeedCorpusDrawsEveryElementwiseOp) {
  std::set<ops::OpKind> drawn;
  for (uint64_t s = 1; s <= 150; ++s)
    for (const Instr& in : generate(s).code)
      if (in.op == kElementwise1 || in.op == kElementwise2)
        drawn.insert(elementwise_ops(in.op == kElementwise1 ? 1 : 2)[size_t(in.ints[0])]);
  for (ops::OpKind k : ops::ops_with(ops::kElementwise))
    EXPECT_TRUE(drawn.count(k)) << ops::op_name(k) << " is drawn by no program of the seed corpus";
}
