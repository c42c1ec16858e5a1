// The optimizers' check against FSDP's full parameters (internal).
#pragma once
#include "axle/optim/optimizer.h"

namespace axle::optim {

/// Throws if `opt` holds a wrapped module's full parameter (axle::fsdp::ParamRole::Full):
/// it was built before the module was wrapped, and would update a freed placeholder.
/// Every optimizer's step() calls it first.
void check_no_fsdp_full_params(const Optimizer& opt, const char* name);

}  // namespace axle::optim
