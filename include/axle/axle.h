// Umbrella header: everything a training program needs.
#pragma once
#include "axle/autograd.h"
#include "axle/device.h"
#include "axle/dtype.h"
#include "axle/error.h"
#include "axle/generator.h"
#include "axle/ops.h"
#include "axle/tensor.h"
