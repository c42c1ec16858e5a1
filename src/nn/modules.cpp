// Standard layers (torch.nn's names, arguments, defaults, parameters and buffers): Linear, Conv2d,
// ConvTranspose2d, BatchNorm1d/2d, GroupNorm, LayerNorm, Dropout, activations, pools, Upsample,
// Flatten, Embedding, Sequential, ModuleList, ModuleDict. Initialisation follows PyTorch's reset_parameters().
#include "axle/nn/modules.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "axle/autograd.h"
#include "core/tensor_impl.h"

namespace axle::nn {

namespace {
std::string b2s(bool b) { return b ? "True" : "False"; }
std::string pair_str(const Int2& p) { return "(" + std::to_string(p.h) + ", " + std::to_string(p.w) + ")"; }
// kaiming_uniform_(a=sqrt(5)) on a weight with this fan_in and PyTorch's bias init
// both reduce to U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
double fan_in_bound(int64_t fan_in) { return fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0; }
/// A double as Python's repr of a float prints it ("1.0", "0.01", "1e-05", "-inf"):
/// the shortest round-trip digits, scientific below 1e-4 and from 1e16.
std::string py_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // d[.ddd]e[+-]XX
  const size_t e = sci.find('e');
  const int exp = std::stoi(sci.substr(e + 1));
  std::string digits = sci.substr(0, e);
  const bool neg = digits[0] == '-';
  if (neg) digits.erase(0, 1);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(size_t(-exp - 1), '0') + digits;
  } else if (size_t(exp) + 1 >= digits.size()) {
    out = digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
  }
  return neg ? "-" + out : out;
}
void fill_uniform(const Tensor& t, double bound) {
  NoGradGuard ng;
  t.set_data(uniform(t.shape(), -bound, bound, {.dtype = t.dtype(), .device = t.device()}));
}
}  // namespace

// ---- Linear ----
Linear::Linear(int64_t in, int64_t out, bool has_bias) : in_features(in), out_features(out) {
  AXLE_CHECK(in >= 0 && out >= 0, "[Linear] expected non-negative sizes, got in_features=", in,
             ", out_features=", out);
  weight = register_parameter("weight", zeros({out, in}));
  if (has_bias) bias = register_parameter("bias", zeros({out}));
  reset_parameters();
}

void Linear::reset_parameters() {
  double bound = fan_in_bound(in_features);
  fill_uniform(weight, bound);
  if (bias.defined()) fill_uniform(bias, bound);
}

Tensor Linear::forward(const Tensor& x) {
  AXLE_CHECK(x.defined(), "[Linear] expected a defined input");
  AXLE_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "[Linear] expected input with last dimension ",
             in_features, ", got shape ", shape_str(x.shape()));
  return linear(x, weight, bias);
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features) + ", out_features=" + std::to_string(out_features) +
         ", bias=" + b2s(bias.defined());
}

// ---- Conv2d ----
Conv2d::Conv2d(int64_t in, int64_t out, Int2 k, Conv2dOptions o)
    : in_channels(in), out_channels(out), kernel_size(k), options(o) {
  AXLE_CHECK(o.groups >= 1, "[Conv2d] expected groups >= 1, got ", o.groups);
  AXLE_CHECK(in > 0 && out > 0 && in % o.groups == 0 && out % o.groups == 0,
             "[Conv2d] expected positive in_channels and out_channels divisible by groups=", o.groups,
             ", got in_channels=", in, ", out_channels=", out);
  AXLE_CHECK(k.h > 0 && k.w > 0, "[Conv2d] expected a positive kernel size, got ", pair_str(k));
  weight = register_parameter("weight", zeros({out, in / o.groups, k.h, k.w}));
  if (o.bias) bias = register_parameter("bias", zeros({out}));
  reset_parameters();
}

void Conv2d::reset_parameters() {
  double bound = fan_in_bound(in_channels / options.groups * kernel_size.h * kernel_size.w);
  fill_uniform(weight, bound);
  if (bias.defined()) fill_uniform(bias, bound);
}

