// Tensor operations. Every function here runs on any device: on `cpu` at once,
// on `xla` traced into the step graph. Each records its vjp for autograd.
// The op table behind them is src/ops/ops.def.
#pragma once
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "axle/tensor.h"

namespace axle {

class Generator;

// ---- unary elementwise ----
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor relu(const Tensor& x);
/// GELU as torch.nn.functional.gelu: approximate "none" (the exact, erf form) or "tanh"
/// (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))); any other string throws.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
/// log(1 + x), accurate for small x.
Tensor log1p(const Tensor& x);
/// exp(x) - 1, accurate for small x.
Tensor expm1(const Tensor& x);
Tensor erf(const Tensor& x);
/// x * sigmoid(x), as torch.nn.functional.silu.
Tensor silu(const Tensor& x);
/// log(1 + exp(beta x)) / beta, and x where beta x > threshold, as torch.nn.functional.softplus.
Tensor softplus(const Tensor& x, double beta = 1, double threshold = 20);
/// min(max(x, min), max), as torch.clamp (an unbounded side: +/-infinity). An integer x keeps
/// its dtype (idx.clamp(0, n - 1) still indexes); a bound with a fraction makes it float32, as
/// PyTorch promotes an integer tensor with a float scalar (a double carries no int/float type
/// here, so its value decides, as add(x, double) does). The gradient flows strictly inside
/// (min, max), none at the bounds (PyTorch 2.x's rule for scalar bounds).
Tensor clamp(const Tensor& x, double min = -std::numeric_limits<double>::infinity(),
             double max = std::numeric_limits<double>::infinity());
/// Tensor bounds, as torch.clamp with tensors: each optional (undefined), broadcast together, in the promoted
/// dtype; min > max gives max, a NaN operand NaN. One bound: maximum(x, min) / minimum(x, max). With both, PyTorch
/// 2.15's gradients: x's where neither x < min nor x > max; min's where x < min <= max; max's where x > max
/// (min <= max) or max < min; a tie of x with a bound (min < max) halved; x == min == max all x's.
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max);
/// x where x > 0, else negative_slope * x, as torch.nn.functional.leaky_relu.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
/// x clamped to [min_val, max_val], as torch.nn.functional.hardtanh.
Tensor hardtanh(const Tensor& x, double min_val = -1, double max_val = 1);
Tensor square(const Tensor& x);

// ---- binary elementwise, with broadcasting ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
/// Elementwise max / min (NaN if either is NaN), as torch.maximum / torch.minimum; where a == b
/// each operand gets half of the gradient (PyTorch's rule).
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
/// Scalar forms: the scalar takes the tensor's dtype (float32 if the tensor is integral and the scalar is not).
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
/// cond ? a : b, elementwise with broadcasting; cond is bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// x with `value` where the bool `mask` (broadcast to x's shape) is true, as
/// torch.Tensor.masked_fill; the gradient flows to x where mask is false.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
/// Converts to another dtype.
Tensor cast(const Tensor& x, DType t);

// ---- reductions; empty `dims` means all dimensions ----
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
/// Largest / smallest value over `dims` (no indices).
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
/// Max of all elements.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
/// (values, indices) along `dim`; the gradient flows to the selected index.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
/// Index of the first maximum along `dim` (int64).
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim = false);
/// Variance with Bessel's `correction` (1 = unbiased, as torch.var).
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
/// Standard deviation, sqrt(var(x, dims, correction)), as torch.std.
Tensor std(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
/// Product of all elements (a 0-d tensor), as torch.prod(x); the gradient is exact with
/// zeros in x (the product of the other elements), as PyTorch's.
Tensor prod(const Tensor& x);
/// Product along `dim`, as torch.prod(x, dim, keepdim).
Tensor prod(const Tensor& x, int64_t dim, bool keepdim = false);
/// Running sum along `dim`, as torch.cumsum (integer inputs sum in int64).
Tensor cumsum(const Tensor& x, int64_t dim);
/// (values, indices) sorted along `dim`, as torch.sort; stable keeps equal elements in their
/// order (with stable = false axle still sorts stably). The gradient flows to the source
/// positions of the values.
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
/// The indices of sort(x, dim, descending, stable), as torch.argsort.
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
/// The k largest (smallest if !largest) (values, indices) along `dim`, as torch.topk; sorted:
/// in order (largest first), else in any order (axle: always in order).
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);

