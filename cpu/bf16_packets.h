// Two packet steps of the CPU kernels: 2^t of a non-positive t with CUDA's flush of results below
// 2^-126 (every kernel's exp: the fp32 fused kernel, its walk and backward in cpu/online_softmax.h,
// the decode kernel, the bf16 chains in cpu/bf16.cpp), and the rounding of weights to bf16 (cpu/bf16.h).
#pragma once

#include <Eigen/Core>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace attnlab::bf16_packets {

namespace ei = Eigen::internal;
using Packet = ei::packet_traits<float>::type;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
using PacketI = ei::unpacket_traits<Packet>::integer_packet;
#pragma GCC diagnostic pop

// 2^t for t <= 0 (a score minus the running max, times the scale in base 2; a rounding may leave
// it a little above 0), the exp of every CPU kernel, fp32 and bf16: t = n + r with n = rint(t) and
// r in [-1/2, 1/2] (exact), 2^r by a degree-6 polynomial fitted to it on that interval (Chebyshev
// nodes; within 1.3 ulp of 2^r in fp32 Horner steps), times 2^n. Below -126 (2^t under FLT_MIN)
// the result is exactly 0, as ex2.approx.ftz gives it on the GPU: masked keys (-inf) and every key
// of a row masked so far weigh exactly 0 on every ISA, P V meets no subnormals, and a NaN (an
// overflowed score) stays NaN, which the kernels' final checks refuse. Eleven vector operations
// where the Cephes exp of natural x (a floor, the two-part ln 2 reduction, a split polynomial)
// takes sixteen.
inline Packet exp2_nonpositive(const Packet& t) {
  const Packet n = ei::print(t);
  const Packet r = ei::psub(t, n);
  Packet y = ei::pmadd(ei::pset1<Packet>(1.5461444855e-4f), r, ei::pset1<Packet>(1.3400427997e-3f));
  y = ei::pmadd(y, r, ei::pset1<Packet>(9.6180569381e-3f));
  y = ei::pmadd(y, r, ei::pset1<Packet>(5.5503271520e-2f));
  y = ei::pmadd(y, r, ei::pset1<Packet>(2.4022650719e-1f));
  y = ei::pmadd(y, r, ei::pset1<Packet>(6.9314718246e-1f));
  y = ei::pmadd(y, r, ei::pset1<Packet>(1.f));
#if defined(__AVX512F__)
  if constexpr (sizeof(Packet) == 64) {  // 16 lanes
    // y 2^n in one instruction (vscalefps: the same exact scaling as the multiply below), zeroed
    // where t < -126; the comparison is "not less than", true for a NaN, which stays NaN.
    const __mmask16 keep = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-126.f), _CMP_NLT_UQ);
    return _mm512_maskz_scalef_ps(keep, y, n);
  }
#endif
  // 2^n for n in [-126, 0] (1 for a t rounded a little above 0): n + 127 into the exponent field.
  const PacketI bits = ei::plogical_shift_left<23>(
      ei::padd(ei::pcast<Packet, PacketI>(n), ei::pset1<PacketI>(127)));
  const Packet e = ei::pmul(y, ei::preinterpret<Packet>(bits));
  return ei::pselect(ei::pcmp_lt(t, ei::pset1<Packet>(-126.f)), ei::pzero(t), e);
}

inline float exp2_nonpositive(float x) {
  return ei::pfirst(exp2_nonpositive(ei::pset1<Packet>(x)));
}

// x rounded to bf16 (nearest even), kept as fp32: bf16_bits on every lane. The values here are
// weights in [0, 1] (or NaN after an overflow, which stays NaN and is refused later).
inline Packet round_bf16(const Packet& x) {
  const PacketI u = ei::preinterpret<PacketI>(x);
  const PacketI lsb = ei::pand(ei::plogical_shift_right<16>(u), ei::pset1<PacketI>(1));
  const PacketI r = ei::padd(ei::padd(u, ei::pset1<PacketI>(0x7fff)), lsb);
  return ei::preinterpret<Packet>(ei::pand(r, ei::pset1<PacketI>(static_cast<int>(0xffff0000u))));
}

}  // namespace attnlab::bf16_packets
