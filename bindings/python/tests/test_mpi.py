"""flowlane.mpi (the plugin libflowlane_mpi.so through ctypes) in one process: MPI's
singleton start (no mpirun), a communicator of one rank, mpi4py communicators and raw
addresses, what is refused. Skipped where mpi4py or the plugin is missing; the
multi-process runs are the examples under mpirun (ctest example.mpi_dp_py) and the C
tests (ctest -L mpi)."""

import ctypes
import unittest

from _support import flowlane

try:
    from mpi4py import MPI
    import flowlane.mpi as fmpi
    fmpi.library_path()
    SKIP = None
except ImportError as e:  # no mpi4py, or no plugin in this build
    SKIP = str(e)


@unittest.skipIf(SKIP is not None, "flowlane.mpi unavailable: %s" % SKIP)
class MpiPlugin(unittest.TestCase):
    def test_a_communicator_of_mpi4pys_world_and_a_collective(self):
        with flowlane.Engine(workers=2, lanes=4) as e:
            comm = fmpi.comm_create(e, MPI.COMM_WORLD, lane=1)
            buf = (ctypes.c_float * 3)(1, 2, 3)
            comm.all_reduce(ctypes.addressof(buf), ctypes.addressof(buf), 3, flowlane.DType.FLOAT32)
            e.synchronize(timeout=60)
            self.assertEqual(list(buf), [float(v) * MPI.COMM_WORLD.Get_size() for v in (1, 2, 3)])
            comm.set_timeout(5000)
            comm.close()

    def test_the_address_of_a_handle_is_accepted(self):
        dup = MPI.COMM_WORLD.Dup()
        try:
            with flowlane.Engine(workers=2, lanes=4) as e:
                comm = fmpi.comm_create(e, MPI._addressof(dup), lane=2)
                self.assertEqual(comm.stream().kind, flowlane.StreamKind.COLLECTIVE)
                comm.close()
        finally:
            dup.Free()

    def test_what_is_refused(self):
        with flowlane.Engine(workers=2, lanes=4) as e:
            with self.assertRaises(TypeError):
                fmpi.comm_create(e, object())
            with self.assertRaises(ValueError):
                fmpi.comm_create(e, 0)
            with self.assertRaises(flowlane.InvalidArgument) as cm:
                fmpi.comm_create(e, MPI.COMM_WORLD, lane=1, nranks=7, rank=0)
            self.assertIn("rank 0 of 7", str(cm.exception))
            with self.assertRaises(flowlane.OutOfRange):
                fmpi.comm_create(e, MPI.COMM_WORLD, lane=99)


if __name__ == "__main__":
    unittest.main()
