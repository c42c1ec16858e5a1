// Lowered aten ops, part 3: what PyTorch's CNN (and MLP) training reaches: convolution and its
// backward, pooling (max with PyTorch's int64 indices, average, adaptive average), batch norm
// in the functional forms functionalization produces (running statistics as outputs), softmax,
// log_softmax and nll_loss with their backwards, threshold_backward (ReLU's), dropout (axle's
// generator, so torch.manual_seed governs the mask) and advanced indexing.
//
// Backward ops with an axle counterpart call it through ops::call (Conv2dBackwardInput, ...);
// a backward that needs the forward's internal state (max pooling's workspace) recomputes the
// forward from its input: axle's CSE merges the recompute with the forward in the step graph.
#include <ATen/core/Reduction.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <functional>
#include <tuple>

#include "axle/autograd.h"
#include "axle/ops.h"
#include "axle/runtime.h"
#include "bridge.h"
#include "ops/op.h"

namespace axle_py {
namespace {

using at::Tensor;
using c10::IntArrayRef;
using std::optional;
namespace ops = axle::ops;
using ops::OpKind;

// ------------------------------------------------------------------ helpers

axle::Tensor ax_opt(const optional<Tensor>& t, const char* op) {
  return t && t->defined() ? ax(*t, op) : axle::Tensor();
}

/// An int64 [n] of 0..n-1, built in the graph (no host upload per call).
axle::Tensor iota(int64_t n) {
  axle::Tensor one = axle::expand(scalar(1, axle::kInt64), {n});
  return axle::sub(axle::cumsum(one, 0), scalar(1, axle::kInt64));
}

/// `v` reshaped to broadcast along dim `d` of a rank-`rank` tensor.
axle::Tensor along(const axle::Tensor& v, int64_t d, int64_t rank) {
  axle::Shape s(size_t(rank), 1);
  s[size_t(d)] = v.numel();
  return axle::reshape(v, s);
}

/// An empty [0] float32 tensor (what PyTorch's CPU kernels return for unused saved stats).
axle::Tensor empty0() { return axle::expand(scalar(0, axle::kFloat32), {0}); }

/// Two values from a PyTorch int[2] argument that may hold one (broadcast) or be empty (dflt).
std::array<int64_t, 2> pair_of(IntArrayRef v, std::array<int64_t, 2> dflt, const char* op, const char* name) {
  if (v.empty()) return dflt;
  TORCH_CHECK(v.size() == 1 || v.size() == 2, op, ": ", name, " must either be a single int, or a tuple of two ints");
  return {v[0], v.size() == 2 ? v[1] : v[0]};
}

/// Runs `f` on a batched 4-D view of `x`: an unbatched [C, H, W] input runs as a batch of one.
template <class F>
auto batched4(const axle::Tensor& x, const char* op, F f) {
  TORCH_CHECK(x.dim() == 3 || x.dim() == 4, op, ": Expected 3D or 4D (batch mode) tensor for input, but got: ",
              x.dim(), "D");
  return f(x.dim() == 3 ? axle::unsqueeze(x, 0) : x);
}
axle::Tensor unbatch_like(const axle::Tensor& y, const axle::Tensor& x) {
  return x.dim() == 3 ? axle::squeeze(y, 0) : y;
}

// ------------------------------------------------------------------ convolution

/// A 1-D convolution's arguments lifted to 2-D (height 1), or a 2-D one's as given.
struct ConvArgs {
  axle::Tensor x, w;
  std::vector<int64_t> stride, padding, dilation, output_padding;
  int64_t groups;
  bool one_d = false;
};

ConvArgs conv_args(const axle::Tensor& x, const axle::Tensor& w, IntArrayRef stride, IntArrayRef padding,
                   IntArrayRef dilation, IntArrayRef output_padding, int64_t groups, const char* op) {
  ConvArgs a{x, w, vec(stride), vec(padding), vec(dilation), vec(output_padding), groups};
  TORCH_CHECK(x.dim() == 3 || x.dim() == 4, "[", op, "] axle lowers 1-D and 2-D convolutions, got a ", x.dim(),
              "-D input ", c10::IntArrayRef(x.shape()));
  TORCH_CHECK(ops::same_float(x, w), "[", op, "] expected float32 or bfloat16 input and weight of one dtype on the ",
              "xla device, got ", x.dtype(), " and ", w.dtype());
  if (x.dim() == 3) {  // [N, C, L] -> [N, C, 1, L]
    a.one_d = true;
    a.x = axle::unsqueeze(x, 2);
    a.w = axle::unsqueeze(w, 2);
    auto lift = [](std::vector<int64_t>& v, int64_t fill) { v.insert(v.begin(), fill); };
    lift(a.stride, 1);
    lift(a.padding, 0);
    lift(a.dilation, 1);
    if (!a.output_padding.empty()) lift(a.output_padding, 0);
  }
  if (a.output_padding.empty()) a.output_padding = {0, 0};
  TORCH_CHECK(a.stride.size() == 2 && a.padding.size() == 2 && a.dilation.size() == 2 && a.output_padding.size() == 2,
              "[", op, "] expected stride, padding, dilation and output_padding of ", a.x.dim() - 2, " values each");
  return a;
}

axle::Tensor conv_forward(const ConvArgs& a, const axle::Tensor& b, bool transposed) {
  if (transposed)
    return axle::conv_transpose2d(a.x, a.w, b,
                                  {.stride = a.stride, .padding = a.padding, .output_padding = a.output_padding,
                                   .groups = a.groups, .dilation = a.dilation});
  return axle::conv2d(a.x, a.w, b, {.stride = a.stride, .padding = a.padding, .dilation = a.dilation, .groups = a.groups});
}

Tensor convolution_overrideable(const Tensor& input, const Tensor& weight, const optional<Tensor>& bias,
                                IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool transposed,
                                IntArrayRef output_padding, int64_t groups) {
  ConvArgs a = conv_args(ax(input, "convolution"), ax(weight, "convolution"), stride, padding, dilation,
                         output_padding, groups, "convolution");
  axle::Tensor y = conv_forward(a, ax_opt(bias, "convolution"), transposed);
  return wrap(a.one_d ? axle::squeeze(y, 2) : y);
}

/// conv2d's gradients through axle's backward ops (oneDNN's backward-data and -weights).
std::array<axle::Tensor, 3> conv2d_grads(const ConvArgs& a, const axle::Tensor& g, std::array<bool, 3> mask) {
  const auto &st = a.stride, &pd = a.padding, &dl = a.dilation;
  std::array<axle::Tensor, 3> r;
  if (mask[0]) {
    const axle::Shape& xs = a.x.shape();
    ops::attr::Conv2dBackwardInput bi{st[0], st[1], pd[0], pd[1], dl[0], dl[1], a.groups, xs[0], xs[1], xs[2], xs[3]};
    r[0] = ops::call1(OpKind::Conv2dBackwardInput, {g, a.w}, bi.pack());
  }
  if (mask[1]) {
    const axle::Shape& ws = a.w.shape();
    ops::attr::Conv2dBackwardWeight bw{st[0], st[1], pd[0], pd[1], dl[0], dl[1], a.groups,
                                       ws[0], ws[1], ws[2], ws[3], mask[2]};
    ops::Tensors gw = ops::call(OpKind::Conv2dBackwardWeight, {g, a.x}, bw.pack());
    r[1] = gw[0];
    if (mask[2]) r[2] = gw[1];
  } else if (mask[2]) {
    r[2] = axle::sum(g, {0, 2, 3});
  }
  return r;
}

/// Gradients of f at `xs` for the output gradient `g`, by axle's own vjps: f runs again on
/// detached leaves that require grad (CSE merges this forward with the original one).
std::vector<axle::Tensor> vjp_of(const std::function<axle::Tensor(const std::vector<axle::Tensor>&)>& f,
                                 const std::vector<axle::Tensor>& xs, const std::vector<bool>& need,
                                 const axle::Tensor& g) {
  std::vector<axle::Tensor> leaves;
  for (size_t i = 0; i < xs.size(); ++i) {
    axle::Tensor l = xs[i].defined() ? xs[i].detach() : axle::Tensor();
    if (l.defined() && need[i]) l.set_requires_grad(true);
    leaves.push_back(l);
  }
  {
    struct GradOn {  // PyTorch calls backward kernels with axle's grad mode as the user left it
      bool prev = axle::grad_enabled();
      GradOn() { axle::set_grad_enabled(true); }
      ~GradOn() { axle::set_grad_enabled(prev); }
    } on;
    f(leaves).backward(g);
  }
  std::vector<axle::Tensor> r;
  for (size_t i = 0; i < xs.size(); ++i) {
    axle::Tensor gi;
    if (need[i] && leaves[i].defined()) {
      gi = leaves[i].grad();
      if (!gi.defined()) gi = axle::mul(leaves[i], 0.0);
    }
    r.push_back(gi);
  }
  return r;
}

std::tuple<Tensor, Tensor, Tensor> convolution_backward_overrideable(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, IntArrayRef stride, IntArrayRef padding,
    IntArrayRef dilation, bool transposed, IntArrayRef output_padding, int64_t groups, std::array<bool, 3> mask) {
  const char* op = "convolution_backward";
  ConvArgs a = conv_args(ax(input, op), ax(weight, op), stride, padding, dilation, output_padding, groups, op);
  axle::Tensor g = ax(grad_output, op);
  if (a.one_d) g = axle::unsqueeze(g, 2);
  std::array<axle::Tensor, 3> r;
  if (!transposed) {
    r = conv2d_grads(a, g, mask);
  } else {
    auto gx_gw = vjp_of([&](const std::vector<axle::Tensor>& l) {
      ConvArgs b = a;
      b.x = l[0];
      b.w = l[1];
      return conv_forward(b, {}, true);
    }, {a.x, a.w}, {mask[0], mask[1]}, g);
    r = {gx_gw[0], gx_gw[1], mask[2] ? axle::sum(g, {0, 2, 3}) : axle::Tensor()};
  }
  if (a.one_d) {
    if (r[0].defined()) r[0] = axle::squeeze(r[0], 2);
    if (r[1].defined()) r[1] = axle::squeeze(r[1], 2);
  }
  auto out = [](const axle::Tensor& t) { return t.defined() ? wrap(t) : Tensor(); };
  return {out(r[0]), out(r[1]), out(r[2])};
}

// ------------------------------------------------------------------ pooling

struct Window {
  std::array<int64_t, 2> k, s, p, d;
  bool ceil;
};

Window pool_window(IntArrayRef kernel, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool ceil,
                   const char* op) {
  Window w;
  TORCH_CHECK(!kernel.empty(), op, ": kernel_size must either be a single int, or a tuple of two ints");
  w.k = pair_of(kernel, {0, 0}, op, "kernel_size");
  w.s = pair_of(stride, w.k, op, "stride");
  w.p = pair_of(padding, {0, 0}, op, "padding");
  w.d = pair_of(dilation, {1, 1}, op, "dilation");
  w.ceil = ceil;
  TORCH_CHECK(w.k[0] > 0 && w.k[1] > 0, op, ": kernel size should be greater than zero, but got kH: ", w.k[0],
              " kW: ", w.k[1]);
  TORCH_CHECK(w.s[0] > 0 && w.s[1] > 0, op, ": stride should be greater than zero, but got dH: ", w.s[0],
              " dW: ", w.s[1]);
  TORCH_CHECK(w.d[0] > 0 && w.d[1] > 0, op, ": dilation should be greater than zero, but got dilationH: ", w.d[0],
              " dilationW: ", w.d[1]);
  for (int i : {0, 1})
    TORCH_CHECK(w.p[i] >= 0 && w.p[i] <= w.k[i] / 2, "pad should be at most half of effective kernel size, but got pad=",
                w.p[i], ", kernel_size=", w.k[i], " and dilation=", w.d[i]);
  return w;
}

ops::Attrs max_attrs(const Window& w) {
  return ops::attr::MaxPool2d{w.k[0], w.k[1], w.s[0], w.s[1], w.p[0], w.p[1], w.d[0], w.d[1], w.ceil}.pack();
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& self, IntArrayRef kernel, IntArrayRef stride,
                                                   IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  const char* op = "max_pool2d";
  Window w = pool_window(kernel, stride, padding, dilation, ceil_mode, op);
  axle::Tensor x = ax(self, op);
  return batched4(x, op, [&](const axle::Tensor& x4) {
    ops::Tensors yw = ops::call(OpKind::MaxPool2d, {x4}, max_attrs(w));
    // The workspace holds the argmax's place a*kw + b inside its window; PyTorch's index is
    // the flat h*W + w of the input plane, h = oh*sh - ph + a*dh, w = ow*sw - pw + b*dw.
    const int64_t W = x4.size(3), OH = yw[0].size(2), OW = yw[0].size(3);
    axle::Tensor ws = cast_to(yw[1], axle::kInt64);
    axle::Tensor a = cast_to(axle::div(cast_to(ws, axle::kFloat32), double(w.k[1])), axle::kInt64);  // exact: small ints
    axle::Tensor b = axle::sub(ws, axle::mul(a, double(w.k[1])));
    axle::Tensor h0 = along(axle::sub(axle::mul(iota(OH), double(w.s[0])), double(w.p[0])), 2, 4);
    axle::Tensor w0 = along(axle::sub(axle::mul(iota(OW), double(w.s[1])), double(w.p[1])), 3, 4);
    axle::Tensor h = axle::add(h0, w.d[0] == 1 ? a : axle::mul(a, double(w.d[0])));
    axle::Tensor c = axle::add(w0, w.d[1] == 1 ? b : axle::mul(b, double(w.d[1])));
    axle::Tensor idx = axle::add(axle::mul(h, double(W)), c);
    return std::make_tuple(wrap(unbatch_like(yw[0], x)), wrap(unbatch_like(idx, x)));
  });
}

Tensor max_pool2d_with_indices_backward(const Tensor& grad_output, const Tensor& self, IntArrayRef kernel,
                                        IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool ceil_mode,
                                        const Tensor& /*indices: recomputed*/) {
  const char* op = "max_pool2d_with_indices_backward";
  Window w = pool_window(kernel, stride, padding, dilation, ceil_mode, op);
  axle::Tensor x = ax(self, op), g = ax(grad_output, op);
  return batched4(x, op, [&](const axle::Tensor& x4) {
    // The workspace again from the input (the same op as the forward's: merged by CSE).
    ops::Tensors yw = ops::call(OpKind::MaxPool2d, {x4}, max_attrs(w));
    axle::Tensor g4 = g.dim() == 3 ? axle::unsqueeze(g, 0) : g;
    TORCH_CHECK(g4.shape() == yw[0].shape(), op, ": expected grad_output of shape ",
                c10::IntArrayRef(unbatch_like(yw[0], x).shape()), ", got ", grad_output.sizes());
    ops::attr::MaxPool2dBackward bw{w.k[0], w.k[1], w.s[0], w.s[1], w.p[0], w.p[1], w.d[0], w.d[1], w.ceil};
    axle::Tensor gx = ops::call1(OpKind::MaxPool2dBackward, {g4, x4, yw[1]}, bw.pack());
    return wrap(unbatch_like(gx, x));
  });
}

/// Output size along one dim (PyTorch's pooling_output_shape).
int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil) {
  int64_t num = in + 2 * p - k + (ceil ? s - 1 : 0);
  int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil && (o - 1) * s >= in + p) --o;
  return o;
}

