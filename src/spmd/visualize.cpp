// xs::debugging::visualize_sharding: a box table of which device holds which tile.
//
// torch_xla draws the first two tile dims only (dropping devices of 3-D shardings) and
// rejects 1-D ones; here a 1-D sharding is one row, and tile dims beyond the last are
// folded row-major into rows, so every device appears exactly once.
#include <algorithm>

#include "axle/xs.h"
#include "spmd/sharding.h"

namespace axle::xs::debugging {
namespace {

std::string repeat(const char* s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::string label(const std::vector<int64_t>& devices) {
  if (devices.size() == 1) return "CPU " + std::to_string(devices[0]);
  std::string s = "CPU [";
  for (size_t i = 0; i < devices.size(); ++i) s += (i ? ", " : "") + std::to_string(devices[i]);
  return s + "]";
}

}  // namespace

std::string visualize_sharding(std::string_view sharding, VisualizeOptions o) {
  spmd::TileAssignment t = spmd::parse_hlo_v1(sharding);
  // Cells: one per tile, row-major over the tile dims; each holds its devices.
  std::vector<int64_t> tile_dims = t.dims;
  int64_t rep = 1;
  if (t.last_tile_dim_replicate) {
    rep = tile_dims.back();
    tile_dims.pop_back();
  }
  std::vector<std::vector<int64_t>> cells;
  if (t.replicated || t.manual) {
    std::vector<int64_t> all(runtime::global_runtime_device_count());
    for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
    cells.push_back(all);
    tile_dims = {};
  } else {
    for (size_t k = 0; k < t.devices.size(); k += size_t(rep))
      cells.emplace_back(t.devices.begin() + k, t.devices.begin() + k + rep);
  }
  int64_t cols = tile_dims.empty() ? 1 : tile_dims.back();
  int64_t rows = int64_t(cells.size()) / cols;

  std::string out = "Visualizing " + std::string(sharding);
  if (tile_dims.size() <= 2) {
    out += " (showing up to the first two dimensions)\n";
  } else {
    size_t r = tile_dims.size();
    out += " (dims folded: rows = dims 0.." + std::to_string(r - 2) + ", columns = dim " + std::to_string(r - 1) +
           ")\n";
  }

  std::vector<std::string> labels;
  size_t longest = 0;
  for (const auto& c : cells) {
    labels.push_back(label(c));
    longest = std::max(longest, labels.back().size());
  }
  int w = std::max<int>(o.min_width, int(longest) + 2);
  if (cols * (w + 1) + 1 > o.max_width) w = std::max<int>(int(longest) + 2, (o.max_width - 1) / int(cols) - 1);

  auto rule = [&](const char* left, const char* mid, const char* right) {
    std::string s = left;
    for (int64_t c = 0; c < cols; ++c) s += (c ? mid : "") + repeat("─", w);
    return s + right + "\n";
  };
  out += rule("┌", "┬", "┐");
  for (int64_t r = 0; r < rows; ++r) {
    if (r) out += rule("├", "┼", "┤");
    out += "│";
    for (int64_t c = 0; c < cols; ++c) {
      size_t k = size_t(r * cols + c);
      const std::string& text = labels[k];
      int pad = w - int(text.size()), left = pad / 2;
      std::string cell = text;
      if (o.use_color) cell = "\x1b[" + std::to_string(31 + k % 6) + "m" + text + "\x1b[0m";
      out += std::string(size_t(left), ' ') + cell + std::string(size_t(pad - left), ' ') + "│";
    }
    out += "\n";
  }
  out += rule("└", "┴", "┘");
  return out;
}

}  // namespace axle::xs::debugging
