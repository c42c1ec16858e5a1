// Loss modules (torch.nn.CrossEntropyLoss, NLLLoss, MSELoss). Unweighted losses call the
// functional ops; per-class weights are composed from public ops, so their gradients
// come from the ops' own vjps and they trace on the lazy device like any other code.
#include "axle/nn/loss.h"

#include <sstream>

#include "core/tensor_impl.h"

namespace axle::nn {
namespace {

Reduction parse_reduction(const std::string& s) {
  if (s == "mean") return Reduction::Mean;
  if (s == "sum") return Reduction::Sum;
  if (s == "none") return Reduction::None;
  AXLE_FAIL("[loss] expected reduction 'mean', 'sum' or 'none', got '", s, "'");
}

std::string num_str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

Tensor check_weight(const Tensor& w, const char* loss) {
  if (!w.defined()) return w;
  AXLE_CHECK(w.dim() == 1, "[", loss, "] expected a 1-D weight of one value per class, got shape ",
             shape_str(w.shape()));
  AXLE_CHECK(w.dtype() == kFloat32, "[", loss, "] expected a float32 weight, got ", w.dtype());
  return w;
}

/// Validates a weighted loss's operands; returns the number of classes.
int64_t check_weighted(const Tensor& input, const Tensor& target, const Tensor& w, const char* loss) {
  AXLE_CHECK(input.defined() && target.defined(), "[", loss, "] expected defined input and target");
  AXLE_CHECK(input.dim() >= 2, "[", loss, "] expected input of shape [N, C] or [N, C, d...], got ",
             shape_str(input.shape()));
  const int64_t C = input.shape()[1];
  AXLE_CHECK(w.numel() == C, "[", loss, "] expected a weight of ", C, " values (one per class of input ",
             shape_str(input.shape()), "), got ", w.numel());
  AXLE_CHECK(w.device() == input.device(), "[", loss, "] expected the weight on ", input.device(),
             " (the input's device), got ", w.device(), ": move the loss module with ->to(device)");
  return C;
}

/// The weight shaped [1, C, 1, ...] to broadcast against an input [N, C, d...].
Tensor weight_along_classes(const Tensor& w, const Tensor& input) {
  Shape s(size_t(input.dim()), 1);
  s[1] = w.numel();
  return reshape(w, s);
}

Tensor zero_like_scalar(DType t) { return zeros({}, {.dtype = t}); }

/// Per-element weighted NLL terms, their weights (0 at ignored targets), and the keep mask.
struct WeightedTerms {
  Tensor per, wt, keep;
};
WeightedTerms weighted_nll_terms(const Tensor& logp, const Tensor& target, const Tensor& w, int64_t ignore_index) {
  Tensor keep = ne(target, double(ignore_index));
  Tensor safe = cast(where(keep, target, zero_like_scalar(target.dtype())), kInt64);
  Tensor wt = reshape(index_select(w, 0, reshape(safe, {-1})), target.shape());
  wt = where(keep, wt, zero_like_scalar(wt.dtype()));
  Tensor base = nll_loss(logp, target, Reduction::None, ignore_index);  // -logp[target], 0 where ignored
  return {mul(base, wt), wt, keep};
}

Tensor reduce_weighted(const Tensor& per, const Tensor& wt, Reduction r) {
  switch (r) {
    case Reduction::None: return per;
    case Reduction::Sum: return sum(per);
    case Reduction::Mean: return div(sum(per), sum(wt));  // PyTorch: normalised by the targets' weights
  }
  AXLE_FAIL("[loss] unknown reduction ", int(r));
}

Tensor weighted_nll(const Tensor& logp, const Tensor& target, const Tensor& w, Reduction r, int64_t ignore_index) {
  WeightedTerms t = weighted_nll_terms(logp, target, w, ignore_index);
  return reduce_weighted(t.per, t.wt, r);
}

Tensor weighted_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& w,
                              const CrossEntropyLossOptions& o) {
  const int64_t C = check_weighted(input, target, w, "CrossEntropyLoss");
  const double eps = o.label_smoothing;
  const Reduction r = o.reduction.value;
  Tensor logp = log_softmax(input, 1);
  Tensor wb = weight_along_classes(w, input);
  if (is_floating(target.dtype())) {  // class probabilities: -sum_c w_c t_c logp_c, mean over samples
    AXLE_CHECK(target.shape() == input.shape(), "[CrossEntropyLoss] expected probability targets of shape ",
               shape_str(input.shape()), ", got ", shape_str(target.shape()));
    Tensor t = eps > 0 ? add(mul(target, 1.0 - eps), eps / double(C)) : target;
    Tensor per = neg(sum(mul(mul(logp, t), wb), {1}));
    switch (r) {
      case Reduction::None: return per;
      case Reduction::Sum: return sum(per);
      case Reduction::Mean: return mean(per);
    }
  }
  WeightedTerms t = weighted_nll_terms(logp, target, w, o.ignore_index);
  Tensor nll = reduce_weighted(t.per, t.wt, r);
  if (eps == 0.0) return nll;
  // Label smoothing as PyTorch: the smoothing term is -sum_c w_c logp_c, zero at ignored
  // targets, normalised like the NLL term.
  Tensor smooth = where(t.keep, neg(sum(mul(logp, wb), {1})), zero_like_scalar(logp.dtype()));
  return add(mul(nll, 1.0 - eps), mul(reduce_weighted(smooth, t.wt, r), eps / double(C)));
}

/// Runs `batched` on an unbatched input [C] (target [] or [C]) as a batch of one.
template <class F>
Tensor unbatched(const Tensor& input, const Tensor& target, Reduction r, F batched) {
  Tensor t = is_floating(target.dtype()) ? unsqueeze(target, 0) : reshape(target, {1});
  Tensor l = batched(unsqueeze(input, 0), t);
  return r == Reduction::None ? reshape(l, {}) : l;
}

}  // namespace