// ---- shape and indexing ----
/// A view when the strides allow it, else a copy.
Tensor reshape(const Tensor& x, const Shape& shape);
/// Like reshape but must be a view (throws otherwise). One dimension may be -1.
Tensor view(const Tensor& x, const Shape& shape);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
/// Broadcasts size-1 dims to `shape` (a view; -1 keeps a size).
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start = 0, int64_t end = -1);
/// Elements start, start+step, ... < end along `dim` (a view).
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);
/// Rows of `x` along `dim` picked by the 1-D int64 `index`.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
/// out[i][j] = x[index[i][j]][j] for dim 0 (torch.gather).
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
/// x with src's elements written at `index` along `dim` (out[index[i][j]][j] = src[i][j] for
/// dim 0), as torch.scatter; index (int64 or int32) has x's and src's rank (0-d counts as 1-D)
/// and no dim larger than src's or (off `dim`) x's; an empty index gives a copy of x. Gradients:
/// x's where not overwritten, src's gathered at index (zero where src is larger than index;
/// PyTorch cannot differentiate that case). With repeated indices the written value is
/// unspecified, as in PyTorch (axle's cpu kernel: the last in index order). Index values are
/// checked on cpu at once, on xla when the graph runs.
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
/// The scalar form: `value` written at `index` (torch.scatter(x, dim, index, value)).
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value);
/// x with src's elements added at `index` along `dim` (repeats accumulate, in index order), as
/// torch.scatter_add; the rules of scatter. Gradients: x's all of it, src's gathered at index.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
/// int64 [..., num_classes]: 1 at each element's class, as torch.nn.functional.one_hot (x
/// int64); num_classes = -1: one more than the largest class (reads x: on xla, runs its graph).
/// Classes must be in [0, num_classes): checked at once on cpu, when the graph runs on xla.
Tensor one_hot(const Tensor& x, int64_t num_classes = -1);
/// Pads (or crops, with negative sizes) the last dims, as torch.nn.functional.pad: `pad` =
/// {last_left, last_right, second_last_left, ...}; mode "constant" (with `value`), "reflect"
/// (padding < the dim's size), "replicate" or "circular" (padding <= the dim's size: the
/// left pad copies the dim's end, the right pad its start) (reflect, replicate and circular
/// pad the last 1-3 dims of a 2-D to 5-D input, as PyTorch). Gradients: the padding's own
/// values get none; otherwise each output's gradient goes to the input element it copies (summed).
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, const std::string& mode = "constant", double value = 0);
/// Einstein summation, as torch.einsum: "ij,jk->ik", implicit output ("ij,jk"), "..." for
/// broadcast batch dims, repeated indices in one operand (diagonals); a subscript's size-1
/// dims broadcast, as PyTorch's. Lowered to permutes, reshapes, sums and batched matmuls,
/// contracting left to right (PyTorch's order without opt_einsum); operands of several
/// tensors are float32 (the matmul's dtype).
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);
/// The lower (tril) / upper (triu) triangle of the last two dims of x (>= 2-D), the rest
/// zero, as torch.tril / torch.triu: element (i, j) is kept where j - i <= diagonal (tril)
/// or j - i >= diagonal (triu).
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// ---- linear algebra ----
/// Matrix product with batch broadcasting (torch.matmul rules for >= 1-D operands).
Tensor matmul(const Tensor& a, const Tensor& b);
/// x @ w^T + b for x [..., in], w [out, in], b [out] (optional).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = {});

