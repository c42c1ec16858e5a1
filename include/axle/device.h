// Devices: `cpu` runs each op eagerly; `xla:N` defers them (ops are traced into a graph).
// A Device converts implicitly from a string, as in PyTorch: `t.to("xla")`,
// `model->to("cpu")`, `axle::Device("xla:0")`.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>

namespace axle {

enum class DeviceType : uint8_t { CPU, XLA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device(DeviceType t = DeviceType::CPU, int i = 0) : type(t), index(i) {}
  /// "cpu", "xla" (= "xla:0") or "xla:N"; anything else throws axle::Error. Implicit on purpose.
  Device(const char* s);         // NOLINT(google-explicit-constructor)
  Device(const std::string& s);  // NOLINT(google-explicit-constructor)

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