Tensor Conv2d::forward(const Tensor& x) {
  AXLE_CHECK(x.defined(), "[Conv2d] expected a defined input");
  AXLE_CHECK(x.dim() == 4 && x.size(1) == in_channels, "[Conv2d] expected input [N, ", in_channels,
             ", H, W], got shape ", shape_str(x.shape()));
  axle::Conv2dFuncOptions c;
  c.stride = options.stride.vec();
  c.padding = options.padding.vec();
  c.dilation = options.dilation.vec();
  c.groups = options.groups;
  return conv2d(x, weight, bias, c);
}

std::string Conv2d::extra_repr() const {
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + pair_str(kernel_size) + ", stride=" + pair_str(options.stride);
  if (options.padding.h || options.padding.w) s += ", padding=" + pair_str(options.padding);
  if (options.dilation.h != 1 || options.dilation.w != 1) s += ", dilation=" + pair_str(options.dilation);
  if (options.groups != 1) s += ", groups=" + std::to_string(options.groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

// ---- ConvTranspose2d ----
ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, Int2 k, ConvTranspose2dOptions o)
    : in_channels(in), out_channels(out), kernel_size(k), options(o) {
  AXLE_CHECK(o.groups >= 1, "[ConvTranspose2d] expected groups >= 1, got ", o.groups);
  AXLE_CHECK(in > 0 && out > 0 && in % o.groups == 0 && out % o.groups == 0,
             "[ConvTranspose2d] expected positive in_channels and out_channels divisible by groups=", o.groups,
             ", got in_channels=", in, ", out_channels=", out);
  AXLE_CHECK(k.h > 0 && k.w > 0, "[ConvTranspose2d] expected a positive kernel size, got ", pair_str(k));
  AXLE_CHECK(o.stride.h > 0 && o.stride.w > 0 && o.dilation.h > 0 && o.dilation.w > 0,
             "[ConvTranspose2d] expected a positive stride and dilation, got stride=", pair_str(o.stride),
             ", dilation=", pair_str(o.dilation));
  AXLE_CHECK(o.output_padding.h >= 0 && o.output_padding.w >= 0 &&
                 (o.output_padding.h < o.stride.h || o.output_padding.h < o.dilation.h) &&
                 (o.output_padding.w < o.stride.w || o.output_padding.w < o.dilation.w),
             "[ConvTranspose2d] expected output_padding smaller than stride or dilation, got output_padding=",
             pair_str(o.output_padding), ", stride=", pair_str(o.stride), ", dilation=", pair_str(o.dilation));
  weight = register_parameter("weight", zeros({in, out / o.groups, k.h, k.w}));
  if (o.bias) bias = register_parameter("bias", zeros({out}));
  reset_parameters();
}

void ConvTranspose2d::reset_parameters() {
  // PyTorch's fan_in of the weight [in, out/groups, kh, kw] is its dim 1 times the kernel.
  double bound = fan_in_bound(out_channels / options.groups * kernel_size.h * kernel_size.w);
  fill_uniform(weight, bound);
  if (bias.defined()) fill_uniform(bias, bound);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  AXLE_CHECK(x.defined(), "[ConvTranspose2d] expected a defined input");
  AXLE_CHECK(x.dim() == 4 && x.size(1) == in_channels, "[ConvTranspose2d] expected input [N, ", in_channels,
             ", H, W], got shape ", shape_str(x.shape()));
  axle::ConvTranspose2dFuncOptions c;
  c.stride = options.stride.vec();
  c.padding = options.padding.vec();
  c.output_padding = options.output_padding.vec();
  c.groups = options.groups;
  c.dilation = options.dilation.vec();
  return conv_transpose2d(x, weight, bias, c);
}

std::string ConvTranspose2d::extra_repr() const {
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + pair_str(kernel_size) + ", stride=" + pair_str(options.stride);
  if (options.padding.h || options.padding.w) s += ", padding=" + pair_str(options.padding);
  if (options.dilation.h != 1 || options.dilation.w != 1) s += ", dilation=" + pair_str(options.dilation);
  if (options.output_padding.h || options.output_padding.w)
    s += ", output_padding=" + pair_str(options.output_padding);
  if (options.groups != 1) s += ", groups=" + std::to_string(options.groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

// ---- BatchNorm ----
BatchNorm::BatchNorm(int64_t c, double eps, std::optional<double> momentum, bool affine, bool track, bool use_bias)
    : num_features(c), eps(eps), momentum(momentum), affine(affine), track_running_stats(track),
      use_bias(affine && use_bias) {
  AXLE_CHECK(c > 0, "[BatchNorm] expected num_features > 0, got ", c);
  if (affine) {
    weight = register_parameter("weight", ones({c}));
    if (use_bias) bias = register_parameter("bias", zeros({c}));
  }
  if (track) {  // PyTorch registers None buffers otherwise: no state dict entries
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = kInt64}));
  }
}

