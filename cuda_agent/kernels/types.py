"""The C types an exported launcher may take, shared by the compile-time parser and the load-time binding.

Pointer parameters take tensors; the dtype a pointer accepts is named by torch attribute (``float32``) so this
module imports neither torch nor anything compiled.
"""

from __future__ import annotations

import ctypes

# Pointer base type -> torch dtype name; None = any dtype (void*).
POINTER_DTYPES: dict[str, str | None] = {
    "void": None,
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "__half": "float16",
    "nv_bfloat16": "bfloat16",
    "__nv_bfloat16": "bfloat16",
    "int": "int32",
    "int32_t": "int32",
    "unsigned int": "uint32",
    "uint32_t": "uint32",
    "long": "int64",
    "long long": "int64",
    "int64_t": "int64",
    "short": "int16",
    "int16_t": "int16",
    "int8_t": "int8",
    "signed char": "int8",
    "char": "int8",
    "uint8_t": "uint8",
    "unsigned char": "uint8",
    "bool": "bool",
}

# Scalar type -> ctypes type.
SCALAR_CTYPES: dict[str, type] = {
    "int": ctypes.c_int32,
    "int32_t": ctypes.c_int32,
    "unsigned int": ctypes.c_uint32,
    "uint32_t": ctypes.c_uint32,
    "long": ctypes.c_int64,
    "long long": ctypes.c_int64,
    "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "bool": ctypes.c_bool,
}

STREAM_TYPES = ("cudaStream_t",)
# Non-void return values come back as ints; a cudaError_t that is not 0 raises.
RETURN_TYPES = ("void", "int", "cudaError_t")

MANIFEST_NAME = "manifest.json"
LIBRARY_NAME = "libkernels.so"
MANIFEST_VERSION = 1
