// DistributedDataParallel (include/axle/nn/parallel.h). forward() arms the reducer; a
// post-accumulate-grad hook on every parameter notes which got a gradient and, in an armed
// pass, queues one callback for when backward() finishes; the callback averages the
// gradients over ranks, one variadic all_reduce per bucket. The AllReduce op's outputs are
// views of its flat buffer, so with gradient_as_bucket_view the gradients are the bucket.
#include <map>

#include "axle/autograd.h"
#include "axle/dist.h"
#include "axle/nn/parallel.h"
#include "axle/ops.h"
#include "axle/runtime.h"
#include "axle/xm.h"
#include "core/tensor_impl.h"

namespace axle::nn::parallel {

struct DistributedDataParallel::Reducer {
  struct Bucket {
    std::vector<Tensor> params;
    std::vector<std::string> names;
    std::vector<char> used;  ///< per parameter: got a gradient in the current pass
  };
  std::vector<Bucket> buckets;
  std::vector<std::pair<Tensor, int64_t>> hooks;  ///< (parameter, hook id)
  bool as_view = false;
  bool find_unused = false;
  bool sync_enabled = true;
  bool armed = false;   ///< a forward with gradients ran outside no_sync()
  bool queued = false;  ///< a reduction is queued for the backward pass now running

  void reduce() {
    armed = false;
    std::vector<Tensor> used_any;  // find_unused: per bucket, 1 where some rank used the parameter
    if (find_unused) {
      std::vector<Tensor> masks;
      for (Bucket& b : buckets) {
        std::vector<float> m(b.used.begin(), b.used.end());
        masks.push_back(from_vector(m, {int64_t(m.size())}));
      }
      used_any = dist::all_reduce(masks, dist::ReduceOp::Max);
    }
    for (size_t bi = 0; bi < buckets.size(); ++bi) {
      Bucket& b = buckets[bi];
      std::vector<Tensor> grads;
      grads.reserve(b.params.size());
      for (size_t i = 0; i < b.params.size(); ++i) {
        const Tensor& p = b.params[i];
        if (!b.used[i] && !find_unused)
          AXLE_FAIL("[DistributedDataParallel] parameter '", b.names[i], "' got no gradient in this backward pass; "
                    "every parameter must take part in the loss, or construct with find_unused_parameters = true");
        grads.push_back(b.used[i] && p.grad().defined() ? p.grad() : zeros_like(p));
      }
      std::vector<Tensor> avg = dist::all_reduce(grads, dist::ReduceOp::Mean);
      const std::vector<float> any = find_unused ? used_any[bi].to_vector<float>() : std::vector<float>();
      for (size_t i = 0; i < b.params.size(); ++i) {
        if (find_unused && any[i] == 0) continue;  // no rank used it: its gradient stays as it was
        b.params[i].set_grad(as_view ? avg[i] : avg[i].clone());
      }
      std::fill(b.used.begin(), b.used.end(), 0);
    }
  }
};

namespace {

using Reducer = DistributedDataParallel::Reducer;

// Clears Reducer::queued when the queued callback is destroyed: after it ran, or when the
// backward pass threw before running it (so the next backward queues again).
struct QueuedToken {
  std::weak_ptr<Reducer> r;
  ~QueuedToken() {
    if (auto p = r.lock()) p->queued = false;
  }
};

std::string signature(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::string s;
  for (const auto& [name, t] : named)
    s += name + ":" + dtype_name(t.dtype()) + shape_str(t.shape()) + (t.requires_grad() ? " requires_grad" : "") + ";";
  return s;
}

// Every rank must wrap the same model: compares rank 0's parameter and buffer list with this rank's.
void check_same_model(const std::string& mine) {
  const std::vector<std::string> all = xm::rendezvous("DistributedDataParallel", mine);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    size_t i = 0;
    while (i < all[0].size() && i < all[r].size() && all[0][i] == all[r][i]) ++i;
    const size_t start = all[0].rfind(';', i == 0 ? 0 : i - 1);
    auto entry = [&](const std::string& s) {
      const size_t b = start == std::string::npos ? 0 : start + 1;
      const size_t e = s.find(';', b);
      return b >= s.size() ? std::string("nothing") : "'" + s.substr(b, e - b) + "'";
    };
    AXLE_FAIL("[DistributedDataParallel] every rank must wrap the same model: rank 0 has ", entry(all[0]),
              " where rank ", r, " has ", entry(all[r]));
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(ModulePtr module, DistributedDataParallelOptions o)
    : module_(std::move(module)), opts_(o), reducer_(std::make_shared<Reducer>()) {
  AXLE_CHECK(module_ != nullptr, "[DistributedDataParallel] expected a module, got a null pointer");
  AXLE_CHECK(opts_.bucket_cap_mb > 0, "[DistributedDataParallel] expected bucket_cap_mb > 0, got ",
             opts_.bucket_cap_mb);
  register_module("module", module_);
  training_ = module_->is_training();
  reducer_->as_view = opts_.gradient_as_bucket_view;
  reducer_->find_unused = opts_.find_unused_parameters;

  // Buckets: reverse registration order (roughly the order backward produces gradients),
  // one (dtype, device) per bucket, at most bucket_cap_mb unless a single parameter is larger.
  const auto named = module_->named_parameters();
  const double cap_bytes = opts_.bucket_cap_mb * 1024.0 * 1024.0;
  std::map<std::pair<int, std::string>, size_t> open;  // (dtype, device) -> index of its filling bucket
  std::map<size_t, double> filled;
  for (auto it = named.rbegin(); it != named.rend(); ++it) {
    const Tensor& p = it->second;
    if (!p.requires_grad()) continue;
    const double bytes = double(p.numel()) * double(itemsize(p.dtype()));
    const auto key = std::make_pair(int(p.dtype()), p.device().str());
    auto slot = open.find(key);
    if (slot == open.end() || filled[slot->second] + bytes > cap_bytes) {
      reducer_->buckets.emplace_back();
      slot = open.insert_or_assign(key, reducer_->buckets.size() - 1).first;
    }
    Reducer::Bucket& b = reducer_->buckets[slot->second];
    b.params.push_back(p);
    b.names.push_back(it->first);
    b.used.push_back(0);
    filled[slot->second] += bytes;
  }

  if (runtime::world_size() == 1) return;  // nothing to average
  auto state = module_->named_parameters();
  for (auto& nb : module_->named_buffers()) state.push_back(nb);
  check_same_model(signature(state));
  {
    NoGradGuard no_grad;
    bool on_xla = false;
    for (auto& [name, t] : state) {
      t.set_data(dist::broadcast(t.detach(), 0));
      on_xla = on_xla || t.device().is_xla();
    }
    if (on_xla) axle::sync();  // run the broadcasts now, not inside the first training step's graph
  }
  std::weak_ptr<Reducer> weak = reducer_;
  for (size_t bi = 0; bi < reducer_->buckets.size(); ++bi) {
    for (size_t i = 0; i < reducer_->buckets[bi].params.size(); ++i) {
      const Tensor& p = reducer_->buckets[bi].params[i];
      const int64_t id = autograd::register_post_accumulate_grad_hook(p, [weak, bi, i](const Tensor&) {
        auto r = weak.lock();
        if (!r) return;
        r->buckets[bi].used[i] = 1;
        if (!r->armed || r->queued) return;
        auto token = std::make_shared<QueuedToken>();  // built in place: a temporary's destructor would clear the flag
        token->r = weak;
        autograd::queue_callback([weak, token] {
          if (auto rr = weak.lock()) rr->reduce();
        });
        r->queued = true;
      });
      reducer_->hooks.emplace_back(p, id);
    }
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (auto& [p, id] : reducer_->hooks) autograd::remove_hook(p, id);
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (runtime::world_size() > 1) {
    if (is_training() && opts_.broadcast_buffers) {
      NoGradGuard no_grad;
      for (const Tensor& b : module_->buffers()) b.set_data(dist::broadcast(b, 0));
    }
    // The backward through this forward averages gradients (unless in no_sync()).
    if (grad_enabled() && reducer_->sync_enabled) reducer_->armed = true;
  }
  return (*module_)(x);
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : reducer_->buckets) out.push_back(b.names);
  return out;
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(std::shared_ptr<Reducer> r)
    : reducer_(std::move(r)), prev_(reducer_->sync_enabled) {
  reducer_->sync_enabled = false;
}
DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { reducer_->sync_enabled = prev_; }

}  // namespace axle::nn::parallel
