// 2-D convolution kernels on oneDNN: forward, backward-data (also conv_transpose2d's forward),
// backward-weights (+ fused bias gradient).
//
// Layout (dnnl_glue::conv_mode()): activations are NCHW-shaped axle tensors whose memory is
// NCHW or channels-last (NHWC strides); weights are always plain [O, C/g, kh, kw] for the user
// and reordered into the primitive's preferred (blocked) layout per call (they are small).
// Any other input strides are reordered by oneDNN into the primitive's layout; nothing is
// copied when the input already has it. Primitives and reorders are cached per configuration.
//
// Measured here (bench/micro.cpp cnn_trunk_step: N=128, conv 1->32 @28x28 and 32->64 @14x14,
// relu, 2x2 max-pool, forward + backward with autograd, 1 thread, median of 3-5, ms per step):
//   nchw (plain, gemm-based conv) 90-106 | channels-last 39 | blocked (reorders at the boundary) 53-65.
// Per primitive, brgemm/jit NHWC conv matches blocked (32->64: fwd 7.7 vs 8.2 ms, bwd-data 8.4 vs
// 8.3, bwd-weights 7.5 vs 8.4; NCHW 19-23), and channels-last needs no reorders at all since
// elementwise ops keep their input's layout (empty_like_dense) and 2x2 max-pooling on NHWC runs
// at memory speed (pool.cpp), while blocked pays ~8 ms of reorders per step.
// Default: channels-last (AXLE_CONV_LAYOUT=nchw|nhwc|blocked overrides).
// Known weak spot: backward-data of a 1-channel input in NHWC (9 ms vs 2.6 NCHW); training never
// asks for it (the images need no gradient).

#include <algorithm>
#include <cstring>

#include "axle/ops.h"
#include "backend/cpu/dnnl.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/loops.h"
#include "ops/kernels.h"
#include "ops/op.h"
#include "ops/conv.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

namespace dg = cpu::dnnl_glue;

using dnnl::memory;

using tag = dnnl::memory::format_tag;

// The conv geometry (ops/conv.h) with the oneDNN dims its primitives take.
struct Geom : ConvGeom {
  memory::dims strides() const { return {sh, sw}; }
  memory::dims dilates() const { return {dh - 1, dw - 1}; }
  memory::dims pad_l() const { return {ph, pw}; }
  memory::dims pad_r() const {
    return {(OH - 1) * sh + (kh - 1) * dh + 1 - H - ph, (OW - 1) * sw + (kw - 1) * dw + 1 - W - pw};
  }
  memory::dims wei_dims() const {
    if (g == 1) return {O, C / g, kh, kw};
    return {g, O / g, C / g, kh, kw};
  }
};

Geom make_geom(const Shape& x, const Shape& w, const Attrs& a, const char* op) { return {conv_geom(x, w, a, op)}; }

// The primitive's activation layout for the current mode; tag::any for blocked.
memory::desc inner_act(const Shape& s, dg::ConvMode m, DType t) {
  memory::dims d(s.begin(), s.end());
  if (m == dg::ConvMode::Blocked) return memory::desc(d, dg::to_dnnl(t), tag::any);
  return memory::desc(d, dg::to_dnnl(t), m == dg::ConvMode::ChannelsLast ? tag::nhwc : tag::nchw);
}

dg::Layout out_layout(dg::ConvMode m) {
  return m == dg::ConvMode::ChannelsLast ? dg::Layout::NHWC : dg::Layout::NCHW;
}

// The user tensor's layout as a descriptor (canonical strides when dense in a plain layout, preferring `pref`).
memory::desc user_act(const Tensor& t, dg::Layout pref) {
  const dg::Layout other = pref == dg::Layout::NCHW ? dg::Layout::NHWC : dg::Layout::NCHW;
  for (dg::Layout l : {pref, other})
    if (dg::is_dense(t, l)) return dg::strided_desc(t.shape(), dg::layout_strides(t.shape(), l), t.dtype());
  return dg::desc_of(t);
}

Shape act_strides(const memory::desc& d) {
  auto s = d.data.format_desc.blocking.strides;
  return Shape(s, s + d.data.ndims);
}

memory::desc user_wei(const Tensor& w, const Geom& q) {
  memory::desc d = dg::desc_of(w);
  if (q.g == 1) return d;
  Shape st = act_strides(d);
  return dg::strided_desc({q.g, q.O / q.g, q.C / q.g, q.kh, q.kw}, {st[0] * (q.O / q.g), st[0], st[1], st[2], st[3]},
                          w.dtype());
}

