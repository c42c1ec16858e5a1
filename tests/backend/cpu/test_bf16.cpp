// bfloat16 as a dtype (issue 27): the conversion, promotion, factories, element access, the
// cast both ways (eager and lazy), the op rows of tests/golden/ops_bf16.py against PyTorch 2.15
// in bf16 (tests/data/golden_ops_bf16.safetensors) and against a float32 reference on the
// rounded inputs, on cpu and xla under both compute paths (native oneDNN bf16 and float32 on
// bf16 storage), lazy == eager bit for bit, gradients by finite differences, collectives on
// device threads, serialization round trips, and the errors of ops that take no bf16.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "axle/axle.h"
#include "backend/cpu/bf16.h"
#include "dist/local_devices.h"
#include "golden_ops.h"
#include "ops/op.h"
#include "test_util.h"

namespace {
using namespace axle;
using axle::golden::In;
using axle::golden::Out;

// The rows cast their floating inputs with b(). Reference mode: the same rounding of the inputs,
// then float32 throughout (a plain reference of what each bf16 op rounds once).
bool g_reference = false;
Tensor b(const Tensor& x) { return g_reference ? x.to(kBFloat16).to(kFloat32) : x.to(kBFloat16); }

// The bf16 nearest to f by exact arithmetic in double: the two bf16 neighbours of f, the
// closer one, a tie to the one with an even last bit; NaN to a NaN, out of range to +-inf.
uint16_t reference_round(float f) {
  if (std::isnan(f)) return 0x7fc0;
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t lo = uint16_t(u >> 16), hi = uint16_t(lo + 1);
  if ((u & 0xffffu) == 0) return lo;
  const double vlo = double(std::bit_cast<float>(uint32_t(lo) << 16));
  const double vhi = (hi & 0x7fffu) == 0x7f80u ? std::copysign(std::ldexp(1.0, 128), double(f))
                                                 : double(std::bit_cast<float>(uint32_t(hi) << 16));
  const double dlo = std::abs(double(f) - vlo), dhi = std::abs(vhi - double(f));
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(Bf16Convert, RoundsToNearestEvenAsExactArithmetic) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(uint32_t(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(bfloat16::round_bits(f), reference_round(f)) << "bits " << std::hex << std::bit_cast<uint32_t>(f);
  }
  // Ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (to even: 1); 1 + 3 * 2^-8 to 1 + 2^-6.
  EXPECT_EQ(bfloat16::round_bits(1.00390625f), 0x3f80);
  EXPECT_EQ(bfloat16::round_bits(1.01171875f), 0x3f82);
  EXPECT_EQ(bfloat16::round_bits(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  EXPECT_EQ(bfloat16::round_bits(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(bfloat16::round_bits(1e-40f), reference_round(1e-40f));  // subnormals round too
}

TEST(Bf16Convert, KeepsNaNAndEveryBf16ValueExactly) {
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0x7f800001u),
                        std::bit_cast<float>(0xffffffffu), std::bit_cast<float>(0x7fffffffu)};
  for (float n : nans) {
    const uint16_t r = bfloat16::round_bits(n);
    EXPECT_TRUE(std::isnan(bfloat16::to_float(r))) << std::hex << std::bit_cast<uint32_t>(n) << " -> " << r;
    EXPECT_EQ(r & 0x8000, (std::bit_cast<uint32_t>(n) >> 16) & 0x8000) << "sign kept";
  }
  for (uint32_t v = 0; v < 0x10000; ++v) {
    const float f = bfloat16::to_float(uint16_t(v));
    if (std::isnan(f)) continue;
    ASSERT_EQ(bfloat16::round_bits(f), v);
  }
}

TEST(Bf16DType, PromotesAsPyTorch) {
  EXPECT_EQ(promote(kBFloat16, kFloat32), kFloat32);
  EXPECT_EQ(promote(kFloat32, kBFloat16), kFloat32);
  EXPECT_EQ(promote(kBFloat16, kInt64), kBFloat16);
  EXPECT_EQ(promote(kInt32, kBFloat16), kBFloat16);
  EXPECT_EQ(promote(kBool, kBFloat16), kBFloat16);
  EXPECT_EQ(promote(kBFloat16, kBFloat16), kBFloat16);
  EXPECT_EQ(promote(kBFloat16, DType::Float16), kFloat32);
  EXPECT_EQ(itemsize(kBFloat16), 2u);
  EXPECT_STREQ(dtype_name(kBFloat16), "bfloat16");
  EXPECT_TRUE(is_floating(kBFloat16));
  // Through the ops: a bf16 tensor with a float32 one is float32; with an int64 one, bf16.
  Tensor x = ones({3}, {.dtype = kBFloat16});
  EXPECT_EQ(add(x, ones({3})).dtype(), kFloat32);
  EXPECT_EQ(add(x, ones({3}, {.dtype = kInt64})).dtype(), kBFloat16);
  EXPECT_EQ(mul(x, 3.0).dtype(), kBFloat16);
  EXPECT_EQ(lt(x, x).dtype(), kBool);
}

TEST(Bf16Tensor, FactoriesItemAndPrinting) {
  const TensorOptions o{.dtype = kBFloat16};
  EXPECT_EQ(zeros({2, 3}, o).dtype(), kBFloat16);
  EXPECT_EQ(ones({2}, o).to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_EQ(full({2}, 1.00390625, o).to_vector<float>(), (std::vector<float>{1, 1}));  // rounded (a tie to even)
  EXPECT_EQ(full({1}, 3.14159, o).item<float>(), 3.140625f);
  EXPECT_EQ(arange(0, 5, 1, o).to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(250, 262, 3, o).to_vector<float>(), (std::vector<float>{250, 253, 256, 260}));  // 259 -> 260
  Generator g1(5), g2(5);
  Tensor r = randn({64}, o, &g1), r32 = randn({64}, {}, &g2);
  ASSERT_EQ(r.dtype(), kBFloat16);
  const std::vector<float> rv = r.to_vector<float>(), r32v = r32.to_vector<float>();
  for (size_t i = 0; i < rv.size(); ++i) EXPECT_EQ(rv[i], bfloat16::to_float(bfloat16::round_bits(r32v[i])));
  Tensor u = rand({1000}, o);
  for (float v : u.to_vector<float>()) EXPECT_TRUE(v >= 0.0f && v <= 1.0f);
  const bfloat16* p = r.data<bfloat16>();
  EXPECT_EQ(float(p[3]), rv[3]);
  EXPECT_NE(full({2}, 1.5, o).str().find("dtype=bfloat16"), std::string::npos);
  EXPECT_NE(full({2}, 1.5, o).str().find("1.5000"), std::string::npos);
  EXPECT_NE(test::error_of([&] { r.data<float>(); }).find("expected dtype float32, got bfloat16"), std::string::npos);
}

std::vector<uint16_t> bits(const Tensor& t) {
  Tensor c = t.cpu().contiguous();
  EXPECT_EQ(c.dtype(), kBFloat16);
  const bfloat16* p = c.data<bfloat16>();
  std::vector<uint16_t> v(size_t(c.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = p[i].bits;
  return v;
}

TEST(Bf16Cast, BothWaysEagerAndLazy) {
  std::vector<float> v{0.1f, -2.7182817f, 1e-40f, 3.0e38f, 65504.0f, 1.00390625f, -0.0f};
  v.push_back(std::numeric_limits<float>::quiet_NaN());
  v.push_back(std::numeric_limits<float>::infinity());
  Tensor x = from_vector(v, {int64_t(v.size())});
  const std::vector<uint16_t> eager = bits(b(x));
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(eager[i], reference_round(v[i])) << "value " << v[i];
  const std::vector<uint16_t> lazy = bits(b(x.to(device())));
  EXPECT_EQ(lazy, eager);
  // Back to float32: exact; to int64 and bool as PyTorch (truncation; nonzero).
  Tensor y = b(x).to(kFloat32);
  const std::vector<float> yv = y.to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isnan(v[i])) {
      EXPECT_EQ(yv[i], bfloat16::to_float(eager[i]));
    }
  }
  EXPECT_EQ(b(from_vector(std::vector<float>{2.75f, -3.5f}, {2})).to(kInt64).to_vector<int64_t>(),
            (std::vector<int64_t>{2, -3}));
  EXPECT_EQ(b(from_vector(std::vector<float>{0.0f, -0.5f}, {2})).to(kBool).to_vector<uint8_t>(),
            (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(bits(from_vector(std::vector<int64_t>{257, -7}, {2}, {.dtype = kInt64}).to(kBFloat16)),
            (std::vector<uint16_t>{reference_round(257.0f), reference_round(-7.0f)}));
  // Non-contiguous, on xla too.
  Tensor m = randn({6, 5});
  EXPECT_EQ(bits(b(transpose(m, 0, 1))), bits(b(transpose(m.to(device()), 0, 1))));
}

// ---------------------------------------------------------------- golden rows (PyTorch in bf16)
Tensor mk_layer_norm(const In& x) { return layer_norm(b(x[0]), {16}, b(x[1]), b(x[2])); }
}  // namespace

namespace {
const std::vector<axle::golden::Row>& Bf16_rows() {
  static const std::vector<axle::golden::Row> rows{
  {"cast_to_bf16", [](const In& x) { return Out{b(x[0])}; }},
  {"cast_roundtrip_f32", [](const In& x) { return Out{b(x[0]).to(kFloat32)}; }},
  {"cast_to_int64", [](const In& x) { return Out{b(x[0]).to(kInt64)}; }},
  {"cast_from_int64", [](const In& x) { return Out{x[0].to(kBFloat16)}; }},
  {"add", [](const In& x) { return Out{add(b(x[0]), b(x[1]))}; }},
  {"sub_broadcast", [](const In& x) { return Out{sub(b(x[0]), b(x[1]))}; }},
  {"mul_scalar_add", [](const In& x) { return Out{add(mul(b(x[0]), 0.5), 1.0)}; }},
  {"div", [](const In& x) { return Out{div(b(x[0]), b(x[1]))}; }},
  {"add_float32_promotes", [](const In& x) { return Out{add(b(x[0]), x[1])}; }},
  {"add_int64_stays_bf16", [](const In& x) { return Out{add(b(x[0]), x[1])}; }},
  {"exp", [](const In& x) { return Out{exp(b(x[0]))}; }},
  {"log", [](const In& x) { return Out{log(b(x[0]))}; }},
  {"sqrt", [](const In& x) { return Out{sqrt(b(x[0]))}; }},
  {"tanh", [](const In& x) { return Out{tanh(b(x[0]))}; }},
  {"sigmoid", [](const In& x) { return Out{sigmoid(b(x[0]))}; }},
  {"relu", [](const In& x) { return Out{relu(b(x[0]))}; }},
  {"gelu", [](const In& x) { return Out{gelu(b(x[0]))}; }},
  {"gelu_tanh", [](const In& x) { return Out{gelu(b(x[0]), "tanh")}; }},
  {"silu", [](const In& x) { return Out{silu(b(x[0]))}; }},
  {"pow_scalar", [](const In& x) { return Out{pow(b(x[0]), 2.0)}; }},
  {"maximum", [](const In& x) { return Out{maximum(b(x[0]), b(x[1]))}; }},
  {"lt", [](const In& x) { return Out{lt(b(x[0]), b(x[1]))}; }},
  {"where", [](const In& x) { return Out{where(gt(x[0], 0.0), b(x[1]), b(x[2]))}; }},
  {"chain_fused", [](const In& x) { return Out{mul(tanh(add(mul(b(x[0]), b(x[1])), 1.0)), 2.0)}; }},
  {"sum_all", [](const In& x) { return Out{sum(b(x[0]))}; }},
  {"sum_dim", [](const In& x) { return Out{sum(b(x[0]), {1})}; }},
  {"sum_rows", [](const In& x) { return Out{sum(b(x[0]), {0})}; }},  // a bias gradient's column sums
  {"mean_dims", [](const In& x) { return Out{mean(b(x[0]), {0, 2})}; }},
  {"amax_dim", [](const In& x) { return Out{amax(b(x[0]), {1})}; }},
  {"softmax", [](const In& x) { return Out{softmax(b(x[0]), -1)}; }},
  {"log_softmax", [](const In& x) { return Out{log_softmax(b(x[0]), 1)}; }},
  {"cumsum", [](const In& x) { return Out{cumsum(b(x[0]), 1)}; }},
  {"layer_norm", [](const In& x) { return Out{mk_layer_norm(x)}; }},
  {"cross_entropy", [](const In& x) { return Out{cross_entropy(b(x[0]), x[1])}; }},
  {"nll_loss_sum", [](const In& x) { return Out{nll_loss(log_softmax(b(x[0]), 1), x[1], Reduction::Sum)}; }},
  {"mse_loss", [](const In& x) { return Out{mse_loss(b(x[0]), b(x[1]))}; }},
  {"matmul", [](const In& x) { return Out{matmul(b(x[0]), b(x[1]))}; }},
  {"matmul_batched_transposed", [](const In& x) { return Out{matmul(b(x[0]), transpose(b(x[1]), -1, -2))}; }},
  {"linear", [](const In& x) { return Out{linear(b(x[0]), b(x[1]), b(x[2]))}; }},
  {"linear_relu", [](const In& x) { return Out{relu(linear(b(x[0]), b(x[1]), b(x[2])))}; }},
  {"conv2d", [](const In& x) { return Out{conv2d(b(x[0]), b(x[1]), b(x[2]), {.padding = {1, 1}})}; }},
  {"conv2d_strided_groups",
   [](const In& x) { return Out{conv2d(b(x[0]), b(x[1]), b(x[2]), {.stride = {2, 2}, .padding = {1, 1}, .groups = 2})}; }},
  {"conv_transpose2d", [](const In& x) {
     return Out{conv_transpose2d(b(x[0]), b(x[1]), b(x[2]), {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}})};
   }},
  {"conv2d_relu_max_pool2d",  // channels-last conv output: the 2x2 pooling kernel in bf16
   [](const In& x) { return Out{max_pool2d(relu(conv2d(b(x[0]), b(x[1]), {}, {.padding = {1, 1}})), {.kernel = {2, 2}})}; }},
  {"max_pool2d", [](const In& x) { return Out{max_pool2d(b(x[0]), {.kernel = {2, 2}})}; }},
  {"avg_pool2d", [](const In& x) { return Out{avg_pool2d(b(x[0]), {.kernel = {2, 2}})}; }},
  {"sdpa_causal",
   [](const In& x) { return Out{scaled_dot_product_attention(b(x[0]), b(x[1]), b(x[2]), {.is_causal = true})}; }},
  {"sdpa_blocks", [](const In& x) { return Out{scaled_dot_product_attention(b(x[0]), b(x[1]), b(x[2]))}; }},
  {"sdpa_causal_qkv_views", [](const In& x) {
     const Tensor p = b(x[0]);  // [B, T, 3, H, E]
     auto part = [&](int64_t i) { return transpose(squeeze(slice(p, 2, i, i + 1), 2), 1, 2); };
     const Tensor o = scaled_dot_product_attention(part(0), part(1), part(2), {.is_causal = true});
     return Out{reshape(transpose(o, 1, 2), {p.shape()[0], p.shape()[1], -1})};
   }},
  {"embedding", [](const In& x) { return Out{embedding(b(x[0]), x[1])}; }},
  {"gather", [](const In& x) { return Out{gather(b(x[0]), 1, x[1])}; }},
  {"cat_transpose", [](const In& x) { return Out{cat({transpose(b(x[0]), 0, 1), b(x[1])}, 0)}; }},
  };
  return rows;
}

// |got - want| <= tol (1 + |want|) (by_max: tol (1 + max |want|), for gradients, where a bf16
// chain such as tanh's 1 - t^2 cancels), NaN with NaN, infinities equal; integers and bools exact.
std::string near(const Tensor& got_any, const Tensor& want_any, double tol, bool by_max = false) {
  const Tensor got = got_any.cpu(), want = want_any.cpu();
  if (got.shape() != want.shape()) return "shape differs";
  const bool exact = !is_floating(got.dtype());
  const std::vector<double> a = got.to_vector<double>(), w = want.to_vector<double>();
  double mx = 0;
  for (double e : w)
    if (std::isfinite(e)) mx = std::max(mx, std::abs(e));
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = 1 + (by_max ? mx : std::abs(w[i]));
    const bool ok = std::isnan(w[i]) ? std::isnan(a[i])
                    : std::isinf(w[i]) ? a[i] == w[i]
                                       : std::abs(a[i] - w[i]) <= (exact ? 0.0 : tol * scale);
    if (!ok) return "element " + std::to_string(i) + ": got " + std::to_string(a[i]) + ", want " + std::to_string(w[i]);
  }
  return "";
}

const SafeTensors& bf16_file() { return golden::file("golden_ops_bf16.safetensors"); }

// Every row against the plain reference (float32 on the rounded inputs, the file's inputs),
// outputs and the gradients of sum(out * cot), on cpu and xla, under both compute paths.
TEST(Bf16Rows, MatchTheFloat32ReferenceOnBothPathsCpuAndXla) {
  for (cpu::Bf16Compute path : {cpu::Bf16Compute::Native, cpu::Bf16Compute::F32}) {
    const cpu::Bf16Compute old = cpu::set_bf16_compute(path);
    for (const auto& r : Bf16_rows())
      for (const char* dev : {"cpu", "xla"}) {
        SCOPED_TRACE(std::string(cpu::bf16_compute_name(path)) + " " + r.name + " " + dev);
        auto run = [&](bool reference, std::vector<Tensor>* grads) {
          g_reference = reference;
          const In in = golden::row_inputs(bf16_file(), r, dev, nullptr);  // those with a file gradient require grad
          Out o = r.fn(in);
          g_reference = false;
          Tensor loss;
          for (size_t j = 0; j < o.size(); ++j) {
            if (!o[j].requires_grad()) continue;
            Generator gc(j + 1);
            Tensor term = sum(mul(o[j].to(kFloat32), randn(o[j].shape(), {}, &gc).to(Device(dev))));
            loss = loss.defined() ? add(loss, term) : term;
          }
          if (loss.defined()) {
            loss.backward();
            for (const Tensor& x : in)
              if (x.requires_grad()) grads->push_back(x.grad().defined() ? x.grad() : zeros_like(x));
          }
          return o;
        };
        std::vector<Tensor> gb, gr;
        const Out got = run(false, &gb), want = run(true, &gr);
        ASSERT_EQ(got.size(), want.size());
        for (size_t j = 0; j < got.size(); ++j) {
          const DType wd = want[j].dtype() == kFloat32 && r.name != "add_float32_promotes" && r.name != "cast_roundtrip_f32"
                               ? kBFloat16 : want[j].dtype();
          EXPECT_EQ(got[j].dtype(), wd) << "output " << j;
          const std::string m = near(got[j], want[j], 2e-2);
          EXPECT_TRUE(m.empty()) << "output " << j << ": " << m;
        }
        ASSERT_EQ(gb.size(), gr.size());
        for (size_t i = 0; i < gb.size(); ++i) {
          const std::string m = near(gb[i], gr[i], 2e-2, true);
          EXPECT_TRUE(m.empty()) << "gradient " << i << ": " << m;
        }
      }
    cpu::set_bf16_compute(old);
  }
}

// Every row against PyTorch 2.15 computing the same ops in bf16 (tests/golden/ops_bf16.py, run
// by tests/golden/gen_ops.py), outputs and gradients, on cpu and xla under both compute paths.
// The tolerance is each row's in the file, and only these two (the test fails on any other):
//   exact rows (the casts, lt): rtol 1e-5, atol 1e-6, i.e. the same bf16 (or int64, bool) values;
//   every computing row: rtol 2e-2, atol 2e-2 (bf16 keeps 8 significant bits, a relative step of
//   2^-8 = 0.0039; PyTorch and axle both round once per op, and GEMMs, softmax and norms
//   accumulate in a different order, so a result may land a few bf16 steps away: 2e-2 is about 5).
struct Bf16Case {
  size_t row;
  std::string device;
  cpu::Bf16Compute path;
};
std::vector<Bf16Case> bf16_cases() {
  std::vector<Bf16Case> c;
  for (cpu::Bf16Compute path : {cpu::Bf16Compute::Native, cpu::Bf16Compute::F32})
    for (size_t i = 0; i < Bf16_rows().size(); ++i)
      for (const char* d : {"cpu", "xla"}) c.push_back({i, d, path});
  return c;
}
class Bf16Golden : public ::testing::TestWithParam<Bf16Case> {};
TEST_P(Bf16Golden, MatchesPyTorch) {
  const Bf16Case& c = GetParam();
  const golden::Row& r = Bf16_rows()[c.row];
  ASSERT_TRUE(bf16_file().metadata.count(r.name)) << r.name;
  const std::string tol = bf16_file().metadata.at(r.name);
  EXPECT_TRUE(tol == "1e-05 1e-06" || tol == "0.02 0.02") << r.name << ": tolerance " << tol;
  const cpu::Bf16Compute old = cpu::set_bf16_compute(c.path);
  golden::check_row(bf16_file(), r, c.device);
  cpu::set_bf16_compute(old);
}
INSTANTIATE_TEST_SUITE_P(Golden, Bf16Golden, ::testing::ValuesIn(bf16_cases()), [](const auto& info) {
  return Bf16_rows()[info.param.row].name + "_" + info.param.device + "_" + cpu::bf16_compute_name(info.param.path);
});

TEST(Bf16GoldenCoverage, FileAndRowsAgree) {
  std::set<std::string> cpp;
  for (const auto& r : Bf16_rows()) EXPECT_TRUE(cpp.insert(r.name).second) << "row twice: " << r.name;
  const auto in_file = golden::rows_in(bf16_file());
  EXPECT_EQ(in_file, cpp) << "the rows of tests/golden/ops_bf16.py and of this file differ";
}

TEST(Bf16Paths, DecidedFromTheProcessor) {
  const std::string s = cpu::bf16_cpu_summary();
  EXPECT_NE(s.find("oneDNN isa"), std::string::npos) << s;
  const char* forced = std::getenv("AXLE_BF16_COMPUTE");
  if (forced && *forced) return;  // the override decides
  const bool amx = s.find("amx_bf16") != std::string::npos && s.find("amx_tile") != std::string::npos &&
                   s.find("isa avx512_core_amx") != std::string::npos;
  EXPECT_EQ(cpu::bf16_compute(), amx ? cpu::Bf16Compute::Native : cpu::Bf16Compute::F32) << s;
}

// Lazy == eager bit for bit: a fused elementwise chain, a reduction, a GEMM, a norm.
TEST(Bf16Lazy, EqualsEagerBitForBit) {
  Generator g(11);
  Tensor x = randn({32, 48}, {}, &g), w = randn({24, 48}, {}, &g), gam = randn({24}, {}, &g);
  auto f = [&](const Device& d) {
    Tensor xb = b(x.to(d)), wb = b(w.to(d)), gb = b(gam.to(d));
    Tensor h = gelu(add(mul(xb, 0.5), 1.0), "tanh");
    Tensor y = layer_norm(linear(h, wb), {24}, gb, {});
    return std::vector<Tensor>{h, y, sum(y, {1}), softmax(y, 1)};
  };
  for (cpu::Bf16Compute path : {cpu::Bf16Compute::Native, cpu::Bf16Compute::F32}) {
    const cpu::Bf16Compute old = cpu::set_bf16_compute(path);
    const auto e = f(kCPU), l = f(device());
    for (size_t i = 0; i < e.size(); ++i) EXPECT_EQ(bits(e[i]), bits(l[i])) << "output " << i << " on the "
                                                                           << cpu::bf16_compute_name(path) << " path";
    cpu::set_bf16_compute(old);
  }
}

// Column sums of bf16 (bias gradients) widen each element as they read it, in the float32
// kernel's order: the same bits as widening first, row chunks (many rows) or not, on cpu and xla.
TEST(Bf16Sum, ColumnSumsEqualTheWidenedFloat32SumRoundedOnce) {
  Generator g(13);
  for (const Shape& s : {Shape{1100, 300}, Shape{40, 700}, Shape{3, 2000, 260}}) {
    const Tensor x = b(randn(s, {}, &g));
    const Tensor want = sum(x.to(kFloat32), {0}).to(kBFloat16);
    EXPECT_EQ(bits(sum(x, {0})), bits(want)) << shape_str(s);
    EXPECT_EQ(bits(sum(x.to(device()), {0})), bits(want)) << shape_str(s) << " on xla";
  }
}

// A small cnn's forward and gradients (conv -> relu -> 2x2 max pool -> linear; layer norm on
// the features) lazy == eager bit for bit: on xla the compiler fuses the relu into the conv and
// the relu's gradient into the pool's backward, which must not change a bit in bf16 either.
TEST(Bf16Lazy, ConvNetForwardAndGradientsEqualEager) {
  Generator g(12);
  Tensor x = randn({4, 3, 8, 8}, {}, &g), w = mul(randn({8, 3, 3, 3}, {}, &g), 0.5), cb = randn({8}, {}, &g);
  Tensor lw = mul(randn({5, 128}, {}, &g), 0.1), gam = rand({128}, {}, &g), bet = randn({128}, {}, &g);
  auto f = [&](const Device& d) {
    std::vector<Tensor> leaves;
    for (const Tensor& t : {x, w, cb, lw, gam, bet}) {
      Tensor l = b(t.to(d)).detach();
      l.set_requires_grad(true);
      leaves.push_back(l);
    }
    Tensor h = max_pool2d(relu(conv2d(leaves[0], leaves[1], leaves[2], {.padding = {1, 1}})), {.kernel = {2, 2}});
    Tensor z = layer_norm(flatten(h, 1), {128}, leaves[4], leaves[5]);
    Tensor y = linear(z, leaves[3]);
    sum(mul(y.to(kFloat32), y.to(kFloat32))).backward();
    std::vector<Tensor> out{h, y};
    for (const Tensor& l : leaves) out.push_back(l.grad());
    return out;
  };
  for (cpu::Bf16Compute path : {cpu::Bf16Compute::Native, cpu::Bf16Compute::F32}) {
    const cpu::Bf16Compute old = cpu::set_bf16_compute(path);
    const auto e = f(kCPU), l = f(device());
    for (size_t i = 0; i < e.size(); ++i)
      EXPECT_EQ(bits(e[i]), bits(l[i])) << "value " << i << " on the " << cpu::bf16_compute_name(path) << " path";
    cpu::set_bf16_compute(old);
  }
}

// Gradients of bf16 ops against central differences in float32 on the widened values.
void check_grad(const std::string& what, const std::function<Tensor(const Tensor&)>& f, const Shape& shape,
                double scale = 1.0) {
  Generator g(std::hash<std::string>{}(what) & 0xffff);
  Tensor x = b(mul(randn(shape, {}, &g), scale));  // the bf16 point
  Tensor y0 = f(x);
  Tensor cot = randn(y0.shape(), {}, &g);
  Tensor xg = x.detach();
  xg.set_requires_grad(true);
  sum(mul(f(xg), b(cot))).backward();
  ASSERT_TRUE(xg.grad().defined()) << what;
  ASSERT_EQ(xg.grad().dtype(), kBFloat16) << what;
  const std::vector<float> analytic = xg.grad().to_vector<float>();
  std::vector<float> x32 = x.to_vector<float>();
  const double eps = 1e-2;
  auto loss = [&](const std::vector<float>& v) {
    return sum(mul(f(from_vector(v, shape)), cot)).item<double>();  // float32 throughout
  };
  for (size_t i = 0; i < x32.size(); ++i) {
    std::vector<float> p = x32, m = x32;
    p[i] += float(eps);
    m[i] -= float(eps);
    const double num = (loss(p) - loss(m)) / (2 * eps);
    EXPECT_NEAR(analytic[i], num, 5e-2 + 5e-2 * std::abs(num)) << what << " element " << i;
  }
}

TEST(Bf16Grad, FiniteDifferencesInFloat32) {
  for (cpu::Bf16Compute path : {cpu::Bf16Compute::Native, cpu::Bf16Compute::F32}) {
    const cpu::Bf16Compute old = cpu::set_bf16_compute(path);
    SCOPED_TRACE(cpu::bf16_compute_name(path));
    check_grad("gelu", [](const Tensor& x) { return gelu(x); }, {3, 5});
    check_grad("tanh_mul", [](const Tensor& x) { return mul(tanh(x), x); }, {3, 5});
    check_grad("softmax", [](const Tensor& x) { return softmax(x, 1); }, {3, 6});
    check_grad("log_softmax", [](const Tensor& x) { return log_softmax(x, 1); }, {3, 6});
    check_grad("layer_norm", [](const Tensor& x) { return layer_norm(x, {6}); }, {3, 6});
    check_grad("sum_mean", [](const Tensor& x) { return mean(x, {0}); }, {4, 5});
    check_grad("matmul", [](const Tensor& x) { return matmul(x, transpose(x, 0, 1)); }, {4, 3}, 0.5);
    check_grad("linear", [](const Tensor& x) { return linear(x, x, sum(x, {0})); }, {3, 3}, 0.5);
    check_grad("layer_norm_affine", [](const Tensor& x) {
      const Tensor w = add(mul(arange(0, 6, 1, {.dtype = x.dtype()}), 0.25), 0.5), bias = arange(0, 6, 1, {.dtype = x.dtype()});
      return layer_norm(x, {6}, w, bias);
    }, {3, 6});
    // The convolutions: input gradient (backward-data), weight gradient (backward-weights), the
    // transposed conv.
    Generator cg(21);
    const Tensor cw = b(mul(randn({4, 3, 3, 3}, {}, &cg), 0.5)), cx = b(randn({2, 3, 5, 5}, {}, &cg));
    check_grad("conv2d_input", [&](const Tensor& x) { return conv2d(x, cw.to(x.dtype()), {}, {.padding = {1, 1}}); },
               {2, 3, 5, 5});
    check_grad("conv2d_weight", [&](const Tensor& w) { return conv2d(cx.to(w.dtype()), w, {}, {.stride = {2, 2}}); },
               {4, 3, 3, 3}, 0.5);
    check_grad("conv_transpose2d", [&](const Tensor& x) {
      return conv_transpose2d(x, cw.to(x.dtype()), {}, {.stride = {2, 2}, .padding = {1, 1}});
    }, {2, 4, 3, 3});
    // 2x2 max pooling of a channels-last bf16 tensor (a 1x1 identity conv's output, exact): the
    // values spread (scale 10) so that no window holds two within the differencing step.
    check_grad("max_pool2d_channels_last", [&](const Tensor& x) {
      const Tensor id = from_vector(std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3, 1, 1}).to(x.dtype());
      return max_pool2d(conv2d(x, id), {.kernel = {2, 2}});
    }, {2, 3, 4, 4}, 10.0);
    check_grad("cross_entropy", [](const Tensor& x) {
      return cross_entropy(x, from_vector(std::vector<int64_t>{1, 0, 4}, {3}, {.dtype = kInt64}));
    }, {3, 5});
    cpu::set_bf16_compute(old);
  }
}

TEST(Bf16Serialize, SafetensorsAndCheckpointRoundTripBitForBit) {
  test::TempDir dir;
  Tensor x = b(randn({7, 9}));
  save(x, dir / "x.safetensors");
  Tensor y = load_tensor(dir / "x.safetensors");
  EXPECT_EQ(y.dtype(), kBFloat16);
  EXPECT_EQ(bits(y), bits(x));
  // The file says BF16 in its header (what PyTorch and safetensors read).
  EXPECT_NE(test::slurp(dir / "x.safetensors").find("\"BF16\""), std::string::npos);
  // A model with bf16 parameters through the training checkpoint.
  auto m = std::make_shared<nn::Linear>(4, 3);
  m->to(kBFloat16);
  for (const auto& [k, p] : m->state_dict()) EXPECT_EQ(p.dtype(), kBFloat16) << k;
  save_checkpoint(dir / "c.safetensors", {.model = m.get()});
  auto m2 = std::make_shared<nn::Linear>(4, 3);
  m2->to(kBFloat16);
  load_checkpoint(dir / "c.safetensors", {.model = m2.get()});
  const nn::StateDict a = m->state_dict(), c = m2->state_dict();
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(bits(a[i].second), bits(c[i].second)) << a[i].first;
}

// Collectives of bf16 tensors on SPMD device threads: all-reduce sums in float32 and rounds
// once (not a bf16 add per device), all-gather, reduce-scatter and broadcast move the bits.
TEST(Bf16Collectives, OnDeviceThreadsReduceInFloat32AndRoundOnce) {
  const int n = 3;
  const int64_t id = dist::local_group_id({{0, 1, 2}});
  // Device d holds 1 + d * 2^-8 (+ i): bf16 sums per step would round each partial sum.
  auto input = [](int d) {
    std::vector<float> v(6);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) + 1.0f + float(d) * 0.00390625f;
    return v;
  };
  std::vector<Tensor> ar(n), ag(n), rs(n), bc(n);
  dist::run_on_devices(n, [&](int d) {
    const Tensor x = from_vector(input(d), {6}).to(kBFloat16);
    ar[size_t(d)] = ops::call1(ops::OpKind::AllReduce, {x}, {.ints = {int64_t(dist::ReduceOp::Sum), id}});
    ag[size_t(d)] = ops::call1(ops::OpKind::AllGather, {x}, {.ints = {id, n}});
    rs[size_t(d)] = ops::call1(ops::OpKind::ReduceScatter, {x}, {.ints = {int64_t(dist::ReduceOp::Sum), id, n}});
    bc[size_t(d)] = ops::call1(ops::OpKind::Broadcast, {x}, {.ints = {n - 1, id}});
  }, 1);
  for (int d = 0; d < n; ++d) {
    ASSERT_EQ(ar[size_t(d)].dtype(), kBFloat16);
    const std::vector<float> got = ar[size_t(d)].to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) {
      float exact = 0;  // the float32 sum of the bf16 inputs, rounded once
      for (int r = 0; r < n; ++r) exact += bfloat16::to_float(bfloat16::round_bits(input(r)[i]));
      EXPECT_EQ(got[i], bfloat16::to_float(bfloat16::round_bits(exact))) << "device " << d << " element " << i;
    }
    ASSERT_EQ(ag[size_t(d)].dtype(), kBFloat16);
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(bits(slice(ag[size_t(d)], 0, r * 6, (r + 1) * 6)), bits(from_vector(input(r), {6}).to(kBFloat16)));
    EXPECT_EQ(bits(bc[size_t(d)]), bits(from_vector(input(n - 1), {6}).to(kBFloat16)));
    EXPECT_EQ(bits(rs[size_t(d)]), bits(slice(ar[0], 0, 2 * d, 2 * d + 2)));
  }
}

TEST(Bf16Errors, OpsWithoutBf16NameExpectedAndFound) {
  Tensor x = b(randn({1, 1, 4, 4}));
  EXPECT_NE(test::error_of([&] { interpolate(x, {.size = {8, 8}}); }).find("expected a float32 input, got bfloat16"),
            std::string::npos);
  const std::string e = test::error_of([&] { matmul(b(randn({2, 3})), randn({3, 2})); });
  EXPECT_NE(e.find("[matmul] expected float32 or bfloat16 operands of one dtype, got bfloat16 and float32"),
            std::string::npos) << e;
  const std::string l = test::error_of([&] { linear(b(randn({2, 3})), randn({4, 3})); });
  EXPECT_NE(l.find("[linear] expected float32 or bfloat16 input and weight of one dtype, got bfloat16 and float32"),
            std::string::npos) << l;
  const std::string n = test::error_of([&] { softmax(b(randn({2, 3})).to(kInt64).to(kUInt8), 0); });
  EXPECT_EQ(n, "(no error)") << "integers are widened to float32 first, as PyTorch";
}

}  // namespace