Tensor BatchNorm::forward(const Tensor& x) {
  AXLE_CHECK(x.defined(), "[", name(), "] expected a defined input");
  check_input(x);
  AXLE_CHECK(x.size(1) == num_features, "[", name(), "] expected ", num_features, " channels, got shape ",
             shape_str(x.shape()));
  const bool update = is_training() && track_running_stats;
  if (update) {
    NoGradGuard ng;
    num_batches_tracked.set_data(add(num_batches_tracked.detach(), 1.0));
  }
  if (!update || momentum) {
    // Eval with running statistics, training with a fixed momentum (batch_norm updates the
    // running statistics), or no running statistics at all (batch statistics in both modes).
    return batch_norm(x, weight, bias, running_mean, running_var, is_training() || !track_running_stats,
                      momentum.value_or(0.0), eps);
  }
  // momentum unset: the cumulative moving average, factor 1 / num_batches_tracked (after the
  // increment), as PyTorch's momentum=None. The factor stays a tensor: no device sync on xla.
  Tensor y = batch_norm(x, weight, bias, Tensor(), Tensor(), true, 0.0, eps);
  NoGradGuard ng;
  const Tensor xd = x.detach();
  Shape dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Tensor bm = mean(xd, dims);
  Tensor bv = var(xd, dims, /*correction=*/1);
  const DType st = running_mean.dtype();
  Tensor f = div(ones({}, {.dtype = st, .device = x.device()}), cast(num_batches_tracked.detach(), st));
  Tensor keep = sub(ones({}, {.dtype = st, .device = x.device()}), f);
  running_mean.set_data(add(mul(running_mean.detach(), keep), mul(cast(bm, st), f)));
  running_var.set_data(add(mul(running_var.detach(), keep), mul(cast(bv, st), f)));
  return y;
}

void BatchNorm2d::check_input(const Tensor& x) const {
  AXLE_CHECK(x.dim() == 4, "[BatchNorm2d] expected 4-D input [N, C, H, W], got ", x.dim(), "-D input of shape ",
             shape_str(x.shape()));
}

void BatchNorm1d::check_input(const Tensor& x) const {
  AXLE_CHECK(x.dim() == 2 || x.dim() == 3, "[BatchNorm1d] expected 2-D or 3-D input [N, C] or [N, C, L], got ",
             x.dim(), "-D input of shape ", shape_str(x.shape()));
}

std::string BatchNorm::extra_repr() const {
  return std::to_string(num_features) + ", eps=" + py_float(eps) +
         ", momentum=" + (momentum ? py_float(*momentum) : std::string("None")) + ", affine=" + b2s(affine) +
         ", bias=" + b2s(bias.defined()) + ", track_running_stats=" + b2s(track_running_stats);
}

std::vector<std::string> BatchNorm::optional_state() const {
  // PyTorch's _BatchNorm fills a missing num_batches_tracked (state dicts older than its
  // version 2, and axle's before it had the buffer) with its current value.
  if (track_running_stats) return {"num_batches_tracked"};
  return {};
}