memory::desc any_wei(const Geom& q, DType t) { return memory::desc(q.wei_dims(), dg::to_dnnl(t), tag::any); }

memory::desc bias_desc(const Geom& q) { return memory::desc({q.O}, memory::data_type::f32, tag::x); }

// t: the activations' and weights' dtype (float32, or bfloat16 on the Native bf16 path).
dg::Key conv_key(const char* op, const Geom& q, dg::ConvMode m, DType t) {
  dg::Key k(op);
  k << int64_t(m) << int64_t(t) << q.N << q.C << q.H << q.W << q.O << q.kh << q.kw << q.sh << q.sw << q.ph << q.pw << q.dh << q.dw
    << q.g;
  return k;
}

dnnl::convolution_forward::primitive_desc fwd_pd(const Geom& q, const memory::desc& src, const memory::desc& wei,
                                                 const memory::desc* bias, const memory::desc& dst, bool relu = false) {
  auto d = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                  dnnl::algorithm::convolution_direct, src, wei, *bias, dst,
                                                  q.strides(), q.dilates(), q.pad_l(), q.pad_r())
                : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                  dnnl::algorithm::convolution_direct, src, wei, dst, q.strides(),
                                                  q.dilates(), q.pad_l(), q.pad_r());
  dnnl::primitive_attr attr = dg::default_attr();
  if (relu) {  // a relu epilogue, fused by the compiler (src/backend/cpu/fusion.cpp)
    dnnl::post_ops po;
    po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(po);
  }
  return dnnl::convolution_forward::primitive_desc(d, attr, dg::engine());
}

// ------------------------------------------------------------------ forward
struct FwdEntry {
  dnnl::convolution_forward prim;
  dg::Slot src, wei, dst;
  memory::desc bias;
  size_t scratch = 0;
};

Tensors conv_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const dg::ConvMode mode = dg::conv_mode();
  Tensor x = dg::describable(in[0]), w = dg::describable(in[1]);
  // The bias is read densely (oneDNN kernels ignore a strided bias descriptor).
  Tensor b = in.size() > 2 && in[2].defined() ? cpu::contiguous_as(in[2], kFloat32) : Tensor();
  Geom q = make_geom(x.shape(), w.shape(), a, "conv2d");
  const DType dt = x.dtype();
  Tensor y = dg::empty_4d(q.dst(), out_layout(mode), dt);
  if (y.numel() == 0) return {y};
  memory::desc ux = user_act(x, out_layout(mode)), uw = user_wei(w, q);
  memory::desc uy = dg::strided_desc(y.shape(), y.strides(), dt);
  const bool relu = ops::attr::Conv2d::of(a).relu;
  dg::Key key = conv_key("conv_fwd", q, mode, dt);
  key << act_strides(ux) << act_strides(uw) << int64_t(b.defined()) << int64_t(relu);
  auto e = dg::cached<FwdEntry>(key, [&] {
    auto e = std::make_shared<FwdEntry>();
    memory::desc bd = bias_desc(q);
    auto pd = fwd_pd(q, inner_act(q.src(), mode, dt), any_wei(q, dt), b.defined() ? &bd : nullptr,
                     inner_act(q.dst(), mode, dt), relu);
    e->prim = dnnl::convolution_forward(pd);
    e->src.init_input(ux, pd.src_desc());
    e->wei.init_input(uw, pd.weights_desc());
    e->dst.init_output(uy, pd.dst_desc());
    if (b.defined()) e->bias = bd;
    e->scratch = pd.scratchpad_desc().get_size();
    return e;
  });
  dg::Exec ex;
  ex.arg(DNNL_ARG_SRC, ex.input(e->src, x));
  ex.arg(DNNL_ARG_WEIGHTS, ex.input(e->wei, w));
  if (b.defined()) ex.arg(DNNL_ARG_BIAS, ex.wrap(e->bias, b));
  ex.arg(DNNL_ARG_DST, ex.output(e->dst, y));
  ex.run(e->prim, e->scratch);
  return {y};
}

// ------------------------------------------------------------------ backward data
struct BwdDataEntry {
  dnnl::convolution_backward_data prim;
  dg::Slot diff_dst, wei, diff_src;
  size_t scratch = 0;
};