/// avg_pool2d's divisor_override as a factor on the count_include_pad result: per output
/// position, (the window clipped to the padded input) / divisor (a small host constant).
axle::Tensor divisor_factor(const Window& w, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t divisor) {
  at::Tensor f = at::empty({OH, OW}, at::kFloat);
  auto fa = f.accessor<float, 2>();
  for (int64_t i = 0; i < OH; ++i) {
    int64_t h0 = i * w.s[0] - w.p[0], h1 = std::min(h0 + w.k[0], H + w.p[0]);
    for (int64_t j = 0; j < OW; ++j) {
      int64_t w0 = j * w.s[1] - w.p[1], w1 = std::min(w0 + w.k[1], W + w.p[1]);
      fa[i][j] = float(double((h1 - h0) * (w1 - w0)) / double(divisor));
    }
  }
  return cpu_to_axle(f, "avg_pool2d");
}

ops::Attrs avg_attrs(const Window& w, bool count_include_pad) {
  return ops::attr::AvgPool2d{w.k[0], w.k[1], w.s[0], w.s[1], w.p[0], w.p[1], count_include_pad, w.ceil}.pack();
}

Tensor avg_pool2d(const Tensor& self, IntArrayRef kernel, IntArrayRef stride, IntArrayRef padding, bool ceil_mode,
                  bool count_include_pad, optional<int64_t> divisor_override) {
  const char* op = "avg_pool2d";
  Window w = pool_window(kernel, stride, padding, {}, ceil_mode, op);
  TORCH_CHECK(!divisor_override || *divisor_override != 0, "divisor must be not zero");
  axle::Tensor x = ax(self, op);
  return batched4(x, op, [&](const axle::Tensor& x4) {
    axle::Tensor y = ops::call1(OpKind::AvgPool2d, {x4}, avg_attrs(w, count_include_pad || divisor_override));
    if (divisor_override)
      y = axle::mul(y, divisor_factor(w, x4.size(2), x4.size(3), y.size(2), y.size(3), *divisor_override));
    return wrap(unbatch_like(y, x));
  });
}

