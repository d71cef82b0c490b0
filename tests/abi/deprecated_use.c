/* abi.deprecated_warns compiles this with FL_WARN_DEPRECATED defined and expects GCC or
   Clang to name the deprecated call and its replacement. (Without FL_WARN_DEPRECATED the
   same calls compile silently under -Werror: abi.c99 uses them.) */
#include <flowlane/flowlane.h>

uint32_t lane_of(const fl_instr_ctx_t* ctx);
uint32_t lane_of(const fl_instr_ctx_t* ctx) { return fl_instr_lane(ctx); }
