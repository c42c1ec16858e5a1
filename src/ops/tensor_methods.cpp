// The Tensor methods that are ops (axle/tensor.h): the method forms, the operators, and
// contiguous/clone/to(dtype). They live in the ops layer, above core (src/LAYERS).
#include "axle/ops.h"
#include "core/tensor_impl.h"
#include "ops/op.h"

namespace axle {

#define AXLE_DEFINED(op) AXLE_CHECK(impl_ != nullptr, "[" op "] expected a defined tensor, got an undefined one")

Tensor Tensor::to(DType t) const {
  AXLE_DEFINED("to");
  return t == impl_->dtype ? *this : cast(*this, t);
}

Tensor Tensor::contiguous() const {
  AXLE_DEFINED("contiguous");
  return impl_->contiguous ? *this : ops::call1(ops::OpKind::Copy, {*this});
}
Tensor Tensor::clone() const { AXLE_DEFINED("clone"); return ops::call1(ops::OpKind::Copy, {*this}); }

Tensor Tensor::reshape(const Shape& s) const { return axle::reshape(*this, s); }
Tensor Tensor::view(const Shape& s) const { return axle::view(*this, s); }
Tensor Tensor::permute(const Shape& d) const { return axle::permute(*this, d); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return axle::transpose(*this, a, b); }
Tensor Tensor::t() const {
  AXLE_CHECK(dim() == 2, "[t] expected a 2-D tensor, got ", dim(), "-D");
  return axle::transpose(*this, 0, 1);
}
Tensor Tensor::expand(const Shape& s) const { return axle::expand(*this, s); }
Tensor Tensor::squeeze(int64_t d) const { return axle::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return axle::unsqueeze(*this, d); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return axle::flatten(*this, s, e); }
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t l) const { return axle::narrow(*this, d, s, l); }
Tensor Tensor::sum(const Shape& d, bool k) const { return axle::sum(*this, d, k); }
Tensor Tensor::mean(const Shape& d, bool k) const { return axle::mean(*this, d, k); }
Tensor Tensor::argmax(int64_t d, bool k) const { return axle::argmax(*this, d, k); }
Tensor Tensor::exp() const { return axle::exp(*this); }
Tensor Tensor::log() const { return axle::log(*this); }
Tensor Tensor::relu() const { return axle::relu(*this); }


// ---------------------------------------------------------------- operators
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return div(full_like(b, a), b); }
Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace axle