// ---- convolution and pooling (NCHW) ----
struct Conv2dFuncOptions {
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};
/// x [N, C, H, W], w [O, C/groups, kh, kw], b [O] (optional).
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = {}, const Conv2dFuncOptions& o = {});
/// Options of conv_transpose2d, in torch.nn.functional's order.
struct ConvTranspose2dFuncOptions {
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, output_padding{0, 0};
  int64_t groups = 1;
  std::vector<int64_t> dilation{1, 1};
};
/// Transposed convolution (the gradient of conv2d with respect to its input), as
/// torch.nn.functional.conv_transpose2d: x [N, C, H, W], w [C, O/groups, kh, kw], b [O]
/// (optional) -> [N, O, (H-1)*stride - 2*padding + dilation*(kh-1) + output_padding + 1, ...].
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b = {},
                        const ConvTranspose2dFuncOptions& o = {});
/// Options of the pooling functions and modules (PyTorch's names and defaults).
struct Pool2dOptions {
  std::vector<int64_t> kernel{2, 2};
  std::vector<int64_t> stride{};  ///< empty: equal to kernel
  std::vector<int64_t> padding{0, 0};
  std::vector<int64_t> dilation{1, 1};  ///< max_pool2d only
  /// Output sizes rounded up, not down: a last window may start in the right padding's
  /// reach but never past the input (PyTorch's rule).
  bool ceil_mode = false;
  bool count_include_pad = true;  ///< avg_pool2d only: the explicit padding counts in the divisor
};
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o = {});
/// max_pool2d and, as int64 of the output's shape, where each maximum came from: its flat
/// index h * W + w in its [H, W] input plane (torch.nn.functional.max_pool2d with
/// return_indices=True; ties and NaN as max_pool2d's gradient picks them).
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dOptions& o = {});
/// The partial inverse of max_pool2d_with_indices, as torch.nn.functional.max_unpool2d: x
/// [N, C, H, W] (or [C, H, W]) written at `indices` (flat h * W + w) of zero planes of
/// output_size ([H, W] or the full shape; default (H - 1) * stride - 2 * padding + kernel).
/// Uses o's kernel, stride and padding (no dilation, no ceil_mode). Gradient: x's gathered at
/// indices. Repeated indices: the written value is unspecified, as in PyTorch.
Tensor max_unpool2d(const Tensor& x, const Tensor& indices, const Pool2dOptions& o,
                    const std::vector<int64_t>& output_size = {});
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o = {});
Tensor adaptive_avg_pool2d(const Tensor& x, const std::vector<int64_t>& output_size);
/// Options of interpolate, as torch.nn.functional.interpolate's: give size or scale_factor.
struct InterpolateOptions {
  std::vector<int64_t> size{};       ///< the output's spatial size (one value for every dim, or one each)
  std::vector<double> scale_factor{};  ///< or the factor per spatial dim (one value for every dim, or one each)
  /// "nearest", "nearest-exact", "area" (3-D to 5-D input), "linear" (3-D), "bilinear",
  /// "bicubic" (4-D) or "trilinear" (5-D), PyTorch's names and input ranks
  std::string mode = "nearest";
  /// linear, bilinear, bicubic and trilinear only (an error with the others, as PyTorch):
  /// corner pixels' centres aligned; unset: false.
  std::optional<bool> align_corners{};
  /// With scale_factor: compute the sampling scale from the output size (true) or use the
  /// factor as given (false/unset), as PyTorch.
  std::optional<bool> recompute_scale_factor{};
  /// bilinear and bicubic only: when downsampling, widen the filter to the scale (PyTorch's
  /// and Pillow's antialiasing: a tent or a cubic with a = -0.5, weights normalised).
  bool antialias = false;
};
/// Resizes the spatial dims of x [N, C, ...] as torch.nn.functional.interpolate, with
/// PyTorch's float32 index and weight rules: nearest reads floor(j * scale), nearest-exact
/// floor((j + 0.5) * scale) (scale = 1 / scale_factor when given and not recomputed, else
/// in / out); linear modes weigh 2 neighbours per dim, bicubic 4 (a = -0.75, borders
/// clamped); area is adaptive average pooling to the output size. Gradients: each output's
/// back to the inputs it read, weighted as it read them.
Tensor interpolate(const Tensor& x, const InterpolateOptions& o);

