#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"

namespace astrai::cpu {

bool isa_available(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::avx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
    case Isa::avx2: return __builtin_cpu_supports("avx2");
    default: return true;
  }
#else
  return isa == Isa::best || isa == Isa::baseline;
#endif
}

Isa checked_isa(Isa isa, const char* op) {
  static const Isa best = [] {
    for (Isa i : {Isa::avx512, Isa::avx2})
      if (isa_available(i)) return i;
    return Isa::baseline;
  }();
  if (isa == Isa::best) return best;
  ASTRAI_OP_CHECK(isa_available(isa),
                  std::string(op) + ": this CPU lacks the instruction set of the path asked for");
  return isa;
}

}  // namespace astrai::cpu
