// The models axle-train trains (the reference script's, reference/pytorch_fmnist.py).
#pragma once
#include <string>
#include <vector>

#include "axle/nn/module.h"

namespace axle_train {

/// Names accepted by make_model.
const std::vector<std::string>& model_names();

/// "mlp": Flatten, Linear(784,256), ReLU, Linear(256,10).
/// "cnn": Conv2d(1,32,3,p1), ReLU, MaxPool2d(2), Conv2d(32,64,3,p1), ReLU, MaxPool2d(2),
///        Flatten, Linear(3136,128), ReLU, Linear(128,10).
/// "cnn-bn": the cnn with BatchNorm2d(32) / BatchNorm2d(64) after its convolutions (the
///        state dict of PyTorch's same nn.Sequential, num_batches_tracked included, loads
///        strictly with --init).
/// Parameters are drawn from axle's default generator (seed it first). Throws axle::Error
/// for an unknown name.
axle::nn::ModulePtr make_model(const std::string& name);

}  // namespace axle_train
