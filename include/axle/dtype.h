// Element types.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace axle {

/// Element type of a tensor. BFloat16 is stored in 2 bytes and computed in float32 registers
/// (docs/architecture.md, "bfloat16"); Float16 is reserved for later backends.
enum class DType : uint8_t { Float32, Int64, Int32, Bool, UInt8, BFloat16, Float16 };

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kBFloat16 = DType::BFloat16;

/// One bfloat16 value: the top 16 bits of a float32 (8 exponent bits, 7 mantissa bits).
/// The one place axle converts: from float rounds to nearest, ties to even, keeps NaN a
/// (quiet) NaN; to float is exact.
struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float f) : bits(round_bits(f)) {}
  explicit operator float() const { return to_float(bits); }

  static constexpr uint16_t round_bits(float f) {
    const uint32_t u = __builtin_bit_cast(uint32_t, f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // NaN stays NaN
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  static constexpr float to_float(uint16_t b) { return __builtin_bit_cast(float, uint32_t(b) << 16); }
};

/// Bytes per element.
size_t itemsize(DType t);
/// "float32", "int64", ...
const char* dtype_name(DType t);
bool is_floating(DType t);
/// The type binary arithmetic on `a` and `b` computes in, as PyTorch's promotion:
/// float32 > bfloat16 > float16 > int64 > int32 > uint8 > bool, and bfloat16 with float16
/// gives float32.
DType promote(DType a, DType b);

std::ostream& operator<<(std::ostream& os, DType t);

}  // namespace axle