Tensor avg_pool2d_backward(const Tensor& grad_output, const Tensor& self, IntArrayRef kernel, IntArrayRef stride,
                           IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                           optional<int64_t> divisor_override) {
  const char* op = "avg_pool2d_backward";
  Window w = pool_window(kernel, stride, padding, {}, ceil_mode, op);
  axle::Tensor x = ax(self, op), g = ax(grad_output, op);
  return batched4(x, op, [&](const axle::Tensor& x4) {
    axle::Tensor g4 = g.dim() == 3 ? axle::unsqueeze(g, 0) : g;
    const int64_t H = x4.size(2), W = x4.size(3);
    TORCH_CHECK(g4.dim() == 4 && g4.size(2) == pool_out(H, w.k[0], w.s[0], w.p[0], w.ceil) &&
                    g4.size(3) == pool_out(W, w.k[1], w.s[1], w.p[1], w.ceil),
                op, ": grad_output ", grad_output.sizes(), " does not match the pooling of input ", self.sizes());
    if (divisor_override) g4 = axle::mul(g4, divisor_factor(w, H, W, g4.size(2), g4.size(3), *divisor_override));
    ops::attr::AvgPool2dBackward bw{w.k[0], w.k[1], w.s[0], w.s[1], w.p[0], w.p[1], count_include_pad || divisor_override,
                                    w.ceil, x4.size(0), x4.size(1), H, W};
    return wrap(unbatch_like(ops::call1(OpKind::AvgPool2dBackward, {g4}, bw.pack()), x));
  });
}

Tensor adaptive_avg_pool2d(const Tensor& self, IntArrayRef output_size) {
  const char* op = "adaptive_avg_pool2d";
  TORCH_CHECK(output_size.size() == 2, op, ": output_size must be 2");
  TORCH_CHECK(output_size[0] >= 0 && output_size[1] >= 0, op,
              ": elements of output_size must be greater than or equal to 0 but received {", output_size[0], ", ",
              output_size[1], "}");
  axle::Tensor x = ax(self, op);
  return batched4(x, op, [&](const axle::Tensor& x4) {
    return wrap(unbatch_like(axle::adaptive_avg_pool2d(x4, vec(output_size)), x));
  });
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Tensor& self) {
  const char* op = "adaptive_avg_pool2d_backward";
  axle::Tensor x = ax(self, op), g = ax(grad_output, op);
  TORCH_CHECK(g.dim() == x.dim(), op, ": expected grad_output of rank ", x.dim(), ", got ", g.dim());
  return batched4(x, op, [&](const axle::Tensor& x4) {
    axle::Tensor g4 = g.dim() == 3 ? axle::unsqueeze(g, 0) : g;
    ops::attr::AdaptiveAvgPool2dBackward bw{x4.size(2), x4.size(3)};
    return wrap(unbatch_like(ops::call1(OpKind::AdaptiveAvgPool2dBackward, {g4}, bw.pack()), x));
  });
}

// ------------------------------------------------------------------ batch norm

/// [C] per-channel values shaped [1, C, 1, ...] against x.
axle::Tensor per_channel(const axle::Tensor& v, const axle::Tensor& x) { return along(v, 1, x.dim()); }

axle::Shape bn_dims(const axle::Tensor& x) {
  axle::Shape d{0};
  for (int64_t i = 2; i < x.dim(); ++i) d.push_back(i);
  return d;
}

struct BnOut {
  axle::Tensor y, save_mean, save_invstd, running_mean, running_var;
};

