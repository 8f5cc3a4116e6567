// GCC 12 reports -Wuninitialized / -Wmaybe-uninitialized inside its own AVX-512 intrinsics
// header (`__m512 __Y = __Y;`, GCC bug 105593, fixed in GCC 13) wherever Eigen's AVX-512 matrix
// kernels are inlined: about 900 lines of noise per file in an -march=native build on an AVX-512
// machine, which would bury a real warning. The files that instantiate those kernels include this
// first; it turns the two warnings off for the rest of that file, on GCC 12 only.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
