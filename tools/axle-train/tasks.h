// axle-train's tasks: what a run trains and how it is judged.
#pragma once

#include <memory>

#include "trainer.h"

namespace axle_train {

/// mlp, cnn, cnn-bn on Fashion-MNIST: cross-entropy on the labels, test accuracy after every
/// epoch; the JSON adds test_accuracy and samples_per_second.
std::unique_ptr<Task> make_fmnist_task(Config& cfg);

/// gpt on text (docs/gpt.md): next-character cross-entropy, warmup + cosine schedule,
/// gradient accumulation and clipping, validation loss, sampling; the JSON adds the model's
/// shape, the schedule and the validation history.
std::unique_ptr<Task> make_gpt_task(Config& cfg);

}  // namespace axle_train