/// PyTorch's batch norm: batch statistics in training (the running ones updated with momentum
/// and the unbiased variance), the running statistics otherwise.
BnOut bn_forward(const axle::Tensor& x, const axle::Tensor& weight, const axle::Tensor& bias,
                 const axle::Tensor& rm, const axle::Tensor& rv, bool training, double momentum, double eps,
                 const char* op) {
  TORCH_CHECK(x.dim() >= 2, op, ": expected 2D or more input (got ", x.dim(), "D input)");
  TORCH_CHECK(x.dtype() == axle::kFloat32, op, ": expected a float32 input on the xla device");
  const int64_t C = x.size(1);
  for (const axle::Tensor* t : {&weight, &bias, &rm, &rv})
    TORCH_CHECK(!t->defined() || t->shape() == axle::Shape{C}, op, ": expected per-channel tensors of size ", C,
                ", got ", c10::IntArrayRef(t->shape()));
  BnOut r;
  r.running_mean = rm;
  r.running_var = rv;
  axle::Tensor mean, invstd;
  if (training) {
    const int64_t n = x.numel() / std::max<int64_t>(C, 1);
    TORCH_CHECK(n > 1, "Expected more than 1 value per channel when training, got input size ",
                c10::IntArrayRef(x.shape()));
    axle::Shape dims = bn_dims(x);
    mean = axle::mean(x, dims);
    axle::Tensor d = axle::sub(x, per_channel(mean, x));
    axle::Tensor var = axle::mean(axle::mul(d, d), dims);
    invstd = axle::rsqrt(axle::add(var, eps));
    r.save_mean = mean;
    r.save_invstd = invstd;
    if (rm.defined()) r.running_mean = axle::add(axle::mul(rm, 1.0 - momentum), axle::mul(mean, momentum));
    if (rv.defined())
      r.running_var = axle::add(axle::mul(rv, 1.0 - momentum), axle::mul(var, momentum * double(n) / double(n - 1)));
  } else {
    TORCH_CHECK(rm.defined() && rv.defined(), op, ": running_mean and running_var must be defined in evaluation mode");
    mean = rm;
    invstd = axle::rsqrt(axle::add(rv, eps));
    r.save_mean = empty0();
    r.save_invstd = empty0();
  }
  // y = (x - mean) * (invstd * weight) + bias
  axle::Tensor scale = weight.defined() ? axle::mul(invstd, weight) : invstd;
  axle::Tensor y = axle::mul(axle::sub(x, per_channel(mean, x)), per_channel(scale, x));
  if (bias.defined()) y = axle::add(y, per_channel(bias, x));
  r.y = y;
  return r;
}

/// Gradients of batch norm: with batch statistics (train) through the mean and variance,
/// else with the running statistics as constants.
std::tuple<Tensor, Tensor, Tensor> bn_backward(const Tensor& grad_out, const Tensor& input, const optional<Tensor>& weight,
                                               const optional<Tensor>& running_mean,
                                               const optional<Tensor>& running_var, const optional<Tensor>& save_mean,
                                               const optional<Tensor>& save_invstd, bool train, double eps,
                                               std::array<bool, 3> mask, const char* op) {
  axle::Tensor g = ax(grad_out, op), x = ax(input, op), w = ax_opt(weight, op);
  axle::Tensor mean, invstd;
  if (train) {
    mean = ax_opt(save_mean, op);
    invstd = ax_opt(save_invstd, op);
    TORCH_CHECK(mean.defined() && invstd.defined() && mean.numel() == x.size(1), op,
                ": expected the saved mean and invstd of the training forward");
  } else {
    mean = ax_opt(running_mean, op);
    axle::Tensor rv = ax_opt(running_var, op);
    TORCH_CHECK(mean.defined() && rv.defined(), op, ": expected running_mean and running_var in evaluation mode");
    invstd = axle::rsqrt(axle::add(rv, eps));
  }
  axle::Shape dims = bn_dims(x);
  axle::Tensor xhat = axle::mul(axle::sub(x, per_channel(mean, x)), per_channel(invstd, x));
  axle::Tensor gb = axle::sum(g, dims);
  axle::Tensor gw = axle::sum(axle::mul(g, xhat), dims);
  axle::Tensor gx;
  if (mask[0]) {
    axle::Tensor scale = w.defined() ? axle::mul(invstd, w) : invstd;
    if (train) {  // scale * (g - mean(g) - xhat * mean(g * xhat))
      const double n = double(x.numel() / std::max<int64_t>(x.size(1), 1));
      axle::Tensor inner = axle::sub(axle::sub(g, per_channel(axle::div(gb, n), x)),
                                     axle::mul(xhat, per_channel(axle::div(gw, n), x)));
      gx = axle::mul(inner, per_channel(scale, x));
    } else {
      gx = axle::mul(g, per_channel(scale, x));
    }
  }
  auto out = [](bool want, const axle::Tensor& t) { return want ? wrap(t) : Tensor(); };
  return {out(mask[0], gx), out(mask[1], gw), out(mask[2], gb)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> native_batch_norm_legit_functional(
    const Tensor& input, const optional<Tensor>& weight, const optional<Tensor>& bias, const Tensor& running_mean,
    const Tensor& running_var, bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  BnOut r = bn_forward(ax(input, op), ax_opt(weight, op), ax_opt(bias, op), ax(running_mean, op), ax(running_var, op),
                       training, momentum, eps, op);
  return {wrap(r.y), wrap(r.save_mean), wrap(r.save_invstd), wrap(r.running_mean), wrap(r.running_var)};
}

std::tuple<Tensor, Tensor, Tensor> native_batch_norm_legit_no_training(const Tensor& input,
                                                                       const optional<Tensor>& weight,
                                                                       const optional<Tensor>& bias,
                                                                       const Tensor& running_mean,
                                                                       const Tensor& running_var, double momentum,
                                                                       double eps) {
  const char* op = "batch_norm";
  BnOut r = bn_forward(ax(input, op), ax_opt(weight, op), ax_opt(bias, op), ax(running_mean, op), ax(running_var, op),
                       false, momentum, eps, op);
  return {wrap(r.y), wrap(r.save_mean), wrap(r.save_invstd)};
}

std::tuple<Tensor, Tensor, Tensor> native_batch_norm_legit_no_stats(const Tensor& input, const optional<Tensor>& weight,
                                                                    const optional<Tensor>& bias, bool training,
                                                                    double momentum, double eps) {
  const char* op = "batch_norm";
  TORCH_CHECK(training, op, ": running_mean and running_var must be defined in evaluation mode");
  BnOut r = bn_forward(ax(input, op), ax_opt(weight, op), ax_opt(bias, op), {}, {}, true, momentum, eps, op);
  return {wrap(r.y), wrap(r.save_mean), wrap(r.save_invstd)};
}

/// The in-place forms (native_batch_norm, _native_batch_norm_legit): the running statistics'
/// xla tensors take their new values.
void set_running(const optional<Tensor>& t, const axle::Tensor& v) {
  if (t && t->defined() && v.defined()) impl_of(*t, "batch_norm")->set_value(v);
}

std::tuple<Tensor, Tensor, Tensor> native_batch_norm(const Tensor& input, const optional<Tensor>& weight,
                                                     const optional<Tensor>& bias,
                                                     const optional<Tensor>& running_mean,
                                                     const optional<Tensor>& running_var, bool training,
                                                     double momentum, double eps) {
  const char* op = "batch_norm";
  BnOut r = bn_forward(ax(input, op), ax_opt(weight, op), ax_opt(bias, op), ax_opt(running_mean, op),
                       ax_opt(running_var, op), training, momentum, eps, op);
  if (training) {
    set_running(running_mean, r.running_mean);
    set_running(running_var, r.running_var);
  }
  return {wrap(r.y), wrap(r.save_mean), wrap(r.save_invstd)};
}

std::tuple<Tensor, Tensor, Tensor> native_batch_norm_legit(const Tensor& input, const optional<Tensor>& weight,
                                                           const optional<Tensor>& bias, Tensor& running_mean,
                                                           Tensor& running_var, bool training, double momentum,
                                                           double eps) {
  return axle_py::native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps);
}

std::tuple<Tensor, Tensor, Tensor> native_batch_norm_backward(const Tensor& grad_out, const Tensor& input,
                                                              const optional<Tensor>& weight,
                                                              const optional<Tensor>& running_mean,
                                                              const optional<Tensor>& running_var,
                                                              const optional<Tensor>& save_mean,
                                                              const optional<Tensor>& save_invstd, bool train,
                                                              double eps, std::array<bool, 3> mask) {
  return bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, mask,
                     "native_batch_norm_backward");
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad_out, const Tensor& input,
                                                       const Tensor& weight, const optional<Tensor>& running_mean,
                                                       const optional<Tensor>& running_var,
                                                       const optional<Tensor>& save_mean,
                                                       const optional<Tensor>& save_var, bool update, double eps,
                                                       std::array<bool, 3> mask, const Tensor&) {
  // save_var holds the inverse standard deviation (PyTorch's naming); `update` is training.
  return bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps, mask,
                     "batch_norm_backward");
}