LossReduction::LossReduction(const char* s) {
  AXLE_CHECK(s != nullptr, "[loss] expected reduction 'mean', 'sum' or 'none', got a null string");
  value = parse_reduction(s);
}
LossReduction::LossReduction(const std::string& s) : value(parse_reduction(s)) {}
std::string LossReduction::str() const {
  switch (value) {
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
    case Reduction::None: return "none";
  }
  return "?";
}

// ---- CrossEntropyLoss ----
CrossEntropyLoss::CrossEntropyLoss(CrossEntropyLossOptions o) : options(std::move(o)) {
  AXLE_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0,
             "[CrossEntropyLoss] expected label_smoothing in [0, 1], got ", options.label_smoothing);
  weight = register_buffer("weight", check_weight(options.weight, "CrossEntropyLoss"));
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  AXLE_CHECK(input.defined() && target.defined(), "[CrossEntropyLoss] expected defined input and target");
  const Reduction r = options.reduction.value;
  if (!weight.defined())
    return cross_entropy(input, target, {.reduction = r, .ignore_index = options.ignore_index,
                                         .label_smoothing = options.label_smoothing});
  if (input.dim() == 1)
    return unbatched(input, target, r, [&](const Tensor& x, const Tensor& t) { return forward(x, t); });
  return weighted_cross_entropy(input, target, weight, options);
}

std::string CrossEntropyLoss::extra_repr() const {
  std::string s = "reduction=" + options.reduction.str();
  if (options.ignore_index != -100) s += ", ignore_index=" + std::to_string(options.ignore_index);
  if (options.label_smoothing != 0.0) s += ", label_smoothing=" + num_str(options.label_smoothing);
  if (weight.defined()) s += ", weight=[" + std::to_string(weight.numel()) + "]";
  return s;
}

// ---- NLLLoss ----
NLLLoss::NLLLoss(NLLLossOptions o) : options(std::move(o)) {
  weight = register_buffer("weight", check_weight(options.weight, "NLLLoss"));
}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  AXLE_CHECK(input.defined() && target.defined(), "[NLLLoss] expected defined input and target");
  const Reduction r = options.reduction.value;
  if (input.dim() == 1)
    return unbatched(input, target, r, [&](const Tensor& x, const Tensor& t) { return forward(x, t); });
  if (!weight.defined()) return nll_loss(input, target, r, options.ignore_index);
  check_weighted(input, target, weight, "NLLLoss");
  return weighted_nll(input, target, weight, r, options.ignore_index);
}

std::string NLLLoss::extra_repr() const {
  std::string s = "reduction=" + options.reduction.str();
  if (options.ignore_index != -100) s += ", ignore_index=" + std::to_string(options.ignore_index);
  if (weight.defined()) s += ", weight=[" + std::to_string(weight.numel()) + "]";
  return s;
}

// ---- MSELoss ----
MSELoss::MSELoss(MSELossOptions o) : options(o) {}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  return mse_loss(input, target, options.reduction.value);
}

std::string MSELoss::extra_repr() const { return "reduction=" + options.reduction.str(); }

}  // namespace axle::nn