// ---- GroupNorm ----
GroupNorm::GroupNorm(int64_t g, int64_t c, double eps, bool affine, bool use_bias)
    : num_groups(g), num_channels(c), eps(eps), affine(affine) {
  AXLE_CHECK(g > 0 && c > 0 && c % g == 0, "[GroupNorm] expected num_channels divisible by num_groups (both > 0), got ",
             "num_groups=", g, ", num_channels=", c);
  if (affine) {
    weight = register_parameter("weight", ones({c}));
    if (use_bias) bias = register_parameter("bias", zeros({c}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  AXLE_CHECK(x.defined(), "[GroupNorm] expected a defined input");
  AXLE_CHECK(x.dim() >= 2 && x.size(1) == num_channels, "[GroupNorm] expected input [N, ", num_channels,
             ", ...], got shape ", shape_str(x.shape()));
  return group_norm(x, num_groups, weight, bias, eps);
}

std::string GroupNorm::extra_repr() const {
  return std::to_string(num_groups) + ", " + std::to_string(num_channels) + ", eps=" + py_float(eps) +
         ", affine=" + b2s(affine) + ", bias=" + b2s(bias.defined());
}

// ---- LayerNorm ----
LayerNorm::LayerNorm(Shape shape, double eps, bool affine, bool use_bias)
    : normalized_shape(std::move(shape)), eps(eps) {
  AXLE_CHECK(!normalized_shape.empty(), "[LayerNorm] expected a non-empty normalized_shape");
  for (int64_t s : normalized_shape)
    AXLE_CHECK(s > 0, "[LayerNorm] expected positive sizes in normalized_shape, got ", shape_str(normalized_shape));
  if (affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    if (use_bias) bias = register_parameter("bias", zeros(normalized_shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  AXLE_CHECK(x.defined(), "[LayerNorm] expected a defined input");
  int64_t k = int64_t(normalized_shape.size());
  bool ok = x.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = x.size(x.dim() - k + i) == normalized_shape[size_t(i)];
  AXLE_CHECK(ok, "[LayerNorm] expected input with trailing shape ", shape_str(normalized_shape), ", got ",
             shape_str(x.shape()));
  return layer_norm(x, normalized_shape, weight, bias, eps);
}

std::string LayerNorm::extra_repr() const {
  std::string s = "(";
  for (size_t i = 0; i < normalized_shape.size(); ++i) s += (i ? ", " : "") + std::to_string(normalized_shape[i]);
  if (normalized_shape.size() == 1) s += ",";
  return s + "), eps=" + py_float(eps) + ", elementwise_affine=" + b2s(weight.defined()) +
         ", bias=" + b2s(bias.defined());
}

// ---- Dropout ----
Dropout::Dropout(double p) : p(p) {
  AXLE_CHECK(p >= 0 && p <= 1, "[Dropout] expected a probability in [0, 1], got ", p);
}
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }
std::string Dropout::extra_repr() const { return "p=" + py_float(p) + ", inplace=False"; }

// ---- pooling ----
static Pool2dOptions make_pool(const char* op, Int2 k, std::optional<Int2> s, Int2 pad, Int2 dilation, bool ceil_mode,
                               bool count_include_pad) {
  AXLE_CHECK(k.h > 0 && k.w > 0, "[", op, "] expected a positive kernel size, got ", pair_str(k));
  Int2 st = s.value_or(k);
  AXLE_CHECK(st.h > 0 && st.w > 0, "[", op, "] expected a positive stride, got ", pair_str(st));
  AXLE_CHECK(dilation.h > 0 && dilation.w > 0, "[", op, "] expected a positive dilation, got ", pair_str(dilation));
  // PyTorch's rule (checked against 2.15): at most half the kernel size, whatever the dilation.
  AXLE_CHECK(pad.h >= 0 && pad.w >= 0 && 2 * pad.h <= k.h && 2 * pad.w <= k.w, "[", op,
             "] expected padding at most half the kernel size, got padding ", pair_str(pad), " for kernel ",
             pair_str(k));
  Pool2dOptions o;
  o.kernel = k.vec();
  o.stride = st.vec();
  o.padding = pad.vec();
  o.dilation = dilation.vec();
  o.ceil_mode = ceil_mode;
  o.count_include_pad = count_include_pad;
  return o;
}
static std::string pool_repr(const Pool2dOptions& o) {
  auto v = [](const std::vector<int64_t>& x) {
    return x[0] == x[1] ? std::to_string(x[0]) : "(" + std::to_string(x[0]) + ", " + std::to_string(x[1]) + ")";
  };
  return "kernel_size=" + v(o.kernel) + ", stride=" + v(o.stride) + ", padding=" + v(o.padding);
}

MaxPool2d::MaxPool2d(Int2 k, std::optional<Int2> s, Int2 pad, Int2 dilation, bool ceil_mode)
    : options(make_pool("MaxPool2d", k, s, pad, dilation, ceil_mode, true)) {}
Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, options); }
std::pair<Tensor, Tensor> MaxPool2d::forward_with_indices(const Tensor& x) { return max_pool2d_with_indices(x, options); }
std::string MaxPool2d::extra_repr() const {
  const auto& d = options.dilation;
  return pool_repr(options) + ", dilation=" +
         (d[0] == d[1] ? std::to_string(d[0]) : "(" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ")") +
         ", ceil_mode=" + b2s(options.ceil_mode);
}

MaxUnpool2d::MaxUnpool2d(Int2 k, std::optional<Int2> s, Int2 pad) {
  const Int2 st = s.value_or(k);
  AXLE_CHECK(k.h > 0 && k.w > 0 && st.h > 0 && st.w > 0 && pad.h >= 0 && pad.w >= 0,
             "[MaxUnpool2d] expected a positive kernel size and stride and a non-negative padding, got kernel ",
             pair_str(k), ", stride ", pair_str(st), ", padding ", pair_str(pad));
  options.kernel = k.vec();
  options.stride = st.vec();
  options.padding = pad.vec();
}
Tensor MaxUnpool2d::forward(const Tensor& x, const Tensor& indices, const std::vector<int64_t>& output_size) {
  return max_unpool2d(x, indices, options, output_size);
}
Tensor MaxUnpool2d::forward(const Tensor&) {
  AXLE_FAIL("[MaxUnpool2d] expected forward(x, indices[, output_size]) with MaxPool2d::forward_with_indices' ",
            "indices, got forward(x) alone");
}
std::string MaxUnpool2d::extra_repr() const {  // PyTorch prints the pairs as tuples here
  auto t = [](const std::vector<int64_t>& v) { return "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ")"; };
  return "kernel_size=" + t(options.kernel) + ", stride=" + t(options.stride) + ", padding=" + t(options.padding);
}

AvgPool2d::AvgPool2d(Int2 k, std::optional<Int2> s, Int2 pad, bool ceil_mode, bool cip)
    : options(make_pool("AvgPool2d", k, s, pad, 1, ceil_mode, cip)) {}
Tensor AvgPool2d::forward(const Tensor& x) { return avg_pool2d(x, options); }
std::string AvgPool2d::extra_repr() const { return pool_repr(options); }

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Int2 out) : output_size(out) {
  AXLE_CHECK(out.h > 0 && out.w > 0, "[AdaptiveAvgPool2d] expected a positive output size, got ", pair_str(out));
}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, output_size.vec()); }
std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + pair_str(output_size); }