// _batch_norm_with_update_functional (functionalization's form of the mutating
// _batch_norm_with_update): (out, save_mean, save_invstd, reserve, running_mean_out,
// running_var_out); reserve is empty off cuDNN.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> batch_norm_with_update_functional(
    const Tensor& input, const optional<Tensor>& weight, const optional<Tensor>& bias, const Tensor& running_mean,
    const Tensor& running_var, double momentum, double eps) {
  const char* op = "batch_norm";
  BnOut r = bn_forward(ax(input, op), ax_opt(weight, op), ax_opt(bias, op), ax(running_mean, op), ax(running_var, op),
                       true, momentum, eps, op);
  return {wrap(r.y), wrap(r.save_mean), wrap(r.save_invstd), wrap(axle::expand(scalar(0, axle::kUInt8), {0})),
          wrap(r.running_mean), wrap(r.running_var)};
}

/// _batch_norm_no_update (eval with the running statistics; PyTorch's composite kernel calls
/// the cpu kernel directly, so it needs its own).
std::tuple<Tensor, Tensor, Tensor, Tensor> batch_norm_no_update(const Tensor& input, const optional<Tensor>& weight,
                                                                const optional<Tensor>& bias,
                                                                const optional<Tensor>& running_mean,
                                                                const optional<Tensor>& running_var, double momentum,
                                                                double eps) {
  const char* op = "batch_norm";
  BnOut r = bn_forward(ax(input, op), ax_opt(weight, op), ax_opt(bias, op), ax_opt(running_mean, op),
                       ax_opt(running_var, op), false, momentum, eps, op);
  return {wrap(r.y), wrap(r.save_mean), wrap(r.save_invstd), wrap(axle::expand(scalar(0, axle::kUInt8), {0}))};
}

// ------------------------------------------------------------------ softmax, losses, activations

/// `x` as at least 1-D (softmax of a 0-d tensor runs on its one element).
int64_t softmax_dim(const axle::Tensor& x, int64_t dim) { return c10::maybe_wrap_dim(dim, std::max<int64_t>(x.dim(), 1)); }

template <OpKind K>
Tensor softmax_like(const Tensor& self, int64_t dim, bool half_to_float, const char* op) {
  TORCH_CHECK(!half_to_float, op, ": conversion from Half to Float is not supported on the xla device");
  axle::Tensor x = ax(self, op);
  TORCH_CHECK(ops::is_float_kernel_dtype(x.dtype()), op, ": expected a float32 or bfloat16 input on the xla device, got ",
              axle::dtype_name(x.dtype()));
  dim = softmax_dim(x, dim);
  if (x.dim() == 0) return wrap(axle::squeeze(ops::call1(K, {axle::unsqueeze(x, 0)}, {.ints = {0}}), 0));
  return wrap(ops::call1(K, {x}, {.ints = {dim}}));
}
Tensor log_softmax(const Tensor& self, int64_t dim, bool half_to_float) {
  return softmax_like<OpKind::LogSoftmax>(self, dim, half_to_float, "log_softmax");
}
Tensor softmax(const Tensor& self, int64_t dim, bool half_to_float) {
  return softmax_like<OpKind::Softmax>(self, dim, half_to_float, "softmax");
}

template <OpKind K>
Tensor softmax_backward_like(const Tensor& grad, const Tensor& output, int64_t dim, const char* op) {
  axle::Tensor g = ax(grad, op), y = ax(output, op);
  TORCH_CHECK(g.shape() == y.shape(), op, ": expected grad_output and output of one shape, got ", grad.sizes(),
              " and ", output.sizes());
  dim = softmax_dim(y, dim);
  if (y.dim() == 0)
    return wrap(axle::squeeze(ops::call1(K, {axle::unsqueeze(g, 0), axle::unsqueeze(y, 0)}, {.ints = {0}}), 0));
  return wrap(ops::call1(K, {g, y}, {.ints = {dim}}));
}
Tensor log_softmax_backward_data(const Tensor& grad, const Tensor& output, int64_t dim, at::ScalarType) {
  return softmax_backward_like<OpKind::LogSoftmaxBackward>(grad, output, dim, "log_softmax_backward");
}
Tensor softmax_backward_data(const Tensor& grad, const Tensor& output, int64_t dim, at::ScalarType) {
  return softmax_backward_like<OpKind::SoftmaxBackward>(grad, output, dim, "softmax_backward");
}

/// nll_loss's operands: an unbatched [C] input with a 0-d target runs as a batch of one.
struct NllArgs {
  axle::Tensor x, t;
  bool unbatched = false;
};
NllArgs nll_args(const Tensor& self, const Tensor& target, const char* op) {
  NllArgs a{ax(self, op), ax(target, op)};
  TORCH_CHECK(a.x.dim() >= 1, op, ": input tensor should be 1D or 2D");
  TORCH_CHECK(a.t.dtype() == axle::kInt64 || a.t.dtype() == axle::kInt32 || a.t.dtype() == axle::kUInt8, op,
              ": expected scalar type Long but found ", c10::toString(target.scalar_type()));
  a.t = cast_to(a.t, axle::kInt64);
  if (a.x.dim() == 1) {
    TORCH_CHECK(a.t.dim() <= 1 && a.t.numel() == 1, op, ": 0D or 1D target tensor expected, multi-target not supported");
    a.unbatched = true;
    a.x = axle::unsqueeze(a.x, 0);
    a.t = axle::reshape(a.t, {1});
  }
  TORCH_CHECK(a.t.dim() == a.x.dim() - 1 && a.t.size(0) == a.x.size(0), op, ": Expected input batch_size (",
              a.x.size(0), ") to match target batch_size (", a.t.dim() ? a.t.size(0) : 0, ").");
  return a;
}

