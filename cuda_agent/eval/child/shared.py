"""Shared output buffers: how a candidate's outputs reach the reference child without touching disk.

The reference child allocates one buffer sized exactly from its own outputs and exports it as a file descriptor;
the parent passes that descriptor to the candidate child (SCM_RIGHTS), which maps it and copies its outputs in.
The buffer only ever holds the candidate's outputs: the reference's own outputs never leave its process.

- device cuda: driver virtual-memory-management memory (``cuMemCreate`` with a POSIX file descriptor handle),
  mapped in both processes and wrapped as a torch tensor through ``__cuda_array_interface__``; the candidate's
  copy is device to device.
- device cpu: a sealed ``memfd`` (it can neither shrink nor grow, so the candidate cannot make the reference's
  mapping fault), mapped with ``mmap``.

This module imports only torch and the standard library: it runs in both children.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
from typing import Any

import torch

_CU_MEM_ALLOCATION_TYPE_PINNED = 1
_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1


class SharedBufferError(RuntimeError):
    pass


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _AllocationProp(ctypes.Structure):
    """CUmemAllocationProp (cuda.h)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _AccessDesc(ctypes.Structure):
    """CUmemAccessDesc (cuda.h)."""

    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_driver: Any = None


def _cuda() -> Any:
    """libcuda, loaded once, after torch created its context (the VMM calls use the current context)."""
    global _driver
    if _driver is None:
        _driver = ctypes.CDLL("libcuda.so.1")
    return _driver


def _check(result: int, what: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        _cuda().cuGetErrorName(result, ctypes.byref(name))
        raise SharedBufferError(f"{what} failed: {(name.value or b'?').decode()} ({result})")


def _prop(device: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type = _CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.location = _Location(_CU_MEM_LOCATION_TYPE_DEVICE, device)
    return prop


class _CudaArray:
    """What torch.as_tensor needs to wrap a raw device pointer without copying."""

    def __init__(self, pointer: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (pointer, False),
            "version": 3,
            "strides": None,
        }


class SharedBuffer:
    """A mapped shared buffer: ``view(offset, shape, dtype)`` gives tensors over it. ``fd`` is the exportable
    descriptor (the creator's; an importer's is closed once mapped)."""

    def __init__(self, device: str, nbytes: int, fd: int, raw: torch.Tensor, release: Any) -> None:
        self.device, self.nbytes, self.fd, self.raw, self._release = device, nbytes, fd, raw, release

    @classmethod
    def create(cls, device: str, nbytes: int) -> SharedBuffer:
        nbytes = max(nbytes, 1)
        if device == "cpu":
            fd = os.memfd_create("cuda-agent-outputs", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, nbytes)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            return cls._map_cpu(fd, nbytes, owner=True)
        return cls._cuda_buffer(nbytes, fd=None)

    @classmethod
    def attach(cls, device: str, fd: int, nbytes: int) -> SharedBuffer:
        """Map a buffer another process created; ``fd`` is consumed."""
        if device == "cpu":
            size = os.fstat(fd).st_size
            if size < nbytes:
                os.close(fd)
                raise SharedBufferError(f"shared buffer of {size} bytes, {nbytes} announced")
            return cls._map_cpu(fd, nbytes, owner=False)
        return cls._cuda_buffer(nbytes, fd=fd)

    @classmethod
    def _map_cpu(cls, fd: int, nbytes: int, *, owner: bool) -> SharedBuffer:
        mapping = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        if not owner:
            os.close(fd)
            fd = -1
        raw = torch.frombuffer(mapping, dtype=torch.uint8)

        def release() -> None:
            if fd >= 0:
                os.close(fd)
            # The mapping is unmapped when its last tensor is gone; closing it under a live tensor would fault.

        return cls("cpu", nbytes, fd, raw, release)

    @classmethod
    def _cuda_buffer(cls, nbytes: int, fd: int | None) -> SharedBuffer:
        cu = _cuda()
        device = torch.cuda.current_device()
        prop = _prop(device)
        granularity = ctypes.c_size_t()
        _check(
            cu.cuMemGetAllocationGranularity(
                ctypes.byref(granularity), ctypes.byref(prop), _CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
            ),
            "cuMemGetAllocationGranularity",
        )
        size = -(-nbytes // granularity.value) * granularity.value
        handle = ctypes.c_ulonglong()
        if fd is None:
            _check(cu.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), 0), "cuMemCreate")
            exported = ctypes.c_int(-1)
            _check(
                cu.cuMemExportToShareableHandle(
                    ctypes.byref(exported), handle, _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, ctypes.c_ulonglong(0)
                ),
                "cuMemExportToShareableHandle",
            )
            own_fd = exported.value
        else:
            result = cu.cuMemImportFromShareableHandle(
                ctypes.byref(handle), ctypes.c_void_p(fd), _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
            )
            os.close(fd)
            _check(result, "cuMemImportFromShareableHandle")
            own_fd = -1
        pointer = ctypes.c_ulonglong()
        mapped = False
        try:
            _check(
                cu.cuMemAddressReserve(
                    ctypes.byref(pointer), ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_ulonglong(0), 0
                ),
                "cuMemAddressReserve",
            )
            # An imported allocation smaller than announced fails here rather than faulting later.
            _check(cu.cuMemMap(pointer, ctypes.c_size_t(size), ctypes.c_size_t(0), handle, 0), "cuMemMap")
            mapped = True
            access = _AccessDesc(_Location(_CU_MEM_LOCATION_TYPE_DEVICE, device), _CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            _check(
                cu.cuMemSetAccess(pointer, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1)), "access"
            )
        except SharedBufferError:
            if mapped:
                cu.cuMemUnmap(pointer, ctypes.c_size_t(size))
            if pointer.value:
                cu.cuMemAddressFree(pointer, ctypes.c_size_t(size))
            cu.cuMemRelease(handle)
            if own_fd >= 0:
                os.close(own_fd)
            raise
        raw = torch.as_tensor(_CudaArray(pointer.value, nbytes), device="cuda")

        def release() -> None:
            torch.cuda.synchronize()
            cu.cuMemUnmap(pointer, ctypes.c_size_t(size))
            cu.cuMemAddressFree(pointer, ctypes.c_size_t(size))
            cu.cuMemRelease(handle)
            if own_fd >= 0:
                os.close(own_fd)

        return cls("cuda", nbytes, own_fd, raw, release)

    def view(self, offset: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        count = 1
        for n in shape:
            count *= n
        width = torch.empty((), dtype=dtype).element_size()
        if offset < 0 or offset % 16 or offset + count * width > self.nbytes:
            raise SharedBufferError(f"view [{offset}, +{count * width}) outside the {self.nbytes}-byte buffer")
        return self.raw[offset : offset + count * width].view(dtype).view(shape)

    def close(self) -> None:
        """Release the memory; every tensor from ``view`` must be gone (the caller drops them first)."""
        self.raw = torch.empty(0, dtype=torch.uint8)
        self._release()
