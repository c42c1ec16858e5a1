// Element types.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace axle {

/// Element type of a tensor. BFloat16/Float16 are reserved for later backends.
enum class DType : uint8_t { Float32, Int64, Int32, Bool, UInt8, BFloat16, Float16 };

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;

/// Bytes per element.
size_t itemsize(DType t);
/// "float32", "int64", ...
const char* dtype_name(DType t);
bool is_floating(DType t);
/// The type binary arithmetic on `a` and `b` computes in (float > int64 > int32 > uint8 > bool).
DType promote(DType a, DType b);

std::ostream& operator<<(std::ostream& os, DType t);

}  // namespace axle
