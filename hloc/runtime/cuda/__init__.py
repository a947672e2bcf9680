"""The CUDA runtimes: `--device cuda` (driver.py: the CUDA driver through cuda-bindings;
program.py: the GPU thunk program's runner; transfers.py: pinned staging and async copies;
residency.py: device-resident parameters; cublas.py: cuBLAS GEMMs; collectives.py: the
collective thunks, host-staged or, for MPI ranks, as NCCL calls through nccl/) and
`--device cuda-emulated` (emulated.py: the same program with the kernels compiled for the
host; host_blas.py: the host BLAS standing in for cuBLAS; nccl/emulated.py: NCCL modelled
over MPI)."""
