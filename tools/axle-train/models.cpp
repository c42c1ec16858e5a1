#include "models.h"

#include <memory>

#include "axle/error.h"
#include "axle/nn/modules.h"

namespace axle_train {

using namespace axle::nn;

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names{"mlp", "cnn", "cnn-bn", "gpt"};
  return names;
}

ModulePtr make_model(const std::string& name) {
  if (name == "mlp") {
    return std::make_shared<Sequential>(std::vector<ModulePtr>{
        std::make_shared<Flatten>(), std::make_shared<Linear>(784, 256), std::make_shared<ReLU>(),
        std::make_shared<Linear>(256, 10)});
  }
  if (name == "cnn") {
    return std::make_shared<Sequential>(std::vector<ModulePtr>{
        std::make_shared<Conv2d>(1, 32, 3, Conv2dOptions{.padding = 1}), std::make_shared<ReLU>(),
        std::make_shared<MaxPool2d>(2), std::make_shared<Conv2d>(32, 64, 3, Conv2dOptions{.padding = 1}),
        std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>(),
        std::make_shared<Linear>(3136, 128), std::make_shared<ReLU>(), std::make_shared<Linear>(128, 10)});
  }
  if (name == "cnn-bn") {  // the cnn with BatchNorm2d after each convolution (PyTorch's state dict keys)
    return std::make_shared<Sequential>(std::vector<ModulePtr>{
        std::make_shared<Conv2d>(1, 32, 3, Conv2dOptions{.padding = 1}), std::make_shared<BatchNorm2d>(32),
        std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
        std::make_shared<Conv2d>(32, 64, 3, Conv2dOptions{.padding = 1}), std::make_shared<BatchNorm2d>(64),
        std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>(),
        std::make_shared<Linear>(3136, 128), std::make_shared<ReLU>(), std::make_shared<Linear>(128, 10)});
  }
  AXLE_FAIL("[axle-train] unknown model '", name, "': expected mlp, cnn or cnn-bn (gpt is axle::models::GPT, built from its flags)");
}

}  // namespace axle_train