// ---- Upsample ----
Tensor Upsample::forward(const Tensor& x) { return interpolate(x, options); }

std::string Upsample::extra_repr() const {
  // PyTorch: "scale_factor=2.0" (floats; a tuple for one per dim) or "size=4" / "size=(4, 6)".
  std::string s;
  auto tuple = [](const auto& v, auto fmt) {
    if (v.size() == 1) return fmt(v[0]);
    std::string t = "(";
    for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + fmt(v[i]);
    return t + ")";
  };
  if (!options.scale_factor.empty())
    s = "scale_factor=" + tuple(options.scale_factor, [](double d) { return py_float(d); });
  else
    s = "size=" + tuple(options.size, [](int64_t i) { return std::to_string(i); });
  return s + ", mode='" + options.mode + "'";
}

std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(start_dim) + ", end_dim=" + std::to_string(end_dim);
}

// ---- activations ----
std::string Softplus::extra_repr() const { return "beta=" + py_float(beta) + ", threshold=" + py_float(threshold); }
std::string LeakyReLU::extra_repr() const { return "negative_slope=" + py_float(negative_slope); }
std::string Hardtanh::extra_repr() const { return "min_val=" + py_float(min_val) + ", max_val=" + py_float(max_val); }

// ---- Embedding ----
Embedding::Embedding(int64_t num, int64_t dim) : num_embeddings(num), embedding_dim(dim) {
  AXLE_CHECK(num > 0 && dim > 0, "[Embedding] expected positive sizes, got num_embeddings=", num,
             ", embedding_dim=", dim);
  weight = register_parameter("weight", randn({num, dim}));
}
Tensor Embedding::forward(const Tensor& indices) {
  AXLE_CHECK(indices.defined(), "[Embedding] expected defined indices");
  AXLE_CHECK(!is_floating(indices.dtype()), "[Embedding] expected integer indices, got ", indices.dtype());
  return embedding(weight, indices);
}
std::string Embedding::extra_repr() const {
  return std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
}