// conv2d's input gradient gx [q.src()] of gy [q.dst()] and w; `op` names the cache entry (conv2d's
// backward and conv_transpose2d share this code, but not their entries: a transposed conv's
// output_padding makes H' not a function of OH, so its key has both).
Tensor bwd_data(const Tensor& gy_in, const Tensor& w_in, const Geom& q, const char* op) {
  const dg::ConvMode mode = dg::conv_mode();
  Tensor gy = dg::describable(gy_in), w = dg::describable(w_in);
  const DType dt = gy.dtype();
  Tensor gx = dg::empty_4d(q.src(), out_layout(mode), dt);
  if (gx.numel() == 0) return gx;
  memory::desc ugy = user_act(gy, out_layout(mode)), uw = user_wei(w, q);
  memory::desc ugx = dg::strided_desc(gx.shape(), gx.strides(), dt);
  dg::Key key = conv_key(op, q, mode, dt);
  key << q.OH << q.OW << act_strides(ugy) << act_strides(uw);
  auto e = dg::cached<BwdDataEntry>(key, [&] {
    auto e = std::make_shared<BwdDataEntry>();
    memory::desc sd = inner_act(q.src(), mode, dt), dd = inner_act(q.dst(), mode, dt), wd = any_wei(q, dt);
    auto hint = fwd_pd(q, sd, wd, nullptr, dd);
    dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, sd, wd, dd, q.strides(),
                                            q.dilates(), q.pad_l(), q.pad_r());
    dnnl::convolution_backward_data::primitive_desc pd(d, dg::default_attr(), dg::engine(), hint);
    e->prim = dnnl::convolution_backward_data(pd);
    e->diff_dst.init_input(ugy, pd.diff_dst_desc());
    e->wei.init_input(uw, pd.weights_desc());
    e->diff_src.init_output(ugx, pd.diff_src_desc());
    e->scratch = pd.scratchpad_desc().get_size();
    return e;
  });
  dg::Exec ex;
  ex.arg(DNNL_ARG_DIFF_DST, ex.input(e->diff_dst, gy));
  ex.arg(DNNL_ARG_WEIGHTS, ex.input(e->wei, w));
  ex.arg(DNNL_ARG_DIFF_SRC, ex.output(e->diff_src, gx));
  ex.run(e->prim, e->scratch);
  return gx;
}

Tensors conv_bwd_input_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  return {bwd_data(in[0], in[1], make_geom(m[0].shape, in[1].shape(), a, "conv2d_backward_input"), "conv_bwd_data")};
}

// y (zeroed) with the [N, C, H, W] corner of qc's extents taken from `part`.
template <class T>
void crop_into(const Tensor& y, const Tensor& part, const Geom& qc) {
  T* yd = y.data<T>();
  std::fill(yd, yd + y.numel(), T{});
  if (part.numel() == 0) return;
  const T* pd = part.data<T>();
  const Shape &ys = y.strides(), &ps = part.strides();
  for (int64_t n = 0; n < qc.N; ++n)
    for (int64_t c = 0; c < qc.C; ++c)
      for (int64_t h = 0; h < qc.H; ++h)
        for (int64_t w = 0; w < qc.W; ++w)
          yd[n * ys[0] + c * ys[1] + h * ys[2] + w * ys[3]] = pd[n * ps[0] + c * ps[1] + h * ps[2] + w * ps[3]];
}

// conv_transpose2d: conv2d's backward-data with x as the output gradient (ops/conv.h). oneDNN
// takes a right padding above -stride only (here pad - output_padding): where output_padding >=
// stride (allowed when < dilation) the primitive computes all but the last multiple-of-stride
// rows (columns), which no input element reaches, and those are zeros.
Tensors conv_transpose_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>&) {
  const Geom q{conv_transpose_geom(in[0].shape(), in[1].shape(), a, "conv_transpose2d")};
  const ops::attr::ConvTranspose2d t = ops::attr::ConvTranspose2d::of(a);
  const int64_t crop_h = (t.output_padding_h / q.sh) * q.sh, crop_w = (t.output_padding_w / q.sw) * q.sw;
  if (crop_h == 0 && crop_w == 0) return {bwd_data(in[0], in[1], q, "conv_transpose")};
  Geom qc = q;
  qc.H -= crop_h;
  qc.W -= crop_w;
  Tensor part = bwd_data(in[0], in[1], qc, "conv_transpose");
  Tensor y = dg::empty_4d(q.src(), out_layout(dg::conv_mode()), part.dtype());
  if (part.dtype() == kBFloat16) crop_into<bfloat16>(y, part, qc);
  else crop_into<float>(y, part, qc);
  return {y};
}

