// Devices: `cpu` runs each op eagerly; `xla:N` is the lazy device (ops are traced into a graph).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>

namespace axle {

enum class DeviceType : uint8_t { CPU, XLA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_xla() const { return type == DeviceType::XLA; }
  /// "cpu" or "xla:N".
  std::string str() const;
  /// Parses "cpu", "xla", "xla:N"; throws axle::Error on anything else.
  static Device parse(const std::string& s);
  friend bool operator==(const Device&, const Device&) = default;
};

inline constexpr Device kCPU{DeviceType::CPU, 0};

std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace axle