// ---- Sequential ----
Sequential::Sequential(std::vector<ModulePtr> modules) {
  for (auto& m : modules) push_back(std::move(m));
}
Sequential::Sequential(std::initializer_list<ModulePtr> modules) {
  for (const auto& m : modules) push_back(m);
}
void Sequential::push_back(ModulePtr m) {
  AXLE_CHECK(m != nullptr, "[Sequential] expected a module, got null at index ", modules_.size());
  register_module(std::to_string(modules_.size()), m);
  modules_.push_back(std::move(m));
}
const ModulePtr& Sequential::operator[](size_t i) const {
  AXLE_CHECK(i < modules_.size(), "[Sequential] index ", i, " out of range for ", modules_.size(), " modules");
  return modules_[i];
}
Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : modules_) y = (*m)(y);  // (*m): a wrapped child runs through its wrapper
  return y;
}

}  // namespace axle::nn

namespace axle::nn {

// ---- ModuleList ----
ModuleList::ModuleList(std::vector<ModulePtr> modules) {
  for (auto& m : modules) push_back(std::move(m));
}
ModuleList::ModuleList(std::initializer_list<ModulePtr> modules) {
  for (const auto& m : modules) push_back(m);
}
void ModuleList::push_back(ModulePtr m) {
  AXLE_CHECK(m != nullptr, "[ModuleList] expected a module, got null at index ", modules_.size());
  register_module(std::to_string(modules_.size()), m);
  modules_.push_back(std::move(m));
}
const ModulePtr& ModuleList::operator[](size_t i) const {
  AXLE_CHECK(i < modules_.size(), "[ModuleList] index ", i, " is out of range for ", modules_.size(), " module(s)");
  return modules_[i];
}

void ModuleList::str_into(std::string& out, int indent) const {
  if (modules_.empty()) {
    out += name() + "()";
    return;
  }
  std::vector<std::pair<std::pair<size_t, size_t>, std::string>> runs;  // [first, last] index, repr
  for (size_t i = 0; i < modules_.size(); ++i) {
    std::string r = modules_[i]->str();
    if (!runs.empty() && runs.back().second == r) runs.back().first.second = i;
    else runs.push_back({{i, i}, std::move(r)});
  }
  const std::string pad(size_t(indent + 2), ' ');
  out += name() + "(";
  for (const auto& [range, r] : runs) {
    auto [a, b] = range;
    std::string line = a == b ? "(" + std::to_string(a) + "): " + r
                              : "(" + std::to_string(a) + "-" + std::to_string(b) + "): " + std::to_string(b - a + 1) +
                                    " x " + r;
    std::string indented;
    for (char ch : line) indented += ch == '\n' ? "\n" + pad : std::string(1, ch);
    out += "\n" + pad + indented;
  }
  out += "\n" + std::string(size_t(indent), ' ') + ")";
}

// ---- ModuleDict ----
ModuleDict::ModuleDict(std::vector<std::pair<std::string, ModulePtr>> modules) {
  for (auto& [k, m] : modules) insert(k, std::move(m));
}
void ModuleDict::insert(const std::string& key, ModulePtr m) {
  AXLE_CHECK(m != nullptr, "[ModuleDict] expected a module for key \"", key, "\", got null");
  for (auto& [k, v] : items_)
    if (k == key) {  // replaced in its place, as PyTorch's __setitem__ of an existing key
      replace_child(*this, key, m);
      v = std::move(m);
      return;
    }
  register_module(key, m);
  items_.emplace_back(key, std::move(m));
}
bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [k, v] : items_)
    if (k == key) return true;
  return false;
}
const ModulePtr& ModuleDict::operator[](const std::string& key) const {
  for (const auto& [k, v] : items_)
    if (k == key) return v;
  std::string names;
  for (const auto& [k, v] : items_) names += (names.empty() ? "\"" : ", \"") + k + "\"";
  AXLE_FAIL("[ModuleDict] no module under key \"", key, "\" (keys: ", names.empty() ? "none" : names, ")");
}
std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : items_) out.push_back(k);
  return out;
}

}  // namespace axle::nn
