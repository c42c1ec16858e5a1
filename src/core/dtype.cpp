#include "axle/dtype.h"

#include <ostream>

#include "axle/error.h"

namespace axle {

size_t itemsize(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Int64: return 8;
    case DType::Int32: return 4;
    case DType::Bool: return 1;
    case DType::UInt8: return 1;
    case DType::BFloat16: return 2;
    case DType::Float16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Int64: return "int64";
    case DType::Int32: return "int32";
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8";
    case DType::BFloat16: return "bfloat16";
    case DType::Float16: return "float16";
  }
  return "?";
}

bool is_floating(DType t) { return t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16; }

static int rank(DType t) {
  switch (t) {
    case DType::Bool: return 0;
    case DType::UInt8: return 1;
    case DType::Int32: return 2;
    case DType::Int64: return 3;
    case DType::Float16: return 4;
    case DType::BFloat16: return 5;
    case DType::Float32: return 6;
  }
  return 0;
}

DType promote(DType a, DType b) {
  if ((a == DType::BFloat16 && b == DType::Float16) || (a == DType::Float16 && b == DType::BFloat16)) return DType::Float32;
  return rank(a) >= rank(b) ? a : b;
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

}  // namespace axle
