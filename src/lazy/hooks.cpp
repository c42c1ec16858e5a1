// The lazy device's hooks into the layers below it (core/hooks.h, ops/hooks.h).
#include "lazy/hooks.h"

#include "core/hooks.h"
#include "dist/spmd_mode.h"
#include "lazy/ir.h"
#include "ops/hooks.h"

namespace axle::lazy {

void register_hooks() {
  set_device_hooks({
      .to_cpu = &to_cpu,
      .to_device = &to_device,
      .keep_label =
          [](const Tensor& t, const DeviceState& state) {
            const auto& old = static_cast<const LazyTensor&>(state);  // an xla tensor's (lazy_of)
            if (old.label_rank > 0) set_label(t, old.label, LabelRank(old.label_rank));
            // SPMD: an in-place update keeps the tensor's sharding, and the new pending
            // value remembers the data it replaces (its buffer may be donated).
            if ((old.sharding || old.data_node) && dist::detail::spmd_mode()) [[unlikely]] {
              LazyTensor& now = *lazy_of(t);
              if (!now.ir) return;
              if (!now.sharding) now.sharding = old.sharding;
              if (old.data_node && !old.ir) now.updates = old.data_node;
            }
          },
  });
  ops::set_hooks(ops::LazyHooks{
      .record = &record,
      .eager_active = &eager_active,
      .run_eagerly = &run_eagerly,
      .trace_timer = &trace_timer,
  });
}

}  // namespace axle::lazy
