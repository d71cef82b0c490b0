// The device part of programs (capture and replay): a core::ProgramDevice
// (engine/program_device.hpp) that turns a program's kernels, copies and memsets into CUDA
// graphs, built and instantiated once at fl_capture_end and replayed with one
// cudaGraphLaunch each (gpu/README.md, "Programs: CUDA graphs"). Declared in every build:
// in a CPU-only build program_device() is null.
#pragma once

#include "engine/program_device.hpp"

namespace flowlane::gpu {

// The process's ProgramDevice, or null in a CPU-only build or where the CUDA runtime cannot
// be loaded (programs then hold host work only; no CUDA stream exists to capture from).
core::ProgramDevice* program_device();

}  // namespace flowlane::gpu
