// The bf16 arithmetic's two packet steps (cpu/bf16.h), shared by the CPU bf16 kernels (the fused
// and staged chains in cpu/bf16.cpp, the decode kernel's bf16 cache in cpu/decode.cpp): 2^x of a
// non-positive x with CUDA's flush of results below 2^-126, and the rounding of weights to bf16.
#pragma once

#include <Eigen/Core>

namespace attnlab::bf16_packets {

namespace ei = Eigen::internal;
using Packet = ei::packet_traits<float>::type;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
using PacketI = ei::unpacket_traits<Packet>::integer_packet;
#pragma GCC diagnostic pop

// 2^x for x <= 0 or -inf: x = n + f with n = floor(x + 1/2), 2^f = e^(f ln 2) by Cephes' expf
// polynomial on |f ln 2| <= ln(2) / 2 (about 1 ulp). Results below 2^-126 are exactly 0, as
// ex2.approx.ftz gives them on the GPU: masked keys weigh nothing and P V meets no subnormals.
inline Packet exp2_nonpositive(const Packet& x) {
  const Packet xc = ei::pmax(x, ei::pset1<Packet>(-127.f));  // n stays in int range
  const Packet n = ei::pfloor(ei::padd(xc, ei::pset1<Packet>(0.5f)));
  const Packet r = ei::pmul(ei::psub(xc, n), ei::pset1<Packet>(0.693147180559945309f));
  Packet y = ei::pset1<Packet>(1.9875691500e-4f);
  y = ei::pmadd(y, r, ei::pset1<Packet>(1.3981999507e-3f));
  y = ei::pmadd(y, r, ei::pset1<Packet>(8.3334519073e-3f));
  y = ei::pmadd(y, r, ei::pset1<Packet>(4.1665795894e-2f));
  y = ei::pmadd(y, r, ei::pset1<Packet>(1.6666665459e-1f));
  y = ei::pmadd(y, r, ei::pset1<Packet>(5.0000001201e-1f));
  y = ei::pmadd(y, ei::pmul(r, r), ei::padd(r, ei::pset1<Packet>(1.f)));
  const PacketI bits = ei::plogical_shift_left<23>(
      ei::padd(ei::pcast<Packet, PacketI>(n), ei::pset1<PacketI>(127)));
  const Packet e = ei::pmul(y, ei::preinterpret<Packet>(bits));
  return ei::pselect(ei::pcmp_lt(x, ei::pset1<Packet>(-126.f)), ei::pzero(x), e);
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
