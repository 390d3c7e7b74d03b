"""MPI under the TrainingJob contract (networking.backend: mpi): rank 0's pod runs
`mpirun -np N python3 examples/python/mpi_allreduce.py`; Open MPI reads the hostfile and ssh options the
operator set (OMPI_MCA_orte_default_hostfile, OMPI_MCA_plm_rsh_args) and starts one process per slot on
every pod over SSH. The processes fit y = x.w by gradient descent on their shards, all-reducing the
gradients with mpi4py; each prints its host, its MPI rank and a checksum of w (equal everywhere).
"""

import socket
import sys

import numpy as np
from mpi4py import MPI


def main():
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2048, 4))
    y = x @ np.array([1.0, -2.0, 3.0, 0.5])
    x, y = x[rank::size], y[rank::size]
    w = np.zeros(4)
    for epoch in range(1, 51):
        grad = 2 * x.T @ (x @ w - y) / len(y)
        total = np.empty_like(grad)
        comm.Allreduce(grad, total, op=MPI.SUM)
        w -= 0.05 * total / size
        if rank == 0 and epoch % 10 == 0:
            print("epoch %d/50 loss=%.6f" % (epoch, float(np.mean((x @ w - y) ** 2))), flush=True)
    print("rank %d of %d on %s checksum %.8f" % (rank, size, socket.gethostname(), w.sum()), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
