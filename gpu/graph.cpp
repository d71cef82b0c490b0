// CUDA graphs for programs: see gpu/graph.hpp.
#include "gpu/graph.hpp"

namespace flowlane::gpu {

core::ProgramDevice* program_device() { return nullptr; }

}  // namespace flowlane::gpu