axle::Tensor not_ignored(const NllArgs& a, int64_t ignore_index) {
  return axle::ne(a.t, scalar(double(ignore_index), axle::kInt64));
}
/// The targets with ignored ones at class 0 (an index in range; their weight is 0).
axle::Tensor safe_targets(const NllArgs& a, int64_t ignore_index) {
  return axle::where(not_ignored(a, ignore_index), a.t, scalar(0, axle::kInt64));
}
/// The per-element weights of the targets (weight[t], 0 where ignored), [N, d...].
axle::Tensor target_weights(const NllArgs& a, const axle::Tensor& weight, int64_t ignore_index) {
  axle::Tensor safe = safe_targets(a, ignore_index);
  axle::Tensor wt = axle::reshape(axle::index_select(weight, 0, axle::reshape(safe, {safe.numel()})), a.t.shape());
  return axle::mul(wt, cast_to(not_ignored(a, ignore_index), axle::kFloat32));
}

std::tuple<Tensor, Tensor> nll_loss_forward(const Tensor& self, const Tensor& target, const optional<Tensor>& weight,
                                            int64_t reduction, int64_t ignore_index) {
  const char* op = "nll_loss";
  NllArgs a = nll_args(self, target, op);
  axle::Tensor w = ax_opt(weight, op);
  TORCH_CHECK(!w.defined() || w.numel() == a.x.size(1), "weight tensor should be defined either for all ", a.x.size(1),
              " classes or no classes but got weight tensor of shape: ", weight->sizes());
  TORCH_CHECK(reduction >= 0 && reduction <= 2, op, ": unknown reduction ", reduction);
  axle::Tensor out, total;
  if (!w.defined()) {
    out = ops::call1(OpKind::NllLoss, {a.x, a.t}, {.ints = {reduction, ignore_index}});
    total = reduction == 0 ? scalar(0, axle::kFloat32) : axle::sum(cast_to(not_ignored(a, ignore_index), axle::kFloat32));
  } else {
    // -weight[t] * x[t] per element, divided by the targets' total weight for the mean.
    axle::Tensor wt = target_weights(a, w, ignore_index);
    axle::Tensor picked = axle::squeeze(axle::gather(a.x, 1, axle::unsqueeze(safe_targets(a, ignore_index), 1)), 1);
    axle::Tensor per = axle::neg(axle::mul(picked, wt));
    total = reduction == 0 ? scalar(0, axle::kFloat32) : axle::sum(wt);
    out = reduction == 0 ? per : reduction == 2 ? axle::sum(per) : axle::div(axle::sum(per), total);
  }
  if (a.unbatched && reduction == 0) out = axle::reshape(out, {});
  return {wrap(out), wrap(total)};
}

Tensor nll_loss_backward(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                         const optional<Tensor>& weight, int64_t reduction, int64_t ignore_index,
                         const Tensor& total_weight) {
  const char* op = "nll_loss_backward";
  NllArgs a = nll_args(self, target, op);
  axle::Tensor g = ax(grad_output, op), w = ax_opt(weight, op);
  if (a.unbatched && reduction == 0) g = axle::reshape(g, {1});
  axle::Tensor gx;
  if (!w.defined()) {
    gx = ops::call1(OpKind::NllLossBackward, {g, a.t, a.x}, {.ints = {reduction, ignore_index}});
  } else {
    axle::Tensor wt = target_weights(a, w, ignore_index);
    axle::Tensor per = axle::neg(axle::mul(wt, g));  // d loss / d x[t]; 0 at ignored targets
    if (reduction == 1) per = axle::div(per, ax(total_weight, op));
    axle::Tensor zeros = axle::expand(scalar(0, axle::kFloat32), a.x.shape());
    gx = axle::scatter(zeros, 1, axle::unsqueeze(safe_targets(a, ignore_index), 1), axle::unsqueeze(per, 1));
  }
  return wrap(a.unbatched ? axle::squeeze(gx, 0) : gx);
}

Tensor threshold_backward(const Tensor& grad_output, const Tensor& self, const at::Scalar& threshold) {
  // grad where self > threshold, 0 elsewhere (a NaN self passes the gradient, as PyTorch's).
  at::ScalarType rt = at::result_type(grad_output, self);
  axle::Tensor g = cast_to(ax(grad_output, "threshold_backward"), rt), x = ax(self, "threshold_backward");
  // ReLU's (threshold 0): axle's relu_backward, which the compiler fuses into a max pooling's
  // backward before it.
  if (threshold.toDouble() == 0 && g.dtype() == axle::kFloat32 && x.dtype() == axle::kFloat32 && g.shape() == x.shape())
    return wrap(ops::call1(OpKind::ReluBackward, {g, x}));
  axle::Tensor mask = axle::le(x, scalar(threshold.toDouble(), x.dtype()));
  return wrap(axle::where(mask, scalar(0, g.dtype()), g));
}

Tensor threshold(const Tensor& self, const at::Scalar& threshold, const at::Scalar& value) {
  // x <= threshold ? value : x
  axle::Tensor x = ax(self, "threshold");
  axle::Tensor mask = axle::le(x, scalar(threshold.toDouble(), x.dtype()));
  return wrap(axle::where(mask, scalar(value.toDouble(), x.dtype()), x));
}

std::tuple<Tensor, Tensor> native_dropout(const Tensor& input, double p, optional<bool> train) {
  axle::Tensor x = ax(input, "dropout");
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  if (train.has_value() && !*train) {
    return {wrap(x), wrap(axle::expand(scalar(1, axle::kBool), x.shape()))};
  }
  if (p == 1) return {wrap(axle::mul(x, 0.0)), wrap(axle::expand(scalar(0, axle::kBool), x.shape()))};
  // Keep with probability 1 - p: the mask from axle's generator (torch.manual_seed seeds it).
  axle::Tensor mask = axle::lt(axle::rand(x.shape(), {.device = axle::device()}), scalar(1 - p, axle::kFloat32));
  axle::Tensor y = axle::mul(axle::mul(x, cast_to(mask, x.dtype())), 1.0 / (1.0 - p));
  return {wrap(y), wrap(mask)};
}

Tensor native_dropout_backward(const Tensor& grad_output, const Tensor& mask, double scale) {
  axle::Tensor g = ax(grad_output, "dropout_backward"), m = ax(mask, "dropout_backward");
  return wrap(axle::mul(axle::mul(g, cast_to(m, g.dtype())), scale));
}

// ------------------------------------------------------------------ advanced indexing

