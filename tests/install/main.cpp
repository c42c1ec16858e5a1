// An out-of-tree program built against an *installed* axle (find_package or pkg-config; see
// tests/install/check.sh). It does real work through the public headers only: a lazy `xla`
// computation checked against its known value, then training steps whose loss must fall.
// Exit status 0 only when both hold.
#include <axle/axle.h>

#include <cmath>
#include <cstdio>
#include <vector>

using namespace axle;

namespace {

int fail(const char* what, double got) {
  std::fprintf(stderr, "axle-consumer: FAILED: %s (got %g)\n", what, got);
  return 1;
}

}  // namespace

int main() {
  try {
    const Device dev = axle::device();

    // 1. Lazy: nothing runs until sync(), which compiles one graph for the pending ops.
    Tensor x = from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3}).to(dev);
    Tensor w = from_vector(std::vector<float>{1, -1, 2, 0, 0.5f, 1}, {3, 2}).to(dev);
    Tensor y = (matmul(x * 2.0 + 1.0, w)).sum();  // [[1,3,5],[7,9,11]] @ w = [[9.5,4],[30.5,4]], summed: 48
    const int64_t compiled = metrics::counter_value("UncachedCompile");
    axle::sync();
    if (metrics::counter_value("UncachedCompile") <= compiled) return fail("sync() compiled no graph", 0);
    if (y.device() != dev) return fail("result left the xla device", 0);
    const double sum = y.item();
    if (std::fabs(sum - 48.0) > 1e-4) return fail("lazy matmul-sum != 48", sum);

    // 2. Training, seed Pattern 1: a small MLP fits y = x . w_true on the xla device.
    manual_seed(0);
    Tensor inputs = randn({256, 8});
    Tensor targets = matmul(inputs, randn({8, 1}));
    auto model = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Linear>(8, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 1)});
    model->to(dev);
    optim::SGD optimizer(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    const Tensor xd = inputs.to(dev), yd = targets.to(dev);
    std::vector<Tensor> losses;
    for (int i = 0; i < 30; ++i) {
      auto step = axle::step();
      optimizer.zero_grad();
      Tensor loss = mse_loss((*model)(xd), yd);
      loss.backward();
      optimizer.step();
      losses.push_back(loss);
    }
    axle::sync();
    const double first = losses.front().item(), last = losses.back().item();
    if (!std::isfinite(first) || !std::isfinite(last)) return fail("loss is not finite", last);
    if (!(last < 0.25 * first)) return fail("loss did not fall to a quarter of its first value", last / first);

    std::printf("axle-consumer: lazy matmul-sum %.1f (graph compiled at sync), mse %.4f -> %.4f in %zu steps\n",
                sum, first, last, losses.size());
    return 0;
  } catch (const axle::Error& e) {
    std::fprintf(stderr, "axle-consumer: FAILED: %s\n", e.what());
    return 1;
  }
}