// ---- normalization, activations, losses ----
/// In training mode uses batch statistics and updates running_mean / running_var
/// in place (momentum as PyTorch, unbiased running variance); in eval mode uses them.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
/// Normalises x [N, C, ...] over `num_groups` groups of channels (and the spatial dims),
/// then weight [C] and bias [C] (optional), as torch.nn.functional.group_norm.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
/// Zeroes each element with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

enum class Reduction { None, Mean, Sum };
struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};
/// logits [N, C] (or [N, C, d...]), target int64 class indices [N] ([N, d...]).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o = {});
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction r = Reduction::Mean,
                int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction r = Reduction::Mean);
/// Rows of `weight` [num, dim] picked by integer `indices` of any shape: [..., dim].
Tensor embedding(const Tensor& weight, const Tensor& indices);

/// Options of scaled_dot_product_attention, in torch.nn.functional's order:
/// `scaled_dot_product_attention(q, k, v, {.is_causal = true, .dropout_p = 0.1})`.
struct AttentionOptions {
  /// Query i attends to keys j <= i (the top-left causal mask, as PyTorch's is_causal).
  bool is_causal = false;
  /// Dropout on the attention weights (applied when > 0, as PyTorch does: pass 0 in eval).
  double dropout_p = 0.0;
  /// Score scale; unset: 1 / sqrt(E), E = q's last dim.
  std::optional<double> scale{};
  /// Optional mask broadcastable to [..., L, S]: bool (true = attend) or float (added to the
  /// scores). Not allowed together with is_causal.
  Tensor attn_mask{};
  /// The dropout's random numbers (the default generator if null).
  Generator* generator = nullptr;
};
/// softmax(q k^T * scale + mask) v, as torch.nn.functional.scaled_dot_product_attention:
/// q [..., L, E], k [..., S, E], v [..., S, Ev] (batch dims broadcast) -> [..., L, Ev].
/// One fused op with its own backward: the L x S score matrix is never materialised
/// (online softmax over key tiles); its backward recomputes the scores tile by tile.
/// Float inputs of other dtypes compute in float32. Dropout's keep mask is drawn from the
/// generator's counter-based stream (one reservation per call) and regenerated by the
/// backward, never stored. Calls with an attn_mask run the decomposed form instead
/// (matmul, mask, softmax, dropout, matmul), which does materialise the L x S scores; there a
/// query row whose keys are all masked gives zeros and zero gradients, as PyTorch 2.x.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& o = {});

// ---- compiler barriers ----
/// The identity on each of `xs` (one op; the outputs alias the inputs), which the graph
/// compiler treats as opaque: two barriers on the same values stay two (CSE never merges
/// them, nor values on its two sides), constant folding and algebraic simplification do not
/// look through it, elementwise fusion does not cross it. Its gradient is a barrier on the
/// incoming gradients. Use it to keep the compiler from merging work on purpose repeated,
/// as torch_xla's xm.optimization_barrier_ (FSDP re-gathers a parameter for the backward).
/// An empty `xs` gives an empty result; each tensor must be defined.
std::vector<Tensor> optimization_barrier(std::vector<Tensor> xs);

namespace xm {
/// In-place form (torch_xla's xm.optimization_barrier_): each element of `xs` is replaced
/// by its barrier output (the handles in the vector; other handles keep the old value).
void optimization_barrier_(std::vector<Tensor>& xs);
}  // namespace xm

}  // namespace axle