/// Advanced indices made flat: self permuted so the indexed dims come first (when they are not
/// adjacent, as PyTorch moves the broadcast index dims to the front) or stay in place, and one
/// int64 index into their flattened block.
struct FlatIndex {
  axle::Tensor x;         // self, permuted when needed
  int64_t start = 0;      // the first indexed dim of x
  int64_t count = 0;      // how many dims the indices cover
  axle::Tensor flat;      // int64, the broadcast index shape
  axle::Shape out_shape;  // the result's shape
  std::vector<int64_t> perm;  // x = self.permute(perm) when the indexed dims were not adjacent
};

axle::Tensor index_operand(const Tensor& t, const char* op) {
  if (is_xla(t) || t.dim() == 0) return ax(t, op);
  return cpu_to_axle(t, op);  // an index tensor on the cpu (as x[cpu_idx] allows)
}

FlatIndex flat_index(const Tensor& self, const c10::List<optional<Tensor>>& indices, const char* op) {
  axle::Tensor x = ax(self, op);
  std::vector<axle::Tensor> idx;  // per dim of self, undefined where not indexed
  for (const optional<Tensor>& o : indices) {
    if (!o || !o->defined()) {
      idx.emplace_back();
      continue;
    }
    const Tensor& t = *o;
    if (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte) {
      // A mask's indices depend on its values: read it (a host round trip, counted as nonzero's).
      note_fallback("aten::nonzero");
      at::Tensor m = is_xla(t) ? axle_to_cpu(ax(t, op)) : t;
      at::Tensor nz = at::nonzero(m.to(at::kBool));
      for (int64_t j = 0; j < m.dim(); ++j) idx.push_back(cpu_to_axle(nz.select(1, j).contiguous(), op));
      continue;
    }
    TORCH_CHECK_INDEX(t.scalar_type() == at::kLong || t.scalar_type() == at::kInt,
                      "tensors used as indices must be long, int, byte or bool tensors");
    idx.push_back(cast_to(index_operand(t, op), axle::kInt64));
  }
  TORCH_CHECK_INDEX(int64_t(idx.size()) <= x.dim(), "too many indices for tensor of dimension ", x.dim(),
                    " (got ", idx.size(), ")");
  idx.resize(size_t(x.dim()));
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (idx[size_t(d)].defined()) dims.push_back(d);
  TORCH_CHECK(!dims.empty(), op, ": expected at least one index tensor");
  bool adjacent = dims.back() - dims.front() + 1 == int64_t(dims.size());
  FlatIndex f;
  if (!adjacent) {  // the indexed dims first, the rest after in order
    std::vector<int64_t> perm = dims;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (!idx[size_t(d)].defined()) perm.push_back(d);
    std::vector<axle::Tensor> moved;
    for (int64_t d : perm) moved.push_back(idx[size_t(d)]);
    x = axle::permute(x, perm);
    idx = moved;
    f.start = 0;
    f.perm = perm;
  } else {
    f.start = dims.front();
  }
  f.count = int64_t(dims.size());
  // Broadcast the indices; wrap negatives; flatten row-major over the indexed block.
  axle::Shape bs;
  for (int64_t j = 0; j < f.count; ++j) {
    const axle::Shape& s = idx[size_t(f.start + j)].shape();
    bs = j == 0 ? s : ops::broadcast_shape(bs, s, "index");
  }
  axle::Tensor flat;
  for (int64_t j = 0; j < f.count; ++j) {
    const int64_t n = x.size(f.start + j);
    axle::Tensor i = idx[size_t(f.start + j)];
    i = axle::where(axle::lt(i, scalar(0, axle::kInt64)), axle::add(i, scalar(double(n), axle::kInt64)), i);
    i = i.shape() == bs ? i : axle::expand(i, bs);
    flat = flat.defined() ? axle::add(axle::mul(flat, double(n)), i) : i;
  }
  f.x = x;
  f.flat = flat;
  for (int64_t d = 0; d < f.start; ++d) f.out_shape.push_back(x.size(d));
  f.out_shape.insert(f.out_shape.end(), bs.begin(), bs.end());
  for (int64_t d = f.start + f.count; d < x.dim(); ++d) f.out_shape.push_back(x.size(d));
  return f;
}

/// x with its indexed block of dims merged into one: [prefix..., block, suffix...].
axle::Tensor merge_block(const FlatIndex& f) {
  axle::Shape s;
  int64_t block = 1;
  for (int64_t d = 0; d < f.start; ++d) s.push_back(f.x.size(d));
  for (int64_t d = f.start; d < f.start + f.count; ++d) block *= f.x.size(d);
  s.push_back(block);
  for (int64_t d = f.start + f.count; d < f.x.dim(); ++d) s.push_back(f.x.size(d));
  return axle::reshape(f.x, s);
}

Tensor index_tensor(const Tensor& self, const c10::List<optional<Tensor>>& indices) {
  FlatIndex f = flat_index(self, indices, "index");
  axle::Tensor m = merge_block(f);
  axle::Tensor r = axle::index_select(m, f.start, axle::reshape(f.flat, {f.flat.numel()}));
  return wrap(axle::reshape(r, f.out_shape));
}

/// index_put: values (broadcast to the indexed result's shape) written (or added) at the
/// indices, through scatter / scatter_add on the merged block.
Tensor index_put(const Tensor& self, const c10::List<optional<Tensor>>& indices, const Tensor& values,
                 bool accumulate) {
  const char* op = "index_put";
  FlatIndex f = flat_index(self, indices, op);
  axle::Tensor m = merge_block(f);
  axle::Tensor v = cast_to(ax(values, op), m.dtype());
  v = v.shape() == f.out_shape ? v : axle::expand(v, f.out_shape);
  // values and index as [prefix..., n, suffix...] with the index expanded over the others.
  const int64_t n = f.flat.numel();
  axle::Shape vs = m.shape();
  vs[size_t(f.start)] = n;
  v = axle::reshape(v, vs);
  axle::Tensor i = along(axle::reshape(f.flat, {n}), f.start, m.dim());
  i = axle::expand(i, vs);
  axle::Tensor r = accumulate ? axle::scatter_add(m, f.start, i, v) : axle::scatter(m, f.start, i, v);
  r = axle::reshape(r, f.x.shape());
  if (!f.perm.empty()) {  // undo the move of non-adjacent indexed dims to the front
    std::vector<int64_t> inv(f.perm.size());
    for (size_t k = 0; k < f.perm.size(); ++k) inv[size_t(f.perm[k])] = int64_t(k);
    r = axle::permute(r, inv);
  }
  return wrap(r);
}

Tensor index_put_impl(const Tensor& self, const c10::List<optional<Tensor>>& indices, const Tensor& values,
                      bool accumulate, bool) {
  return axle_py::index_put(self, indices, values, accumulate);
}

// ------------------------------------------------------------------ view backwards
// PyTorch's composite kernels of these write the gradient through a view of a zeros tensor
// (zeros.slice(...).copy_(grad)); below functionalization a view of an xla tensor is a new
// value, so that write would be lost: they are built from values here.