// ------------------------------------------------------------------ backward weights (+ bias)
struct BwdWeiEntry {
  dnnl::convolution_backward_weights prim;
  dg::Slot src, diff_dst, diff_wei;
  memory::desc diff_bias;
  size_t scratch = 0;
};

Tensors conv_bwd_weight_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const dg::ConvMode mode = dg::conv_mode();
  Tensor gy = dg::describable(in[0]), x = dg::describable(in[1]);
  const bool with_bias = a.ints[11] != 0;
  Geom q = make_geom(x.shape(), m[0].shape, a, "conv2d_backward_weight");
  // bf16 (Native path): the primitive accumulates and writes float32 gradients (the weight's
  // reordered into the bf16 output, the bias's rounded after), each rounded once.
  const DType dt = x.dtype();
  Tensor gw = make_tensor(q.wei(), dt);
  Tensor gb = with_bias ? make_tensor({q.O}, kFloat32) : Tensor();
  auto outputs = [&] {
    Tensors out{gw};
    if (with_bias) out.push_back(dt == kFloat32 ? gb : cast_cpu(gb, dt));
    return out;
  };
  if (q.N == 0 || q.OH * q.OW == 0) {
    std::memset(gw.data_ptr(), 0, size_t(gw.numel()) * itemsize(dt));
    if (with_bias) std::fill(gb.data<float>(), gb.data<float>() + gb.numel(), 0.0f);
    return outputs();
  }
  memory::desc ugy = user_act(gy, out_layout(mode)), ux = user_act(x, out_layout(mode)), ugw = user_wei(gw, q);
  dg::Key key = conv_key("conv_bwd_weights", q, mode, dt);
  key << act_strides(ugy) << act_strides(ux) << int64_t(with_bias);
  auto e = dg::cached<BwdWeiEntry>(key, [&] {
    auto e = std::make_shared<BwdWeiEntry>();
    memory::desc sd = inner_act(q.src(), mode, dt), dd = inner_act(q.dst(), mode, dt), bd = bias_desc(q);
    auto hint = fwd_pd(q, sd, any_wei(q, dt), with_bias ? &bd : nullptr, dd);
    const memory::desc wd = any_wei(q, kFloat32);
    auto d = with_bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, sd, wd, bd, dd,
                                                                  q.strides(), q.dilates(), q.pad_l(), q.pad_r())
                       : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, sd, wd, dd,
                                                                  q.strides(), q.dilates(), q.pad_l(), q.pad_r());
    dnnl::convolution_backward_weights::primitive_desc pd(d, dg::default_attr(), dg::engine(), hint);
    e->prim = dnnl::convolution_backward_weights(pd);
    e->src.init_input(ux, pd.src_desc());
    e->diff_dst.init_input(ugy, pd.diff_dst_desc());
    e->diff_wei.init_output(ugw, pd.diff_weights_desc());
    if (with_bias) e->diff_bias = bd;
    e->scratch = pd.scratchpad_desc().get_size();
    return e;
  });
  dg::Exec ex;
  ex.arg(DNNL_ARG_SRC, ex.input(e->src, x));
  ex.arg(DNNL_ARG_DIFF_DST, ex.input(e->diff_dst, gy));
  ex.arg(DNNL_ARG_DIFF_WEIGHTS, ex.output(e->diff_wei, gw));
  if (with_bias) ex.arg(DNNL_ARG_DIFF_BIAS, ex.wrap(e->diff_bias, gb));
  ex.run(e->prim, e->scratch);
  return outputs();
}

}  // namespace

void register_cpu_conv_kernels() {
  auto reg = [](OpKind k, ops::KernelFn f) { ops::register_kernel("cpu", k, f); };
  reg(OpKind::Conv2d, conv_cpu);
  reg(OpKind::Conv2dBackwardInput, conv_bwd_input_cpu);
  reg(OpKind::ConvTranspose2d, conv_transpose_cpu);
  reg(OpKind::Conv2dBackwardWeight, conv_bwd_weight_cpu);
}

}  // namespace axle::cpu
