// parallel/reduce.h
//
// Element-wise reduction kernels of the host collectives.
//
// Thread safety: pure functions.

#ifndef WEIR_PARALLEL_REDUCE_H_
#define WEIR_PARALLEL_REDUCE_H_

#include <cstdint>

#include "parallel/communicator.h"

namespace weir::parallel {

// Sets acc[i] = acc[i] op in[i] for i in [0, count), reading `dtype` elements.
// kMin/kMax keep `acc[i]` unless `in[i]` compares strictly less/greater, so a
// NaN in `in` never replaces a value. Integer sums wrap (two's complement). REQUIRES: acc and in do
// not overlap partially (they may be equal); both hold `count` elements.
void ReduceInto(DataType dtype, ReduceOp op, void* acc, const void* in, int64_t count);

}  // namespace weir::parallel

#endif  // WEIR_PARALLEL_REDUCE_H_
