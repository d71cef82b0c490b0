// fl_dtype_t and fl_redop_t to MPI (mpi_internal.hpp). MPI 3.1 (Open MPI 4.1, MPICH 4.0) has
// no 16-bit floating types: float16 and bfloat16 move as 2-byte integers and reduce through
// user operations that widen each element to float, apply the reduction and round back to
// nearest, ties to even (what NCCL's reductions of these types give for two operands).
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "mpi_internal.hpp"

namespace flowlane::mpi {

size_t dtype_size(uint32_t dtype) {
  switch (dtype) {
    case FL_DTYPE_INT8: case FL_DTYPE_UINT8: return 1;
    case FL_DTYPE_FLOAT16: case FL_DTYPE_BFLOAT16: return 2;
    case FL_DTYPE_INT32: case FL_DTYPE_UINT32: case FL_DTYPE_FLOAT32: return 4;
    default: return 8;
  }
}

MPI_Datatype datatype(uint32_t dtype) {
  switch (dtype) {
    case FL_DTYPE_INT8: return MPI_INT8_T;
    case FL_DTYPE_UINT8: return MPI_UINT8_T;
    case FL_DTYPE_INT32: return MPI_INT32_T;
    case FL_DTYPE_UINT32: return MPI_UINT32_T;
    case FL_DTYPE_INT64: return MPI_INT64_T;
    case FL_DTYPE_UINT64: return MPI_UINT64_T;
    case FL_DTYPE_FLOAT32: return MPI_FLOAT;
    case FL_DTYPE_FLOAT64: return MPI_DOUBLE;
    default: return MPI_UINT16_T;  // float16, bfloat16
  }
}

namespace {

// ---- 16-bit floats ----------------------------------------------------------------------------

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      float f = std::ldexp(float(man), -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));  // inf, nan
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to infinity
  if (absx < 0x38800000u) {  // subnormal or zero in half: round |f| * 2^24 to an integer, ties to even
    float a;
    std::memcpy(&a, &absx, 4);
    return uint16_t(sign | uint16_t(std::nearbyint(a * 16777216.0f)));
  }
  // normal: drop 13 mantissa bits, round to nearest even
  uint32_t r = absx - 0x38000000u;  // rebias the exponent (127 -> 15)
  r += 0xfffu + ((r >> 13) & 1);
  return uint16_t(sign | (r >> 13));
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // nan stays nan
  x += 0x7fffu + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

template <uint32_t kRedop>
float apply(float a, float b) {
  if constexpr (kRedop == FL_REDOP_SUM) return a + b;
  if constexpr (kRedop == FL_REDOP_PROD) return a * b;
  if constexpr (kRedop == FL_REDOP_MAX) return std::isnan(a) || std::isnan(b) ? NAN : std::fmax(a, b);
  return std::isnan(a) || std::isnan(b) ? NAN : std::fmin(a, b);
}

// MPI_User_function: inout[i] = in[i] (op) inout[i].
template <bool kBf16, uint32_t kRedop>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = kBf16 ? bf16_to_float(a[i]) : half_to_float(a[i]);
    const float y = kBf16 ? bf16_to_float(b[i]) : half_to_float(b[i]);
    const float z = apply<kRedop>(x, y);
    b[i] = kBf16 ? float_to_bf16(z) : float_to_half(z);
  }
}

template <bool kBf16>
MPI_User_function* function16(uint32_t redop) {
  switch (redop) {
    case FL_REDOP_SUM: return &reduce16<kBf16, FL_REDOP_SUM>;
    case FL_REDOP_PROD: return &reduce16<kBf16, FL_REDOP_PROD>;
    case FL_REDOP_MAX: return &reduce16<kBf16, FL_REDOP_MAX>;
    default: return &reduce16<kBf16, FL_REDOP_MIN>;
  }
}

}  // namespace

MPI_Op reduction(uint32_t dtype, uint32_t redop) {
  if (dtype != FL_DTYPE_FLOAT16 && dtype != FL_DTYPE_BFLOAT16) {
    switch (redop) {
      case FL_REDOP_SUM: return MPI_SUM;
      case FL_REDOP_PROD: return MPI_PROD;
      case FL_REDOP_MAX: return MPI_MAX;
      default: return MPI_MIN;
    }
  }
  static std::mutex mu;
  static MPI_Op ops[2][4] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                             {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};
  const int t = dtype == FL_DTYPE_BFLOAT16 ? 1 : 0;
  std::lock_guard<std::mutex> lk(mu);
  MPI_Op& op = ops[t][redop & 3];
  if (op == MPI_OP_NULL)
    MPI_Op_create(t == 1 ? function16<true>(redop) : function16<false>(redop), /*commute=*/1, &op);
  return op;
}

uint64_t chunk_elements() {
  static const uint64_t chunk = [] {
    const char* v = std::getenv("FLOWLANE_MPI_CHUNK");
    if (v != nullptr && *v != 0) {
      char* end = nullptr;
      const unsigned long long x = std::strtoull(v, &end, 10);
      if (end != nullptr && *end == 0 && x > 0 && x <= uint64_t(INT_MAX)) return uint64_t(x);
    }
    return uint64_t(INT_MAX);
  }();
  return chunk;
}

}  // namespace flowlane::mpi
