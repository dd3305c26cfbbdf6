"""compile_svc: Compiles candidate kernels in the sandbox, cached; serves artifacts to GPU workers."""
