// Fashion-MNIST (Xiao et al. 2017): 60k train / 10k test 28x28 grey images, 10 classes.
// Reads the gzip IDX files of Debian's `dataset-fashion-mnist` package
// (uncompressed IDX files with the same names minus `.gz` work too).
//
//   auto train = std::make_shared<axle::data::FashionMNIST>();          // default root, train split
//   auto test  = std::make_shared<axle::data::FashionMNIST>(root, false);
#pragma once
#include <string>

#include "axle/data/dataset.h"

namespace axle::data {

/// Where Debian's dataset-fashion-mnist installs the files.
inline constexpr const char* kFashionMNISTRoot = "/usr/share/datasets/fashion-mnist";
/// Normalization used by the reference script: ((x / 255) - mean) / std.
inline constexpr float kFashionMNISTMean = 0.2860f;
inline constexpr float kFashionMNISTStd = 0.3530f;
/// Class names, index = label.
extern const char* const kFashionMNISTClasses[10];

/// Reads an IDX file (gzip-compressed or plain) of unsigned bytes into a uint8 tensor
/// whose shape is the file's dimensions. Validates the magic number, the dimensions
/// and the data size against the header; a missing, truncated or corrupt file throws
/// axle::Error naming the file, what was expected and what was found.
/// `expected_ndim` > 0 also checks the number of dimensions.
Tensor read_idx(const std::string& path, int expected_ndim = 0);

class FashionMNIST : public TensorDataset {
 public:
  /// Loads `{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]` from `root`:
  /// data float32 [N, 1, 28, 28] normalized as above, targets int64 [N] in 0..9.
  explicit FashionMNIST(const std::string& root = kFashionMNISTRoot, bool train = true);

  bool is_train() const { return train_; }

 private:
  bool train_ = true;
};

}  // namespace axle::data
