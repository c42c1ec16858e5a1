#include "axle/device.h"

#include <ostream>

#include "axle/error.h"

namespace axle {

std::string Device::str() const { return is_cpu() ? "cpu" : "xla:" + std::to_string(index); }

Device::Device(const char* s) {
  AXLE_CHECK(s != nullptr, "[device] expected 'cpu', 'xla' or 'xla:N', got a null string");
  *this = parse(s);
}

Device::Device(const std::string& s) { *this = parse(s); }

Device Device::parse(const std::string& s) {
  if (s == "cpu") return kCPU;
  if (s == "xla") return Device{DeviceType::XLA, 0};
  if (s.rfind("xla:", 0) == 0 && s.size() > 4 && s.size() < 8 &&
      s.find_first_not_of("0123456789", 4) == std::string::npos)
    return Device{DeviceType::XLA, std::stoi(s.substr(4))};
  AXLE_FAIL("[device] expected 'cpu', 'xla' or 'xla:N', got '", s, "'");
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace axle