/// zeros of `sizes` with `grad` at start, start + step, ... along dim.
Tensor slice_backward(const Tensor& grad, IntArrayRef input_sizes, int64_t dim, int64_t start, int64_t end,
                      int64_t step) {
  axle::Tensor g = ax(grad, "slice_backward");
  const int64_t rank = int64_t(input_sizes.size());
  dim = c10::maybe_wrap_dim(dim, rank);
  TORCH_CHECK(step > 0, "slice step must be positive");
  const int64_t n = input_sizes[size_t(dim)], k = g.size(dim);
  auto zeros = [&](int64_t len) {
    axle::Shape s = g.shape();
    s[size_t(dim)] = len;
    return axle::expand(scalar(0, g.dtype()), s);
  };
  if (step > 1 && k > 0) {  // interleave step - 1 zeros after each element: [.., k, step, ..] -> [.., k * step, ..]
    axle::Tensor u = axle::unsqueeze(g, dim + 1);
    axle::Shape zs = u.shape();
    zs[size_t(dim + 1)] = step - 1;
    u = axle::cat({u, axle::expand(scalar(0, g.dtype()), zs)}, dim + 1);
    axle::Shape flat = g.shape();
    flat[size_t(dim)] = k * step;
    g = axle::slice(axle::reshape(u, flat), dim, 0, (k - 1) * step + 1);
  }
  std::vector<axle::Tensor> parts;
  start = std::clamp<int64_t>(start < 0 ? start + n : start, 0, n);
  const int64_t after = n - start - g.size(dim);
  TORCH_CHECK(after >= 0, "slice_backward: a gradient of ", grad.sizes(), " does not fit input sizes ", input_sizes,
              " at ", start, " along dim ", dim);
  if (start > 0) parts.push_back(zeros(start));
  parts.push_back(g);
  if (after > 0) parts.push_back(zeros(after));
  return wrap(parts.size() == 1 ? g : axle::cat(parts, dim));
}

Tensor select_backward(const Tensor& grad, IntArrayRef input_sizes, int64_t dim, int64_t index) {
  dim = c10::maybe_wrap_dim(dim, int64_t(input_sizes.size()));
  if (index < 0) index += input_sizes[size_t(dim)];
  Tensor g = wrap(axle::unsqueeze(ax(grad, "select_backward"), dim));
  return axle_py::slice_backward(g, input_sizes, dim, index, index + 1, 1);
}

/// new_empty_strided (functionalization's buffer for a write through a view): zeros, contiguous.
Tensor new_empty_strided(const Tensor& self, IntArrayRef size, IntArrayRef, optional<at::ScalarType> dtype,
                         optional<at::Layout>, optional<at::Device>, optional<bool>) {
  axle::DType t = to_axle_dtype(dtype.value_or(self.scalar_type()), "new_empty_strided");
  return wrap(axle::expand(scalar(0, t), vec(size)));
}

// ---- mse_loss: mean((x - y)^2) (reduction 0 none, 1 mean, 2 sum: at::Reduction) ----
Tensor mse_loss(const Tensor& self, const Tensor& target, int64_t reduction) {
  at::ScalarType rt = at::result_type(self, target);
  axle::Tensor d = axle::sub(cast_to(ax(self, "mse_loss"), rt), cast_to(ax(target, "mse_loss"), rt));
  axle::Tensor sq = axle::mul(d, d);
  if (reduction == at::Reduction::None) return wrap(sq);
  if (sq.dim() == 0) return wrap(sq);
  return wrap(reduction == at::Reduction::Mean ? axle::mean(sq) : axle::sum(sq));
}
// d/dx: 2 (x - y) grad, divided by numel for the mean
Tensor mse_loss_backward(const Tensor& grad, const Tensor& self, const Tensor& target, int64_t reduction) {
  at::ScalarType rt = at::result_type(self, target);
  axle::Tensor x = cast_to(ax(self, "mse_loss_backward"), rt), y = cast_to(ax(target, "mse_loss_backward"), rt);
  axle::Tensor d = axle::sub(x, y);
  if (d.shape() != x.shape()) d = axle::expand(d, x.shape());
  double k = reduction == at::Reduction::Mean && x.numel() > 0 ? 2.0 / double(d.numel()) : 2.0;
  return wrap(axle::mul(axle::mul(d, k), ax(grad, "mse_loss_backward")));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, XLA, m) {
  m.impl("mse_loss", TORCH_FN(mse_loss));
  m.impl("mse_loss_backward", TORCH_FN(mse_loss_backward));
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
  m.impl("max_pool2d_with_indices", TORCH_FN(max_pool2d_with_indices));
  m.impl("max_pool2d_with_indices_backward", TORCH_FN(max_pool2d_with_indices_backward));
  m.impl("avg_pool2d", TORCH_FN(avg_pool2d));
  m.impl("avg_pool2d_backward", TORCH_FN(avg_pool2d_backward));
  m.impl("_adaptive_avg_pool2d", TORCH_FN(adaptive_avg_pool2d));
  m.impl("_adaptive_avg_pool2d_backward", TORCH_FN(adaptive_avg_pool2d_backward));
  m.impl("_native_batch_norm_legit_functional", TORCH_FN(native_batch_norm_legit_functional));
  m.impl("_native_batch_norm_legit_no_training", TORCH_FN(native_batch_norm_legit_no_training));
  m.impl("_native_batch_norm_legit.no_stats", TORCH_FN(native_batch_norm_legit_no_stats));
  m.impl("_native_batch_norm_legit", TORCH_FN(native_batch_norm_legit));
  m.impl("native_batch_norm", TORCH_FN(native_batch_norm));
  m.impl("native_batch_norm_backward", TORCH_FN(native_batch_norm_backward));
  m.impl("batch_norm_backward", TORCH_FN(batch_norm_backward));
  m.impl("_batch_norm_with_update_functional", TORCH_FN(batch_norm_with_update_functional));
  m.impl("_batch_norm_no_update", TORCH_FN(batch_norm_no_update));
  m.impl("_log_softmax", TORCH_FN(log_softmax));
  m.impl("_softmax", TORCH_FN(softmax));
  m.impl("_log_softmax_backward_data", TORCH_FN(log_softmax_backward_data));
  m.impl("_softmax_backward_data", TORCH_FN(softmax_backward_data));
  m.impl("nll_loss_forward", TORCH_FN(nll_loss_forward));
  m.impl("nll_loss_backward", TORCH_FN(nll_loss_backward));
  m.impl("nll_loss2d_forward", TORCH_FN(nll_loss_forward));
  m.impl("nll_loss2d_backward", TORCH_FN(nll_loss_backward));
  m.impl("threshold", TORCH_FN(threshold));
  m.impl("threshold_backward", TORCH_FN(threshold_backward));
  m.impl("native_dropout", TORCH_FN(native_dropout));
  m.impl("native_dropout_backward", TORCH_FN(native_dropout_backward));
  m.impl("slice_backward", TORCH_FN(slice_backward));
  m.impl("new_empty_strided", TORCH_FN(new_empty_strided));
  m.impl("select_backward", TORCH_FN(select_backward));
  m.impl("index.Tensor", TORCH_FN(index_tensor));
  m.impl("index_put", TORCH_FN(index_put));
  m.impl("_index_put_impl", TORCH_FN(index_put_impl));
}

}  // namespace axle_py
